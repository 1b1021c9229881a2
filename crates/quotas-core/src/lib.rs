#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt;

/// The resource names `instances.create` charges (contract section 3.4).
pub mod resources {
    /// One per instance.
    pub const INSTANCES: &str = "instances";
    /// The flavor's virtual CPUs.
    pub const VCPUS: &str = "vcpus";
    /// The flavor's memory, in GiB.
    pub const MEMORY_GIB: &str = "memoryGib";
    /// The flavor's GPUs.
    pub const GPUS: &str = "gpus";
}

/// One quota counter of a tenant in a pool: how much of `resource` it may
/// hold (`max`) and holds (`used`).
///
/// A missing row grants 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaRow {
    /// The resource name, for example `"vcpus"`.
    pub resource: String,
    /// The maximum the tenant may hold at the same time.
    pub max: i64,
    /// What the tenant holds now.
    pub used: i64,
}

impl QuotaRow {
    /// A row of `resource` with the given `max` and `used`.
    pub fn new(resource: impl Into<String>, max: i64, used: i64) -> QuotaRow {
        QuotaRow {
            resource: resource.into(),
            max,
            used,
        }
    }

    /// `max - used`, never below 0 (and without overflow for any values).
    ///
    /// ```
    /// use quotas_core::QuotaRow;
    ///
    /// assert_eq!(QuotaRow::new("vcpus", 16, 4).available(), 12);
    /// assert_eq!(QuotaRow::new("vcpus", 4, 16).available(), 0);
    /// ```
    pub fn available(&self) -> i64 {
        self.max.saturating_sub(self.used).max(0)
    }
}

/// An amount of one resource to charge or release.
///
/// `amount` is meant to be at least 0; [`charge`] and [`release`] treat a
/// negative amount as 0, so a caller's mistake can neither lower nor raise a
/// counter the wrong way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Charge {
    /// The resource name, for example `"vcpus"`.
    pub resource: String,
    /// How much of it.
    pub amount: i64,
}

impl Charge {
    /// A charge of `amount` of `resource`.
    pub fn new(resource: impl Into<String>, amount: i64) -> Charge {
        Charge {
            resource: resource.into(),
            amount,
        }
    }
}

/// An admission that does not fit a quota (`QUOTA_EXCEEDED`, whose `details`
/// carry these fields plus the pool id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaExceeded {
    /// The resource that does not fit.
    pub resource: String,
    /// Its maximum (0 when the tenant has no row for it).
    pub max: i64,
    /// What the tenant holds of it (0 when it has no row for it).
    pub used: i64,
    /// What the request asked for, summed over the request's charges of the
    /// resource (`i64::MAX` if that sum overflows).
    pub requested: i64,
}

impl fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "quota exceeded for {}: requested {}, used {} of {}",
            self.resource, self.requested, self.used, self.max
        )
    }
}

impl std::error::Error for QuotaExceeded {}

/// Sums the charges per resource, in the order each resource first appears,
/// treating negative amounts as 0 and dropping resources whose total is 0.
/// A sum that overflows is `None`.
fn totals(charges: &[Charge]) -> Vec<(&str, Option<i64>)> {
    let mut out: Vec<(&str, Option<i64>)> = Vec::new();
    for c in charges {
        let amount = c.amount.max(0);
        match out.iter_mut().find(|(r, _)| *r == c.resource) {
            Some((_, total)) => *total = total.and_then(|t| t.checked_add(amount)),
            None => out.push((c.resource.as_str(), Some(amount))),
        }
    }
    out.retain(|(_, total)| *total != Some(0));
    out
}

/// All-or-nothing admission: charges `charges` against the tenant's current
/// `rows` of one pool.
///
/// Returns **all** of `rows`, in their order, with `used` raised on the
/// charged ones (rows no charge names come back unchanged; a caller that
/// wants to write only what changed compares each returned row with its
/// input row). On the first charge that does not fit, returns it as
/// [`QuotaExceeded`] and nothing is charged.
///
/// - Rows are expected to be unique by resource; if not, the first row of a
///   resource is the one charged.
/// - A resource without a row grants 0, so any positive amount of it does not
///   fit.
/// - Zero amounts are not charged and never fail, even without a row; negative
///   amounts count as 0.
/// - Several charges of the same resource are summed, and the sum must fit.
/// - A charge fits when `used + amount <= max`; a sum that would overflow
///   `i64` does not fit.
/// - "First" is the order in which each resource first appears in `charges`.
///
/// ```
/// use quotas_core::{charge, Charge, QuotaRow};
///
/// let rows = vec![QuotaRow::new("instances", 10, 9), QuotaRow::new("vcpus", 64, 60)];
/// let after =
///     charge(&rows, &[Charge::new("instances", 1), Charge::new("vcpus", 4)]).expect("fits");
/// assert_eq!(after, vec![QuotaRow::new("instances", 10, 10), QuotaRow::new("vcpus", 64, 64)]);
///
/// let err = charge(&after, &[Charge::new("vcpus", 1)]).expect_err("does not fit");
/// assert_eq!((err.max, err.used, err.requested), (64, 64, 1));
/// ```
pub fn charge(rows: &[QuotaRow], charges: &[Charge]) -> Result<Vec<QuotaRow>, QuotaExceeded> {
    let mut out = rows.to_vec();
    for (resource, total) in totals(charges) {
        let row = out.iter_mut().find(|r| r.resource == resource);
        let (max, used) = row.as_ref().map_or((0, 0), |r| (r.max, r.used));
        let new_used = total.and_then(|t| used.checked_add(t));
        match (row, new_used) {
            (Some(row), Some(n)) if n <= max => row.used = n,
            _ => {
                return Err(QuotaExceeded {
                    resource: resource.to_string(),
                    max,
                    used,
                    requested: total.unwrap_or(i64::MAX),
                });
            }
        }
    }
    Ok(out)
}

/// Releases `charges` from the tenant's `rows` of one pool.
///
/// Returns **all** of `rows`, in their order, with `used` lowered on the
/// released ones, never below 0. A resource without a row has nothing to
/// release and is ignored; zero and negative amounts release nothing;
/// several charges of the same resource are summed. As with [`charge`], the
/// first row of a resource is the one released.
///
/// ```
/// use quotas_core::{release, Charge, QuotaRow};
///
/// let rows = vec![QuotaRow::new("gpus", 8, 2)];
/// let after = release(&rows, &[Charge::new("gpus", 5), Charge::new("vcpus", 4)]);
/// assert_eq!(after, vec![QuotaRow::new("gpus", 8, 0)]);
/// ```
pub fn release(rows: &[QuotaRow], charges: &[Charge]) -> Vec<QuotaRow> {
    let mut out = rows.to_vec();
    for (resource, total) in totals(charges) {
        if let Some(row) = out.iter_mut().find(|r| r.resource == resource) {
            // An overflowing total releases everything.
            let total = total.unwrap_or(i64::MAX);
            row.used = row.used.saturating_sub(total).max(0);
        }
    }
    out
}

/// The `max` that takes effect when `quotas.set` asks for `requested` on a row
/// that has `used`: a maximum below `used` is raised to `used`.
///
/// ```
/// use quotas_core::effective_max;
///
/// assert_eq!(effective_max(10, 4), 10);
/// assert_eq!(effective_max(2, 4), 4);
/// ```
pub fn effective_max(requested: i64, used: i64) -> i64 {
    requested.max(used)
}

/// The charges of one instance of a flavor (contract section 3.4):
/// `instances` 1, then `vcpus`, `memoryGib` and `gpus` from the flavor. A zero
/// amount is omitted (a negative one too: it is not a valid flavor).
///
/// ```
/// use quotas_core::{instance_charges, Charge};
///
/// assert_eq!(
///     instance_charges(4, 16, 0),
///     vec![Charge::new("instances", 1), Charge::new("vcpus", 4), Charge::new("memoryGib", 16)],
/// );
/// ```
pub fn instance_charges(vcpus: i64, memory_gib: i64, gpus: i64) -> Vec<Charge> {
    [
        (resources::INSTANCES, 1),
        (resources::VCPUS, vcpus),
        (resources::MEMORY_GIB, memory_gib),
        (resources::GPUS, gpus),
    ]
    .into_iter()
    .filter(|(_, amount)| *amount > 0)
    .map(|(resource, amount)| Charge::new(resource, amount))
    .collect()
}

#[cfg(test)]
mod tests;
