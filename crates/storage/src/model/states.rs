//! The states stored in text columns, as enums. Each maps to its column's
//! text both ways; a row holding any other text fails to load (a corrupt row
//! is an error, never silently read as some default state).

use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
use diesel::pg::{Pg, PgValue};
use diesel::serialize::{self, Output, ToSql};
use diesel::sql_types::Text;

/// Declares an enum stored as the listed texts of a `text` column.
macro_rules! text_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
        #[diesel(sql_type = Text)]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }

        impl $name {
            /// The text stored in the column (and shown on the wire).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The state a column text names.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ToSql<Text, Pg> for $name {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                <str as ToSql<Text, Pg>>::to_sql(self.as_str(), out)
            }
        }

        impl FromSql<Text, Pg> for $name {
            fn from_sql(value: PgValue<'_>) -> deserialize::Result<$name> {
                let text = <String as FromSql<Text, Pg>>::from_sql(value)?;
                $name::parse(&text).ok_or_else(|| {
                    format!(concat!("unknown ", stringify!($name), " {:?}"), text).into()
                })
            }
        }
    };
}

text_enum! {
    /// `tenants.state`.
    TenantState {
        /// Its keys work.
        Active = "active",
        /// Deleted: its keys stop working, its name is never reused.
        Deleted = "deleted",
    }
}

text_enum! {
    /// `instances.state`.
    InstanceState {
        /// Running.
        Running = "running",
        /// Stopped (in a grant it keeps its slot).
        Stopped = "stopped",
        /// Deleted (kept, so a client can see what happened).
        Deleted = "deleted",
        /// Managed: admitted, its VM being created.
        Provisioning = "provisioning",
        /// Managed: a stop was requested, its VM not yet seen stopped.
        Stopping = "stopping",
        /// Managed: a start was requested, its VM not yet seen running.
        Starting = "starting",
        /// Managed: a delete was requested, its VM not yet seen gone.
        Deleting = "deleting",
        /// Managed: its create failed; it holds nothing.
        Failed = "failed",
    }
}

impl InstanceState {
    /// As the pure lifecycle of managed instances sees it.
    pub fn to_vm(self) -> grants_core::vm::VmState {
        use grants_core::vm::VmState as V;
        match self {
            InstanceState::Running => V::Running,
            InstanceState::Stopped => V::Stopped,
            InstanceState::Deleted => V::Deleted,
            InstanceState::Provisioning => V::Provisioning,
            InstanceState::Stopping => V::Stopping,
            InstanceState::Starting => V::Starting,
            InstanceState::Deleting => V::Deleting,
            InstanceState::Failed => V::Failed,
        }
    }

    /// The stored state of a lifecycle state.
    pub fn from_vm(state: grants_core::vm::VmState) -> InstanceState {
        use grants_core::vm::VmState as V;
        match state {
            V::Running => InstanceState::Running,
            V::Stopped => InstanceState::Stopped,
            V::Deleted => InstanceState::Deleted,
            V::Provisioning => InstanceState::Provisioning,
            V::Stopping => InstanceState::Stopping,
            V::Starting => InstanceState::Starting,
            V::Deleting => InstanceState::Deleting,
            V::Failed => InstanceState::Failed,
        }
    }

    /// Whether it is gone for good (`deleted` or `failed`): it holds no
    /// slot and no quota.
    pub fn is_final(self) -> bool {
        matches!(self, InstanceState::Deleted | InstanceState::Failed)
    }
}

text_enum! {
    /// `reservations.status`, from the last scan.
    ReservationStatus {
        /// Serves instances.
        Ready = "ready",
        /// Seen, but the provider does not report it usable.
        NotReady = "not-ready",
        /// A scan no longer found it.
        Gone = "gone",
    }
}

text_enum! {
    /// `grants.settled_state`: which transitions of a grant have been applied
    /// (and their events published). A grant's state at an instant is derived
    /// from its term (`grants_core::grant_state`); this records settlement.
    SettledState {
        /// Nothing applied yet.
        Scheduled = "scheduled",
        /// The take-in at `startsAt` applied.
        Active = "active",
        /// The hand-over at `endsAt` applied.
        Ended = "ended",
        /// Ended before it started.
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// `instances.deleted_reason`: why a managed instance is deleted.
    DeletedReason {
        /// `instances.delete`.
        Requested = "requested",
        /// Its VM vanished at the provider.
        Lost = "lost",
        /// Its tenant was deleted.
        TenantDeleted = "tenant-deleted",
        /// An interruptible instance whose lent slot its grantee took back,
        /// or whose lending grant ended or stopped lending (contract 3.14).
        Reclaimed = "reclaimed",
    }
}

text_enum! {
    /// `instances.placement_kind` and `placement_segments.kind`: where an
    /// instance sits (contract 3.7's `placement.kind`).
    PlacementKind {
        /// In a grant.
        Grant = "grant",
        /// In a slot a lending grant lent (an interruptible instance).
        Lent = "lent",
        /// On an ordinary slot of a reservation.
        Reservation = "reservation",
        /// On-demand.
        OnDemand = "ondemand",
        /// Nowhere.
        None = "none",
    }
}

text_enum! {
    /// `vm_steps.state`.
    StepState {
        /// To do or in flight.
        Open = "open",
        /// Succeeded.
        Done = "done",
        /// Failed for good.
        Failed = "failed",
    }
}

text_enum! {
    /// `instances.billing`: who pays for an instance's hours.
    InstanceBilling {
        /// The tenant pays (the default).
        Standard = "standard",
        /// Nobody does (root only, platform instances).
        None = "none",
    }
}

impl InstanceBilling {
    /// As the core crates see it.
    pub fn to_core(self) -> grants_core::Billing {
        match self {
            InstanceBilling::Standard => grants_core::Billing::Standard,
            InstanceBilling::None => grants_core::Billing::None,
        }
    }

    /// From the core crates' type.
    pub fn from_core(billing: grants_core::Billing) -> InstanceBilling {
        match billing {
            grants_core::Billing::Standard => InstanceBilling::Standard,
            grants_core::Billing::None => InstanceBilling::None,
        }
    }
}

impl SettledState {
    /// The states settlement still moves.
    pub const OPEN: [SettledState; 2] = [SettledState::Scheduled, SettledState::Active];
}

text_enum! {
    /// `audit_records.outcome` (contract 3.11).
    AuditOutcome {
        /// The mutation succeeded.
        Ok = "ok",
        /// The decision refused it (`ACCESS_DENIED`).
        Denied = "denied",
        /// A retry of an idempotent create: the existing object was returned.
        Replayed = "replayed",
        /// It failed after authentication, with the code it answered.
        Failed = "failed",
    }
}

text_enum! {
    /// `secrets.kind`: what a secret's value is, as `secrets.put` classified
    /// it.
    SecretKind {
        /// A Google service-account key (JSON).
        ServiceAccount = "service-account",
        /// A bearer token sent as it is.
        Token = "token",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_its_own_text_and_nothing_else() {
        for s in [
            InstanceState::Running,
            InstanceState::Stopped,
            InstanceState::Deleted,
        ] {
            assert_eq!(InstanceState::parse(s.as_str()), Some(s));
        }
        for s in [
            ReservationStatus::Ready,
            ReservationStatus::NotReady,
            ReservationStatus::Gone,
        ] {
            assert_eq!(ReservationStatus::parse(s.as_str()), Some(s));
        }
        for s in [TenantState::Active, TenantState::Deleted] {
            assert_eq!(TenantState::parse(s.as_str()), Some(s));
        }
        for s in [
            SettledState::Scheduled,
            SettledState::Active,
            SettledState::Ended,
            SettledState::Cancelled,
        ] {
            assert_eq!(SettledState::parse(s.as_str()), Some(s));
        }
        for s in [InstanceBilling::Standard, InstanceBilling::None] {
            assert_eq!(InstanceBilling::parse(s.as_str()), Some(s));
            assert_eq!(s.to_core().as_str(), s.as_str());
        }
        for s in [
            AuditOutcome::Ok,
            AuditOutcome::Denied,
            AuditOutcome::Replayed,
            AuditOutcome::Failed,
        ] {
            assert_eq!(AuditOutcome::parse(s.as_str()), Some(s));
        }
        assert_eq!(InstanceState::parse("Running"), None);
        assert_eq!(ReservationStatus::parse(""), None);
    }
}
