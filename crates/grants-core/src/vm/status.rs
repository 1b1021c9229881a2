//! The provider's words for a VM and for a step that failed, as every layer
//! speaks them (contract 3.12): the provider adapter parses its wire into
//! these once, the driver decides on them, storage records them. A status
//! keeps its provider spelling (the `vmStatus` tenants see); a failure keeps
//! the `failure.code` of the contract.

use std::fmt;

/// A VM's status as the provider reports it (Compute Engine's lifecycle).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VmStatus {
    /// Resources are being allocated (`PROVISIONING`).
    Provisioning,
    /// Being prepared for its first boot (`STAGING`).
    Staging,
    /// Booting or running (`RUNNING`).
    Running,
    /// Being stopped (`STOPPING`).
    Stopping,
    /// Stopped (`TERMINATED`, what `instances.stop` leads to).
    Terminated,
    /// Stopped (`STOPPED`, in the API's list beside `TERMINATED`).
    Stopped,
    /// Being suspended (`SUSPENDING`).
    Suspending,
    /// Suspended: its memory kept, no vCPU running (`SUSPENDED`).
    Suspended,
    /// Being repaired by the provider (`REPAIRING`).
    Repairing,
    /// Accepted, not yet provisioning (`PENDING`).
    Pending,
    /// Being given back after a delete (`DEPROVISIONING`).
    Deprovisioning,
    /// A status this product does not know, kept as the provider spelled it.
    Other(String),
}

impl VmStatus {
    /// From the provider's spelling; anything unknown is kept as
    /// [`VmStatus::Other`].
    pub fn parse(text: &str) -> VmStatus {
        match text {
            "PROVISIONING" => VmStatus::Provisioning,
            "STAGING" => VmStatus::Staging,
            "RUNNING" => VmStatus::Running,
            "STOPPING" => VmStatus::Stopping,
            "TERMINATED" => VmStatus::Terminated,
            "STOPPED" => VmStatus::Stopped,
            "SUSPENDING" => VmStatus::Suspending,
            "SUSPENDED" => VmStatus::Suspended,
            "REPAIRING" => VmStatus::Repairing,
            "PENDING" => VmStatus::Pending,
            "DEPROVISIONING" => VmStatus::Deprovisioning,
            other => VmStatus::Other(other.to_owned()),
        }
    }

    /// The provider's spelling, as recorded in `vmStatus`.
    pub fn as_str(&self) -> &str {
        match self {
            VmStatus::Provisioning => "PROVISIONING",
            VmStatus::Staging => "STAGING",
            VmStatus::Running => "RUNNING",
            VmStatus::Stopping => "STOPPING",
            VmStatus::Terminated => "TERMINATED",
            VmStatus::Stopped => "STOPPED",
            VmStatus::Suspending => "SUSPENDING",
            VmStatus::Suspended => "SUSPENDED",
            VmStatus::Repairing => "REPAIRING",
            VmStatus::Pending => "PENDING",
            VmStatus::Deprovisioning => "DEPROVISIONING",
            VmStatus::Other(text) => text,
        }
    }

    /// Whether the VM is running: what a create or a start aims at, and
    /// what a `stopped` instance's VM must not be.
    pub fn is_running(&self) -> bool {
        *self == VmStatus::Running
    }

    /// Whether the VM is powered off (stopped or suspended): what a stop
    /// aims at, and what a `running` instance's VM must not be. The one
    /// list of off statuses the driver and the listings share.
    pub fn is_off(&self) -> bool {
        matches!(
            self,
            VmStatus::Terminated | VmStatus::Stopped | VmStatus::Suspended
        )
    }
}

impl fmt::Display for VmStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a step failed for good: its `failure.code` (contract 3.12).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StepFailure {
    /// The provider's own reason: the first error code of a `DONE`
    /// operation (`CONDITION_NOT_MET`, `ZONE_RESOURCE_POOL_EXHAUSTED`,
    /// `QUOTA_EXCEEDED`, ...) or the reason of a final refusal (`notFound`
    /// for a create naming a missing image or network).
    Provider(String),
    /// The step's deadline passed (`timeout`).
    Timeout,
    /// The VM's name is held by a VM that is not this instance's
    /// (`name-taken`).
    NameTaken,
    /// The provider refused for good without a reason, or the request
    /// could not be made (`provider-error`).
    ProviderError,
    /// The step's provider account no longer exists (`no-account`).
    NoAccount,
    /// The VM is gone (`not-found`): the instance is lost, not failed.
    Vanished,
}

impl StepFailure {
    /// The `failure.code` recorded for it.
    pub fn code(&self) -> &str {
        match self {
            StepFailure::Provider(code) => code,
            StepFailure::Timeout => "timeout",
            StepFailure::NameTaken => "name-taken",
            StepFailure::ProviderError => "provider-error",
            StepFailure::NoAccount => "no-account",
            StepFailure::Vanished => "not-found",
        }
    }

    /// A provider's reason; an empty one is [`StepFailure::ProviderError`].
    pub fn provider(code: &str) -> StepFailure {
        if code.is_empty() {
            StepFailure::ProviderError
        } else {
            StepFailure::Provider(code.to_owned())
        }
    }

    /// Whether the VM was found gone (the instance is lost).
    pub fn vanished(&self) -> bool {
        *self == StepFailure::Vanished
    }

    /// Whether an on-demand create may go on in the pool's next zone: the
    /// zone had no capacity left.
    pub fn zone_exhausted(&self) -> bool {
        matches!(self, StepFailure::Provider(code) if code == "ZONE_RESOURCE_POOL_EXHAUSTED")
    }
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KNOWN: [VmStatus; 11] = [
        VmStatus::Provisioning,
        VmStatus::Staging,
        VmStatus::Running,
        VmStatus::Stopping,
        VmStatus::Terminated,
        VmStatus::Stopped,
        VmStatus::Suspending,
        VmStatus::Suspended,
        VmStatus::Repairing,
        VmStatus::Pending,
        VmStatus::Deprovisioning,
    ];

    #[test]
    fn known_statuses_round_trip_and_nothing_known_reads_as_other() {
        for status in KNOWN {
            assert_eq!(VmStatus::parse(status.as_str()), status);
        }
        assert_eq!(
            VmStatus::parse("running"),
            VmStatus::Other("running".into())
        );
    }

    #[test]
    fn running_and_off_are_disjoint_and_off_is_stopped_or_suspended() {
        let off: Vec<_> = KNOWN.iter().filter(|s| s.is_off()).collect();
        assert_eq!(
            off,
            [
                &VmStatus::Terminated,
                &VmStatus::Stopped,
                &VmStatus::Suspended
            ]
        );
        assert!(KNOWN.iter().all(|s| !(s.is_off() && s.is_running())));
        assert!(!VmStatus::Stopping.is_off() && !VmStatus::Staging.is_running());
    }

    #[test]
    fn failure_codes_are_the_contracts() {
        let codes: Vec<&str> = [
            StepFailure::Timeout,
            StepFailure::NameTaken,
            StepFailure::ProviderError,
            StepFailure::NoAccount,
            StepFailure::Vanished,
        ]
        .iter()
        .map(StepFailure::code)
        .collect::<Vec<_>>();
        assert_eq!(
            codes,
            [
                "timeout",
                "name-taken",
                "provider-error",
                "no-account",
                "not-found"
            ]
        );
        assert_eq!(StepFailure::provider(""), StepFailure::ProviderError);
        assert!(StepFailure::provider("ZONE_RESOURCE_POOL_EXHAUSTED").zone_exhausted());
        assert!(!StepFailure::provider("CONDITION_NOT_MET").zone_exhausted());
        assert!(StepFailure::Vanished.vanished() && !StepFailure::Timeout.vanished());
    }

    proptest! {
        /// Any spelling the provider may send is kept exactly: what is
        /// recorded is what it said.
        #[test]
        fn every_spelling_is_kept(text in "[A-Za-z_]{1,16}") {
            let status = VmStatus::parse(&text);
            prop_assert_eq!(status.as_str(), text.as_str());
        }

        /// A provider reason is its own code unless empty.
        #[test]
        fn a_provider_reason_is_its_code(code in "[A-Za-z_]{0,24}") {
            let failure = StepFailure::provider(&code);
            if code.is_empty() {
                prop_assert_eq!(failure.code(), "provider-error");
            } else {
                prop_assert_eq!(failure.code(), code.as_str());
            }
        }
    }
}
