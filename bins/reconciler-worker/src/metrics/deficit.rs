//! The deficit credits' metrics (contract 5.4): the reservations short now
//! and for how long, and the slot-hours credited per pool, read from the
//! database with the other gauges.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::FloatGauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReservationLabel {
    account: String,
    reservation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    pool: String,
}

/// The deficit credits' metrics.
pub struct DeficitMetrics {
    short_slots: Family<ReservationLabel, Gauge>,
    short_for: Family<ReservationLabel, FloatGauge>,
    credited: Family<PoolLabel, FloatGauge>,
}

impl DeficitMetrics {
    /// Registers them in `r`.
    pub(super) fn register(r: &mut Registry) -> DeficitMetrics {
        let m = DeficitMetrics {
            short_slots: Family::default(),
            short_for: Family::default(),
            credited: Family::default(),
        };
        r.register(
            "bc_reservation_short_slots",
            "Slots committed to live grants that the provider does not hold now, by reservation",
            m.short_slots.clone(),
        );
        r.register_with_unit(
            "bc_reservation_short",
            "How long a reservation has been short of its live grants (since the scan that saw it)",
            Unit::Seconds,
            m.short_for.clone(),
        );
        r.register(
            "bc_deficit_credited_slot_hours",
            "Slot-hours credited so far to the grants of a pool (vm.grant.deficit.hours)",
            m.credited.clone(),
        );
        m
    }

    /// Sets them from what the database says at `now` (only the reservations
    /// short now have series).
    pub fn set(
        &self,
        now: i64,
        short: &[storage::ops::gauges::ShortReservation],
        pools: &[storage::ops::gauges::PoolCredit],
    ) {
        self.short_slots.clear();
        self.short_for.clear();
        for s in short {
            let label = ReservationLabel {
                account: s.account_id.clone(),
                reservation: s.reservation_id.clone(),
            };
            self.short_slots.get_or_create(&label).set(s.short_slots);
            let seconds = (now - s.since).max(0) as f64 / 1000.0;
            self.short_for.get_or_create(&label).set(seconds);
        }
        for p in pools {
            let label = PoolLabel {
                pool: p.pool_id.clone(),
            };
            let hours = p.micros as f64 / 1_000_000.0;
            self.credited.get_or_create(&label).set(hours);
        }
    }
}

#[cfg(test)]
mod tests {
    use storage::ops::gauges::{PoolCredit, ShortReservation};

    use super::super::WorkerMetrics;

    #[test]
    fn short_reservations_and_credits_are_exposed() {
        let m = WorkerMetrics::new(&[]);
        let short = ShortReservation {
            account_id: "acct_1".into(),
            reservation_id: "res-a".into(),
            short_slots: 2,
            since: 1_000,
        };
        let pool = PoolCredit {
            pool_id: "pool_1".into(),
            micros: 1_500_000,
        };
        m.deficit.set(3_601_000, &[short], &[pool]);
        let text = m.render(telemetry::Format::Text);
        let labels = r#"{account="acct_1",reservation="res-a"}"#;
        for want in [
            format!("bc_reservation_short_slots{labels} 2"),
            format!("bc_reservation_short_seconds{labels} 3600.0"),
            r#"bc_deficit_credited_slot_hours{pool="pool_1"} 1.5"#.to_owned(),
        ] {
            assert!(
                text.lines().any(|l| l == want),
                "{want} missing from\n{text}"
            );
        }
        // Restored: the reservation's series go; the pool's credit stays.
        m.deficit.set(7_200_000, &[], &[]);
        let text = m.render(telemetry::Format::Text);
        assert!(!text.contains("bc_reservation_short_slots{"), "{text}");
    }
}
