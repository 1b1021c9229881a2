//! How fast a worker sends mutating calls to each provider account
//! (contract 3.12 r4): at most `BC_VM_WRITES_PER_MIN` per wall-clock minute,
//! none after a rate-quota refusal until the next minute (or the provider's
//! `Retry-After`), and no new operation after a concurrent-operations
//! refusal until one of the account's operations is done.
//!
//! The budget is this process's: replicas do not share it, so an operator
//! running several sets `BC_VM_WRITES_PER_MIN` to the project's quota divided
//! by their number (docs/operations.md). A refusal from the provider pauses
//! this replica at once either way.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use providers::Throttle;

/// The longest a concurrent-operations pause lasts without seeing one of the
/// account's operations end here (another replica's may have ended).
const CONCURRENT_PAUSE_MS: i64 = 5_000;

const MINUTE_MS: i64 = 60_000;

/// Every account's pace in this process.
#[derive(Debug)]
pub struct Pacer {
    writes_per_min: u32,
    accounts: Mutex<HashMap<String, AccountPace>>,
}

#[derive(Debug, Default, Clone)]
struct AccountPace {
    /// The wall-clock minute (epoch ms / 60 000) `used` counts.
    window: i64,
    /// Mutating calls sent in `window`.
    used: u32,
    /// No mutating call before this instant (epoch ms).
    paused_until: i64,
}

impl Pacer {
    /// A pacer allowing `writes_per_min` mutating calls per account and
    /// minute (at least 1).
    pub fn new(writes_per_min: u32) -> Pacer {
        Pacer {
            writes_per_min: writes_per_min.max(1),
            accounts: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one mutating call of `account`'s budget at `now_ms` (epoch ms,
    /// wall clock), or says how long to wait before asking again.
    pub fn try_send(&self, account: &str, now_ms: i64) -> Result<(), Duration> {
        let mut accounts = self.lock();
        let pace = accounts.entry(account.to_owned()).or_default();
        if now_ms < pace.paused_until {
            return Err(wait(pace.paused_until - now_ms));
        }
        let window = now_ms.div_euclid(MINUTE_MS);
        if window != pace.window {
            pace.window = window;
            pace.used = 0;
        }
        if pace.used >= self.writes_per_min {
            return Err(wait((window + 1) * MINUTE_MS - now_ms));
        }
        pace.used += 1;
        Ok(())
    }

    /// The provider refused a call of `account` at `now_ms` for `quota`:
    /// no mutating call until the next minute (or `retry_after`, if later)
    /// for the rate quota, until one of its operations ends (at most a few
    /// seconds) for the concurrent operations. Returns the pause.
    pub fn throttled(
        &self,
        account: &str,
        quota: Throttle,
        retry_after: Option<Duration>,
        now_ms: i64,
    ) -> Duration {
        let mut accounts = self.lock();
        let pace = accounts.entry(account.to_owned()).or_default();
        let retry = retry_after.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let until = match quota {
            Throttle::Rate => {
                let window = now_ms.div_euclid(MINUTE_MS);
                // This window is spent: nothing more is sent in it.
                pace.window = window;
                pace.used = self.writes_per_min;
                ((window + 1) * MINUTE_MS).max(now_ms.saturating_add(retry))
            }
            Throttle::ConcurrentOperations => now_ms.saturating_add(retry.max(CONCURRENT_PAUSE_MS)),
        };
        pace.paused_until = pace.paused_until.max(until);
        wait(pace.paused_until - now_ms)
    }

    /// One of `account`'s operations ended: a concurrent-operations pause
    /// (one that is not a rate quota's) ends now.
    pub fn operation_done(&self, account: &str, now_ms: i64) {
        let mut accounts = self.lock();
        if let Some(pace) = accounts.get_mut(account) {
            let rate_window_spent =
                pace.used >= self.writes_per_min && pace.window == now_ms.div_euclid(MINUTE_MS);
            if !rate_window_spent && pace.paused_until > now_ms {
                pace.paused_until = now_ms;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AccountPace>> {
        // A panic while holding it leaves consistent data (plain counters).
        self.accounts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn wait(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000; // a minute boundary (divisible by 60 000)

    #[test]
    fn the_budget_is_per_account_and_minute_and_refills_at_the_minute() {
        let pacer = Pacer::new(3);
        for i in 0..3 {
            assert!(pacer.try_send("a", T0 + i).is_ok());
        }
        assert_eq!(
            pacer.try_send("a", T0 + 10_000),
            Err(Duration::from_millis(50_000))
        );
        assert!(
            pacer.try_send("b", T0 + 10_000).is_ok(),
            "another account's budget"
        );
        assert!(
            pacer.try_send("a", T0 + MINUTE_MS).is_ok(),
            "the next minute"
        );
    }

    #[test]
    fn a_rate_refusal_pauses_until_the_next_minute_or_retry_after() {
        let pacer = Pacer::new(100);
        let pause = pacer.throttled("a", Throttle::Rate, None, T0 + 45_000);
        assert_eq!(pause, Duration::from_millis(15_000));
        assert!(
            pacer.try_send("a", T0 + 59_999).is_err(),
            "not within the window"
        );
        assert!(pacer.try_send("a", T0 + MINUTE_MS).is_ok());
        let pause = pacer.throttled(
            "a",
            Throttle::Rate,
            Some(Duration::from_secs(90)),
            T0 + 61_000,
        );
        assert_eq!(pause, Duration::from_secs(90));
        // An operation ending does not lift a rate pause.
        pacer.operation_done("a", T0 + 62_000);
        assert!(pacer.try_send("a", T0 + 62_000).is_err());
    }

    #[test]
    fn a_concurrent_operations_refusal_pauses_until_an_operation_ends() {
        let pacer = Pacer::new(100);
        let pause = pacer.throttled("a", Throttle::ConcurrentOperations, None, T0);
        assert_eq!(pause, Duration::from_millis(5_000));
        assert!(pacer.try_send("a", T0 + 1_000).is_err());
        pacer.operation_done("a", T0 + 2_000);
        assert!(pacer.try_send("a", T0 + 2_000).is_ok());
        // Without an operation seen ending, the pause ends on its own.
        pacer.throttled("a", Throttle::ConcurrentOperations, None, T0 + 3_000);
        assert!(pacer.try_send("a", T0 + 8_000).is_ok());
    }
}
