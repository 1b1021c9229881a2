//! Request rates (contract 1.7 r4): a token bucket per tenant, shared by
//! all its keys, checked right after authentication and before anything
//! else is read or written; root only when `BC_ROOT_RATE` is set; the
//! unauthenticated requests (the health, metrics and document paths, and
//! failed authentications) per client address. The buckets are this
//! process's: N replicas allow up to N times the rate.
//!
//! The buckets are `governor`'s keyed GCRA limiters: one cell per key, no
//! lock shared by two tenants (a tenant at its limit never waits on
//! another's bucket), and buckets full again are dropped now and then so
//! that keys seen once (addresses, above all) do not pile up.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// One rate: `per_second` requests a second, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// The steady rate.
    pub per_second: NonZeroU32,
    /// The bucket's size.
    pub burst: NonZeroU32,
}

impl Rate {
    fn quota(self) -> Quota {
        Quota::per_second(self.per_second).allow_burst(self.burst)
    }
}

/// The rates in force; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    /// Each tenant other than root (`BC_TENANT_RATE`, `BC_TENANT_BURST`;
    /// 50 a second, 200 at once).
    pub tenant: Option<Rate>,
    /// Root (`BC_ROOT_RATE`, `BC_ROOT_BURST`; none unless set).
    pub root: Option<Rate>,
    /// Each client address's unauthenticated requests (`BC_ANON_RATE`,
    /// `BC_ANON_BURST`; 20 a second, 40 at once).
    pub anonymous: Option<Rate>,
}

const fn rate(per_second: u32, burst: u32) -> Option<Rate> {
    match (NonZeroU32::new(per_second), NonZeroU32::new(burst)) {
        (Some(per_second), Some(burst)) => Some(Rate { per_second, burst }),
        _ => None,
    }
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            tenant: rate(50, 200),
            root: None,
            anonymous: rate(20, 40),
        }
    }
}

/// One limit as set: its rate and its burst, `None` where unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateSetting {
    /// Requests a second (`BC_TENANT_RATE`, ...).
    pub rate: Option<u32>,
    /// The bucket's size (`BC_TENANT_BURST`, ...).
    pub burst: Option<u32>,
}

impl Rates {
    /// The rates as set (`BC_TENANT_RATE`, `BC_TENANT_BURST`, `BC_ROOT_RATE`,
    /// `BC_ROOT_BURST`, `BC_ANON_RATE`, `BC_ANON_BURST`): a rate of `0` turns
    /// that limit off; a burst left unset is the default's ratio (4 times
    /// the rate for tenants and root, twice for addresses).
    pub fn from_settings(
        tenant: RateSetting,
        root: RateSetting,
        anonymous: RateSetting,
    ) -> anyhow::Result<Rates> {
        let d = Rates::default();
        Ok(Rates {
            tenant: resolve(tenant, ("BC_TENANT_RATE", "BC_TENANT_BURST"), d.tenant, 4)?,
            root: resolve(root, ("BC_ROOT_RATE", "BC_ROOT_BURST"), d.root, 4)?,
            anonymous: resolve(anonymous, ("BC_ANON_RATE", "BC_ANON_BURST"), d.anonymous, 2)?,
        })
    }
}

/// The rate `set` describes, `default` where it is unset; errors name its
/// variables, `rate_var` and `burst_var`.
fn resolve(
    set: RateSetting,
    (rate_var, burst_var): (&str, &str),
    default: Option<Rate>,
    ratio: u32,
) -> anyhow::Result<Option<Rate>> {
    let (per_second, burst) = match (set.rate, set.burst) {
        (Some(0), _) => return Ok(None),
        (None, None) => return Ok(default),
        (None, Some(burst)) => match default {
            Some(d) => (d.per_second.get(), burst),
            None => anyhow::bail!("{burst_var} is set without {rate_var}"),
        },
        (Some(per_second), Some(burst)) => (per_second, burst),
        (Some(per_second), None) => (per_second, per_second.saturating_mul(ratio)),
    };
    match rate(per_second, burst) {
        Some(r) => Ok(Some(r)),
        None => anyhow::bail!("{burst_var} must be at least 1"),
    }
}

/// How many checks go by between two sweeps of the full buckets.
const SWEEP_EVERY: u64 = 4096;

/// The buckets of one process.
pub struct Limiter {
    rates: Rates,
    tenants: Option<DefaultKeyedRateLimiter<String>>,
    root: Option<DefaultKeyedRateLimiter<()>>,
    addresses: Option<DefaultKeyedRateLimiter<IpAddr>>,
    checks: AtomicU64,
}

/// A refusal: how long until the request would be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

impl RetryAfter {
    /// `details.retryAfterMs`: whole milliseconds, rounded up, at least 1.
    pub fn millis(self) -> u64 {
        u64::try_from(self.0.as_micros().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// The `Retry-After` header: whole seconds, rounded up, at least 1.
    pub fn seconds(self) -> u64 {
        self.millis().div_ceil(1000).max(1)
    }
}

impl Limiter {
    /// The buckets for `rates`.
    pub fn new(rates: Rates) -> Limiter {
        Limiter {
            rates,
            tenants: rates.tenant.map(|r| RateLimiter::keyed(r.quota())),
            root: rates.root.map(|r| RateLimiter::keyed(r.quota())),
            addresses: rates.anonymous.map(|r| RateLimiter::keyed(r.quota())),
            checks: AtomicU64::new(0),
        }
    }

    /// The rates in force.
    pub fn rates(&self) -> Rates {
        self.rates
    }

    /// Takes one request of `tenant`'s rate (root's when `is_root`).
    pub fn tenant(&self, tenant: &str, is_root: bool) -> Result<(), RetryAfter> {
        self.sweep();
        if is_root {
            return check(self.root.as_ref(), &());
        }
        check(self.tenants.as_ref(), &tenant.to_owned())
    }

    /// Takes one unauthenticated request of `address`'s rate.
    pub fn anonymous(&self, address: IpAddr) -> Result<(), RetryAfter> {
        self.sweep();
        check(self.addresses.as_ref(), &address)
    }

    /// Every [`SWEEP_EVERY`] checks, drops the buckets that are full again
    /// (their keys have been quiet long enough to have it all back).
    fn sweep(&self) {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY != SWEEP_EVERY - 1 {
            return;
        }
        if let Some(l) = &self.tenants {
            l.retain_recent();
            l.shrink_to_fit();
        }
        if let Some(l) = &self.addresses {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }

    /// Buckets held now (tenants and addresses), for tests.
    pub fn held(&self) -> usize {
        self.tenants.as_ref().map_or(0, RateLimiter::len)
            + self.addresses.as_ref().map_or(0, RateLimiter::len)
    }
}

fn check<K>(limiter: Option<&DefaultKeyedRateLimiter<K>>, key: &K) -> Result<(), RetryAfter>
where
    K: std::hash::Hash + Eq + Clone,
{
    match limiter {
        None => Ok(()),
        Some(l) => l.check_key(key).map_err(|not_until| {
            RetryAfter(not_until.wait_time_from(DefaultClock::default().now()))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(tenant: (u32, u32), anon: (u32, u32)) -> Limiter {
        Limiter::new(Rates {
            tenant: rate(tenant.0, tenant.1),
            root: None,
            anonymous: rate(anon.0, anon.1),
        })
    }

    #[test]
    fn a_tenant_gets_its_burst_then_waits_and_another_tenant_is_not_touched() {
        let l = limiter((1, 3), (1, 1));
        for _ in 0..3 {
            assert_eq!(l.tenant("acme", false), Ok(()));
        }
        let refused = l.tenant("acme", false).expect_err("over the burst");
        assert!(refused.0 <= Duration::from_secs(1), "{refused:?}");
        assert!(refused.millis() >= 1 && refused.seconds() == 1);
        assert_eq!(l.tenant("globex", false), Ok(()), "a bucket per tenant");
        // Root is not limited unless BC_ROOT_RATE is set.
        for _ in 0..100 {
            assert_eq!(l.tenant("root", true), Ok(()));
        }
    }

    #[test]
    fn addresses_have_their_own_buckets() {
        let l = limiter((1, 1), (1, 2));
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        assert!(l.anonymous(a).is_ok() && l.anonymous(a).is_ok());
        assert!(l.anonymous(a).is_err());
        assert!(l.anonymous(b).is_ok());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(RetryAfter(Duration::from_micros(1)).millis(), 1);
        assert_eq!(RetryAfter(Duration::from_micros(1_001)).millis(), 2);
        assert_eq!(RetryAfter(Duration::from_millis(1_001)).seconds(), 2);
        assert_eq!(RetryAfter(Duration::from_millis(1_000)).seconds(), 1);
        assert_eq!(RetryAfter(Duration::ZERO).seconds(), 1);
    }

    #[test]
    fn off_limits_allow_everything() {
        let l = Limiter::new(Rates {
            tenant: None,
            root: None,
            anonymous: None,
        });
        for _ in 0..10_000 {
            assert!(l.tenant("acme", false).is_ok());
            assert!(l.anonymous("192.0.2.1".parse().expect("ip")).is_ok());
        }
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn addresses_seen_once_do_not_pile_up() {
        // A high rate refills a bucket within microseconds: swept at once.
        let l = limiter((1_000_000, 1), (1_000_000, 1));
        for i in 0..(2 * SWEEP_EVERY) {
            let octets = u32::try_from(i).expect("small").to_be_bytes();
            let _ = l.anonymous(IpAddr::from(octets));
            std::thread::sleep(Duration::from_micros(2));
        }
        assert!(
            l.held() < usize::try_from(SWEEP_EVERY).expect("small"),
            "{} buckets held",
            l.held()
        );
    }
}
