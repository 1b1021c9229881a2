//! Lending's metrics (contract 3.14): the slots each pool's grants lend now
//! and the slot-hours they lent so far, and the reclaims under way, read
//! from the database with the other gauges.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::FloatGauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    pool: String,
}

/// Lending's metrics.
pub struct LendingMetrics {
    lent: Family<PoolLabel, Gauge>,
    lent_hours: Family<PoolLabel, FloatGauge>,
    pending: Gauge,
    overdue: FloatGauge,
    waiting: FloatGauge,
}

impl LendingMetrics {
    /// Registers them in `r`.
    pub(super) fn register(r: &mut Registry) -> LendingMetrics {
        let m = LendingMetrics {
            lent: Family::default(),
            lent_hours: Family::default(),
            pending: Gauge::default(),
            overdue: FloatGauge::default(),
            waiting: FloatGauge::default(),
        };
        r.register(
            "bc_lent_slots",
            "Slots of a pool's grants lent to interruptible instances now (not being interrupted)",
            m.lent.clone(),
        );
        r.register(
            "bc_lent_slot_hours",
            "Slot-hours borrowers held running in a pool's grants so far (vm.grant.lent.hours)",
            m.lent_hours.clone(),
        );
        r.register(
            "bc_reclaims_pending",
            "Interrupted borrowers whose VMs are not confirmed gone",
            m.pending.clone(),
        );
        r.register_with_unit(
            "bc_reclaim_overdue",
            "How far past its interruptAt the oldest pending reclaim is (0: none)",
            Unit::Seconds,
            m.overdue.clone(),
        );
        r.register_with_unit(
            "bc_reclaim_waiting",
            "How long the oldest grantee VM has waited for borrowers to go (0: none waits)",
            Unit::Seconds,
            m.waiting.clone(),
        );
        m
    }

    /// Sets them from what the database says.
    pub fn set(
        &self,
        pools: &[storage::ops::gauges::PoolLent],
        reclaims: &storage::ops::gauges::Reclaims,
    ) {
        self.lent.clear();
        for p in pools {
            let label = PoolLabel {
                pool: p.pool_id.clone(),
            };
            self.lent.get_or_create(&label).set(p.lent);
            let hours = p.micros as f64 / 1_000_000.0;
            self.lent_hours.get_or_create(&label).set(hours);
        }
        self.pending.set(reclaims.pending);
        self.overdue.set(reclaims.overdue_ms as f64 / 1000.0);
        self.waiting.set(reclaims.waiting_ms as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use storage::ops::gauges::{PoolLent, Reclaims};

    use super::super::WorkerMetrics;

    #[test]
    fn lent_slots_and_reclaims_are_exposed() {
        let m = WorkerMetrics::new(&[]);
        let pool = PoolLent {
            pool_id: "pool_1".into(),
            lent: 3,
            micros: 2_500_000,
        };
        let reclaims = Reclaims {
            pending: 2,
            overdue_ms: 90_000,
            waiting_ms: 150_000,
        };
        m.lending.set(&[pool], &reclaims);
        let text = m.render(telemetry::Format::Text);
        for want in [
            r#"bc_lent_slots{pool="pool_1"} 3"#,
            r#"bc_lent_slot_hours{pool="pool_1"} 2.5"#,
            "bc_reclaims_pending 2",
            "bc_reclaim_overdue_seconds 90.0",
            "bc_reclaim_waiting_seconds 150.0",
        ] {
            assert!(
                text.lines().any(|l| l == want),
                "{want} missing from\n{text}"
            );
        }
        // Nothing lent any more: the pool's lent series goes.
        m.lending.set(&[], &Reclaims::default());
        let text = m.render(telemetry::Format::Text);
        assert!(!text.contains("bc_lent_slots{"), "{text}");
        assert!(text.lines().any(|l| l == "bc_reclaims_pending 0"));
    }
}
