//! How fast a worker sends mutating calls to each provider account
//! (contract 3.12 r4): at most `BC_VM_WRITES_PER_MIN` per wall-clock minute,
//! none after a rate-quota refusal until the next minute (or the provider's
//! `Retry-After`), and, after a concurrent-operations refusal, no more
//! operations in flight than the account had when it was refused, for a
//! minute. The pipeline claims no more of an account's sending steps than
//! its [`Pacer::allowances`] say (a whole minute's budget for an account not
//! limited now), so the steps sent are taken in the claim's round-robin
//! order and a paused account's steps keep their turn in the database
//! instead of being claimed and refused again.
//!
//! The budget is this process's: replicas do not share it, so an operator
//! running several sets `BC_VM_WRITES_PER_MIN` to the project's quota divided
//! by their number (docs/operations.md). A refusal from the provider paces
//! this replica at once either way.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use providers::Throttle;

/// How long a concurrent-operations pause lasts when this process has no
/// operation of the account in flight (another replica's fill the quota).
const CONCURRENT_PAUSE_MS: i64 = 5_000;

/// How long a cap learned from a concurrent-operations refusal holds.
const CAP_MS: i64 = 60_000;

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
    /// Sends granted whose operation has not been seen ending.
    in_flight: u32,
    /// At most this many in flight, until the instant (epoch ms).
    cap: Option<(u32, i64)>,
}

impl AccountPace {
    /// How many more calls may go now; `None`: no limit but the budget's.
    fn allowance(&mut self, per_min: u32, now_ms: i64) -> u32 {
        if now_ms < self.paused_until {
            return 0;
        }
        let window = now_ms.div_euclid(MINUTE_MS);
        if window != self.window {
            self.window = window;
            self.used = 0;
        }
        let budget = per_min.saturating_sub(self.used);
        match self.cap {
            Some((cap, until)) if now_ms < until => budget.min(cap.saturating_sub(self.in_flight)),
            _ => budget,
        }
    }
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

    /// Takes one mutating call of `account`'s allowance at `now_ms` (epoch
    /// ms, wall clock), or says how long to wait before asking again.
    pub fn try_send(&self, account: &str, now_ms: i64) -> Result<(), Duration> {
        let mut accounts = self.lock();
        let pace = accounts.entry(account.to_owned()).or_default();
        if pace.allowance(self.writes_per_min, now_ms) == 0 {
            let window_end = (pace.window + 1) * MINUTE_MS;
            let until = if now_ms < pace.paused_until {
                pace.paused_until
            } else if pace.used >= self.writes_per_min {
                window_end
            } else {
                // Capped: an operation ending frees a place; look again soon.
                now_ms + 1_000
            };
            return Err(wait(until - now_ms));
        }
        pace.used += 1;
        pace.in_flight += 1;
        Ok(())
    }

    /// A granted call started no operation (refused, failed, or its
    /// operation was already done): it is no longer in flight.
    pub fn not_in_flight(&self, account: &str) {
        if let Some(pace) = self.lock().get_mut(account) {
            pace.in_flight = pace.in_flight.saturating_sub(1);
        }
    }

    /// One of `account`'s operations ended.
    pub fn operation_done(&self, account: &str) {
        self.not_in_flight(account);
    }

    /// The provider refused a granted call of `account` at `now_ms` for
    /// `quota` (the call is no longer in flight): for the rate quota, no
    /// call until the next minute (or `retry_after`, if later); for the
    /// concurrent operations, no more in flight than there are now, for a
    /// minute (a few seconds' pause when none of them is this process's).
    /// Returns how long until a call may go again, at the soonest, and
    /// whether this refusal started the account's pause or cap (the first
    /// of a burst of refusals: the one worth a warning).
    pub fn throttled(
        &self,
        account: &str,
        quota: Throttle,
        retry_after: Option<Duration>,
        now_ms: i64,
    ) -> (Duration, bool) {
        let mut accounts = self.lock();
        let pace = accounts.entry(account.to_owned()).or_default();
        let first = now_ms >= pace.paused_until
            && pace.cap.is_none_or(|(_, until)| now_ms >= until)
            && !(pace.window == now_ms.div_euclid(MINUTE_MS) && pace.used >= self.writes_per_min);
        pace.in_flight = pace.in_flight.saturating_sub(1);
        let retry = retry_after.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        match quota {
            Throttle::Rate => {
                let window = now_ms.div_euclid(MINUTE_MS);
                // This window is spent: nothing more is sent in it.
                pace.window = window;
                pace.used = self.writes_per_min;
                let until = ((window + 1) * MINUTE_MS).max(now_ms.saturating_add(retry));
                pace.paused_until = pace.paused_until.max(until);
            }
            Throttle::ConcurrentOperations => {
                pace.cap = Some((pace.in_flight.max(1), now_ms + CAP_MS));
                if pace.in_flight == 0 || retry > 0 {
                    let until = now_ms.saturating_add(retry.max(CONCURRENT_PAUSE_MS));
                    pace.paused_until = pace.paused_until.max(until);
                }
            }
        }
        (wait(pace.paused_until - now_ms), first)
    }

    /// What an account not limited now may send: a whole minute's budget.
    pub fn full_allowance(&self) -> i32 {
        i32::try_from(self.writes_per_min).unwrap_or(i32::MAX)
    }

    /// The accounts limited at `now_ms`, with how many more calls each may
    /// send now (0 while paused): the pipeline claims no more of their steps.
    pub fn allowances(&self, now_ms: i64) -> Vec<(String, i32)> {
        let per_min = self.writes_per_min;
        self.lock()
            .iter_mut()
            .filter_map(|(account, pace)| {
                let n = pace.allowance(per_min, now_ms);
                let limited = n < per_min || now_ms < pace.paused_until;
                limited.then(|| (account.clone(), i32::try_from(n).unwrap_or(i32::MAX)))
            })
            .collect()
    }

    /// How long until the first paused account may send again, if one is
    /// paused (or has spent its minute's budget) at `now_ms`.
    pub fn next_resume(&self, now_ms: i64) -> Option<Duration> {
        let window = now_ms.div_euclid(MINUTE_MS);
        self.lock()
            .values()
            .filter_map(|p| {
                let spent = p.window == window && p.used >= self.writes_per_min;
                let until = if spent {
                    p.paused_until.max((window + 1) * MINUTE_MS)
                } else {
                    p.paused_until
                };
                (until > now_ms).then(|| wait(until - now_ms))
            })
            .min()
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
mod tests;
