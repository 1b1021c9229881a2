//! The webhooks' metrics (contract 3.13): what the `events.webhooks` pass's
//! attempts came to, how long delivered events took from their commit, and
//! the gauges of disabled webhooks and of deliveries due now.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::OutcomeLabel;
use crate::passes::PassReport;

/// A delivered event's delay from its commit: from a tenth of a second
/// (woken by `NOTIFY`) to the 3 days of retries.
const LAG_BUCKETS: [f64; 14] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 21_600.0, 86_400.0, 259_200.0,
];

/// The attempts' outcomes: the pass line's counts of the same names.
pub(super) const OUTCOMES: [&str; 3] = ["delivered", "retrying", "failed"];

/// The webhooks' metrics.
pub(super) struct WebhookMetrics {
    deliveries: Family<OutcomeLabel, Counter>,
    lag: Histogram,
    disabled: Gauge,
    due: Gauge,
}

impl WebhookMetrics {
    /// Registers them in `r`, every outcome's series at 0.
    pub(super) fn register(r: &mut Registry) -> WebhookMetrics {
        let m = WebhookMetrics {
            deliveries: Family::default(),
            lag: Histogram::new(LAG_BUCKETS),
            disabled: Gauge::default(),
            due: Gauge::default(),
        };
        r.register(
            "bc_webhook_deliveries",
            "Attempts to deliver events to webhooks, by outcome (delivered, retrying, failed)",
            m.deliveries.clone(),
        );
        r.register_with_unit(
            "bc_webhook_delivery_lag",
            "From an event's commit to its delivery to a webhook (the product's clock)",
            Unit::Seconds,
            m.lag.clone(),
        );
        r.register(
            "bc_webhooks_disabled",
            "Webhooks disabled (by their tenant or after 3 days of failures), not deleted",
            m.disabled.clone(),
        );
        r.register(
            "bc_webhook_deliveries_due",
            "Deliveries of enabled webhooks whose next attempt is due now",
            m.due.clone(),
        );
        for outcome in OUTCOMES {
            m.deliveries
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.to_owned(),
                })
                .inc_by(0);
        }
        m
    }

    /// Counts a run of the `events.webhooks` pass: its attempts by outcome
    /// and its delivered events' lags.
    pub(super) fn observe(&self, report: &PassReport) {
        for (item, n) in &report.counts {
            if OUTCOMES.contains(item) {
                self.deliveries
                    .get_or_create(&OutcomeLabel {
                        outcome: (*item).to_owned(),
                    })
                    .inc_by(*n);
            }
        }
        for ms in &report.webhook_lags_ms {
            self.lag.observe((*ms).max(0) as f64 / 1000.0);
        }
    }

    /// Sets the gauges.
    pub(super) fn set(&self, g: &storage::ops::gauges::WebhookGauges) {
        self.disabled.set(g.disabled);
        self.due.set(g.due);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::WorkerMetrics;
    use super::*;

    fn has(text: &str, want: &str) {
        assert!(
            text.lines().any(|l| l == want),
            "{want} missing from\n{text}"
        );
    }

    #[test]
    fn attempts_and_lags_of_the_webhooks_pass_are_counted() {
        let m = WorkerMetrics::new(&[crate::webhooks::PASS]);
        let text = m.render(telemetry::Format::Text);
        for outcome in OUTCOMES {
            has(
                &text,
                &format!(r#"bc_webhook_deliveries_total{{outcome="{outcome}"}} 0"#),
            );
        }
        has(&text, "bc_webhook_delivery_lag_seconds_count 0");
        let report = PassReport {
            counts: vec![("deliveriesRecorded", 4), ("delivered", 2), ("retrying", 1)],
            webhook_lags_ms: vec![400, 90_000],
            ..PassReport::default()
        };
        m.observe(
            crate::webhooks::PASS,
            true,
            Duration::from_millis(5),
            &report,
        );
        // Another pass's `failed` count is not a delivery's.
        let other = PassReport {
            counts: vec![("failed", 7)],
            ..PassReport::default()
        };
        m.observe("vps.instances", true, Duration::from_millis(5), &other);
        let text = m.render(telemetry::Format::Text);
        for want in [
            r#"bc_webhook_deliveries_total{outcome="delivered"} 2"#,
            r#"bc_webhook_deliveries_total{outcome="retrying"} 1"#,
            r#"bc_webhook_deliveries_total{outcome="failed"} 0"#,
            "bc_webhook_delivery_lag_seconds_count 2",
            "bc_webhook_delivery_lag_seconds_sum 90.4",
            r#"bc_webhook_delivery_lag_seconds_bucket{le="0.5"} 1"#,
            r#"bc_webhook_delivery_lag_seconds_bucket{le="60.0"} 1"#,
            r#"bc_webhook_delivery_lag_seconds_bucket{le="300.0"} 2"#,
        ] {
            has(&text, want);
        }
    }

    #[test]
    fn webhook_gauges_are_set() {
        let m = WorkerMetrics::new(&[]);
        m.set_webhook_state(&storage::ops::gauges::WebhookGauges {
            disabled: 3,
            due: 12,
        });
        let text = m.render(telemetry::Format::Text);
        has(&text, "bc_webhooks_disabled 3");
        has(&text, "bc_webhook_deliveries_due 12");
    }
}
