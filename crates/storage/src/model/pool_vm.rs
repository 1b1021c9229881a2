//! `pools.vm`: what makes a pool managed (contract 3.3, 3.12), as stored and
//! answered. The API checks its shape; [`PoolVm::zone_outside`] is the rule
//! a schema cannot state.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The VM settings of a managed pool, with its defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolVm {
    /// The boot image: a GCE image URL or `projects/{p}/global/images/...`.
    pub image: String,
    /// The zones of on-demand VMs, tried in order.
    pub zones: Vec<String>,
    /// The VPC network.
    pub network: String,
    /// The subnetwork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnetwork: Option<String>,
    /// The boot disk's size in GB.
    pub disk_gb: i64,
    /// The service account the VM runs as (an email).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Labels put on every VM of the pool.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The label keys the platform sets on every VM, which a pool may not set.
pub const RESERVED_LABELS: [&str; 4] = ["bc-instance", "bc-pool", "bc-managed", "bc-installation"];

/// The default network of a managed pool.
pub const DEFAULT_NETWORK: &str = "global/networks/default";

/// The default boot disk size in GB.
pub const DEFAULT_DISK_GB: i64 = 20;

impl PoolVm {
    /// The first zone not in `region` (`us-central1-a` is in `us-central1`).
    pub fn zone_outside(&self, region: &str) -> Option<&str> {
        self.zones
            .iter()
            .find(|z| z.rsplit_once('-').is_none_or(|(r, _)| r != region))
            .map(String::as_str)
    }

    /// The first of the pool's labels whose key the platform reserves.
    pub fn reserved_label(&self) -> Option<&str> {
        self.labels
            .keys()
            .find(|k| RESERVED_LABELS.contains(&k.as_str()))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(zones: &[&str]) -> PoolVm {
        PoolVm {
            image: "projects/debian-cloud/global/images/family/debian-12".into(),
            zones: zones.iter().map(|z| (*z).to_owned()).collect(),
            network: DEFAULT_NETWORK.into(),
            subnetwork: None,
            disk_gb: DEFAULT_DISK_GB,
            service_account: None,
            labels: BTreeMap::from([("bc-pool".to_owned(), "x".to_owned())]),
        }
    }

    #[test]
    fn zones_must_be_in_the_region() {
        assert_eq!(
            vm(&["us-central1-a", "us-central1-b"]).zone_outside("us-central1"),
            None
        );
        assert_eq!(
            vm(&["us-central1-a", "us-east1-b"]).zone_outside("us-central1"),
            Some("us-east1-b")
        );
        assert_eq!(
            vm(&["nohyphen"]).zone_outside("us-central1"),
            Some("nohyphen")
        );
    }

    #[test]
    fn platform_labels_are_reserved() {
        assert_eq!(vm(&[]).reserved_label(), Some("bc-pool"));
    }
}
