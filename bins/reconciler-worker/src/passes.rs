//! The registry of reconciler passes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use storage::Clock;
use storage::db::DbPool;

/// What a pass needs.
pub struct PassContext {
    /// Connection pool.
    pub pool: DbPool,
    /// Where "now" comes from.
    pub clock: Clock,
    /// The root tenant's id.
    pub root_tenant: String,
}

/// What a pass did, for its log line and metrics.
#[derive(Debug, Default, Clone)]
pub struct PassReport {
    /// Named counts (`records: 12`, `grantsEnded: 1`, ...).
    pub counts: Vec<(&'static str, u64)>,
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("nothing to do");
        }
        for (i, (k, v)) in self.counts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// A pass's result.
pub type PassFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<PassReport>> + Send + 'a>>;

/// One reconciler.
pub trait Pass: Send + Sync {
    /// Its name (`vps.grants`).
    fn name(&self) -> &'static str;
    /// Runs it once.
    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a>;
}

/// Every pass, in the order a round runs them.
pub fn all() -> Vec<Box<dyn Pass>> {
    Vec::new()
}
