//! A per-tenant gate on work that waits on a tenant's own provider: at most
//! a few explicit `providerAccounts.scan` calls of one tenant in flight in
//! this process, so a tenant that loops on its slow account cannot hold the
//! server's connections and tasks that every tenant shares (contract 1.7).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Explicit scans one tenant may have in flight in one api-server process.
pub const MAX_SCANS_PER_TENANT: usize = 4;

/// Counts what each tenant has in flight.
#[derive(Debug, Default)]
pub struct TenantGate {
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// One unit of a tenant's allowance, given back when dropped.
#[derive(Debug)]
pub struct Permit {
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    tenant: String,
}

impl TenantGate {
    /// A permit for `tenant`, or how many it holds when it is at `max`.
    pub fn enter(&self, tenant: &str, max: usize) -> Result<Permit, usize> {
        let mut map = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let used = map.entry(tenant.to_owned()).or_default();
        if *used >= max {
            return Err(*used);
        }
        *used += 1;
        Ok(Permit {
            in_flight: self.in_flight.clone(),
            tenant: tenant.to_owned(),
        })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut map = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(used) = map.get_mut(&self.tenant) {
            *used -= 1;
            if *used == 0 {
                map.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_at_its_limit_is_refused_and_others_are_not() {
        let gate = TenantGate::default();
        let a1 = gate.enter("a", 2).expect("first");
        let _a2 = gate.enter("a", 2).expect("second");
        assert_eq!(gate.enter("a", 2).err(), Some(2));
        let _b = gate.enter("b", 2).expect("another tenant");
        drop(a1);
        let _a3 = gate.enter("a", 2).expect("a permit given back");
    }
}
