//! The worker's metrics on `prometheus-client`, served on
//! `BC_METRICS_LISTEN` (or its older name `BC_WORKER_METRICS_LISTEN`) when
//! set, as the 0.0.4 text format or OpenMetrics when the scraper asks for it:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `bc_worker_pass_duration_seconds` | histogram (1 ms to 120 s) | `pass` |
//! | `bc_worker_pass_runs_total` | counter | `pass`, `outcome` (`ok`, `error`) |
//! | `bc_worker_pass_last_success_timestamp_seconds` | gauge | `pass` |
//! | `bc_worker_pass_items_total` | counter | `pass`, `item` (the pass line's counts) |
//! | `bc_worker_account_scans_total` | counter | `account` (capped, see below), `result` |
//! | `bc_provider_request_duration_seconds` | histogram | `status` (HTTP status, or `none`) |
//! | `bc_provider_pages_total` | counter | |
//! | `bc_provider_token_refreshes_total` | counter | |
//! | `bc_metering_lag_seconds` | gauge | |
//! | `bc_usage_lag_seconds` | gauge | |
//! | `bc_reservation_slots` | gauge | `account`, `reservation` (capped), `kind` (below) |
//! | `bc_reservation_grants` | gauge | `account`, `reservation` (capped), `state` (below) |
//! | `bc_reservation_gauges_dropped` | gauge | |
//! | `bc_capacity_short_total` | counter | |
//! | `bc_vm_steps_total` | counter | `kind`, `outcome` (below) |
//! | `bc_vm_step_seconds` | histogram (1 s to 30 min) | `kind` |
//! | `bc_vm_drift_total` | counter | `kind` (`stopped`, `restopped`, `lost`) |
//! | `bc_vm_orphans_deleted_total` | counter | |
//! | `bc_instances` | gauge | `state` (a managed instance's live states) |
//! | `bc_vm_steps_overdue` | gauge | |
//! | `bc_vm_orphans_found` | gauge | |
//! | `bc_vm_instances_without_step` | gauge | |
//! | `bc_webhook_deliveries_total` | counter | `outcome` (`delivered`, `retrying`, `failed`) |
//! | `bc_webhook_delivery_lag_seconds` | histogram (0.1 s to 3 days) | |
//! | `bc_webhooks_disabled` | gauge | |
//! | `bc_webhook_deliveries_due` | gauge | |
//! | `bc_reservation_short_slots` | gauge | `account`, `reservation` (short now, capped) |
//! | `bc_reservation_short_seconds` | gauge | `account`, `reservation` (short now, capped) |
//! | `bc_deficit_credited_slot_hours` | gauge | `pool` (capped) |
//! | `bc_lent_slots` | gauge | `pool` (capped; lending pools) |
//! | `bc_lent_slot_hours` | gauge | `pool` (capped) |
//! | `bc_reclaims_pending` | gauge | |
//! | `bc_reclaim_overdue_seconds` | gauge | |
//! | `bc_reclaim_waiting_seconds` | gauge | |
//! | `bc_build_info`, `process_*` | | see the `telemetry` crate |
//!
//! `result` is `ok`, `error`, `backing_off` or `claimed_elsewhere`; `state`
//! is `scheduled` or `active`; `kind` is
//! `total`, `granted`, `held`, `ordinaryInUse` (running instances on the
//! reservation outside any grant, the API's `ordinaryInUse`), `ordinary`
//! (the same figure under its older name) or `physical`.
//!
//! Managed instances (contract 3.12): a step's `kind` is `create`, `stop`,
//! `start` or `delete`; its `outcome` is `done`, `failed`, `put_off` (a
//! retryable failure or a slow operation: due again later) or `lease_lost`
//! (another replica took it over). `bc_vm_step_seconds` is how long an ended
//! step took from its recording. `bc_instances` counts the managed instances
//! `provisioning`, `running`, `stopping`, `stopped`, `starting` and
//! `deleting` (the `deleted` and `failed` ones only accumulate);
//! `bc_vm_steps_overdue` the open steps past their deadline
//! (`BC_VM_STEP_TIMEOUT`) by the database's clock, which the worker should
//! have ended; `bc_vm_orphans_found` the VMs of this installation whose
//! instance is newer than every instance this database has made (it was
//! restored from a backup), kept for the operator to adopt or delete, that
//! their account's last listing saw; `bc_vm_instances_without_step` the
//! managed instances waiting for a step (`provisioning`, `stopping`,
//! `starting`, `deleting`) with none open, which nothing would move on.
//!
//! Webhooks (contract 3.13, the `events.webhooks` pass): an attempt's `outcome` is that of
//! `webhooks.deliveries`; the lag is a delivered event's delay from its
//! commit to the answer, by the product's clock (a retried event's counts
//! its retries); `bc_webhooks_disabled` counts the webhooks `disabled` and
//! not deleted, `bc_webhook_deliveries_due` the deliveries of enabled
//! webhooks `pending` or `retrying` whose next attempt is due now: what the
//! worker should be sending already (a backlog).
//!
//! Label values are bounded (contract 1.7): passes and items are fixed
//! names; `account` of the scan counter takes the first
//! [`MAX_ACCOUNT_LABELS`] accounts this process scans, every later one is
//! counted under `other`; the reservation gauges describe the first
//! [`MAX_RESERVATIONS`] reservations bound to a pool (by account and
//! reservation id), the rest summed in one series whose `account` and
//! `reservation` are `other` (how many: `bc_reservation_gauges_dropped`).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::passes::PassReport;

pub mod deficit;
pub mod lending;
mod vms;
mod webhooks;

/// The most reservations the gauges describe one by one.
pub const MAX_RESERVATIONS: i64 = 500;

/// The most accounts `bc_worker_account_scans_total` names; the rest are
/// counted under [`OTHER`].
pub const MAX_ACCOUNT_LABELS: usize = 100;

/// The label value of what the caps leave out.
pub const OTHER: &str = storage::ops::gauges::OTHER;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabel {
    pass: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassOutcome {
    pass: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassItem {
    pass: String,
    item: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountResult {
    account: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotKind {
    account: String,
    reservation: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GrantState {
    account: String,
    reservation: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn latency() -> Histogram {
    Histogram::new(telemetry::LATENCY_BUCKETS)
}

/// The worker's metrics.
pub struct WorkerMetrics {
    registry: Registry,
    duration: Family<PassLabel, Histogram, fn() -> Histogram>,
    runs: Family<PassOutcome, Counter>,
    last_success: Family<PassLabel, FloatGauge>,
    items: Family<PassItem, Counter>,
    scans: Family<AccountResult, Counter>,
    /// The accounts `scans` names (at most [`MAX_ACCOUNT_LABELS`]).
    scan_labels: std::sync::Mutex<std::collections::HashSet<String>>,
    metering_lag: FloatGauge,
    usage_lag: FloatGauge,
    slots: Family<SlotKind, Gauge>,
    grants: Family<GrantState, Gauge>,
    dropped: Gauge,
    capacity_short: Counter,
    vm: vms::VmMetrics,
    webhooks: webhooks::WebhookMetrics,
    /// The deficit credits' gauges.
    pub deficit: deficit::DeficitMetrics,
    /// Lending's gauges.
    pub lending: lending::LendingMetrics,
    /// What provider adapters report.
    pub provider: Arc<ProviderMetrics>,
}

/// The provider adapters' requests, pages and token refreshes.
#[derive(Debug)]
pub struct ProviderMetrics {
    duration: Family<StatusLabel, Histogram, fn() -> Histogram>,
    pages: Counter,
    refreshes: Counter,
}

impl providers::gce::ProviderTelemetry for ProviderMetrics {
    fn request(&self, status: Option<u16>, elapsed: Duration) {
        let status = status.map_or_else(|| "none".to_owned(), |s| s.to_string());
        self.duration
            .get_or_create(&StatusLabel { status })
            .observe(elapsed.as_secs_f64());
    }

    fn page(&self) {
        self.pages.inc();
    }

    fn token_refresh(&self) {
        self.refreshes.inc();
    }
}

impl WorkerMetrics {
    /// The metrics of a worker running `passes`; each pass's run counters
    /// start at 0, so a pass that never succeeds is seen.
    pub fn new(passes: &[&'static str]) -> WorkerMetrics {
        let mut r = Registry::default();
        telemetry::register_common(&mut r, "reconciler-worker");
        let duration =
            Family::<PassLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency);
        r.register_with_unit(
            "bc_worker_pass_duration",
            "Duration of one run of a pass",
            Unit::Seconds,
            duration.clone(),
        );
        let runs = Family::<PassOutcome, Counter>::default();
        r.register(
            "bc_worker_pass_runs",
            "Runs of a pass by outcome",
            runs.clone(),
        );
        let last_success = Family::<PassLabel, FloatGauge>::default();
        r.register_with_unit(
            "bc_worker_pass_last_success_timestamp",
            "When a pass last finished without error, in seconds since the Unix epoch",
            Unit::Seconds,
            last_success.clone(),
        );
        let items = Family::<PassItem, Counter>::default();
        r.register(
            "bc_worker_pass_items",
            "What passes did, by the names of the pass line's counts",
            items.clone(),
        );
        let scans = Family::<AccountResult, Counter>::default();
        r.register(
            "bc_worker_account_scans",
            "Scans of a provider account by result",
            scans.clone(),
        );
        let metering_lag = FloatGauge::default();
        r.register_with_unit(
            "bc_metering_lag",
            "Now minus the end of the oldest ended hour of a grant not yet billed (0: caught up)",
            Unit::Seconds,
            metering_lag.clone(),
        );
        let usage_lag = FloatGauge::default();
        r.register_with_unit(
            "bc_usage_lag",
            "Now minus the end of the oldest ended hour of an instance not yet metered",
            Unit::Seconds,
            usage_lag.clone(),
        );
        let slots = Family::<SlotKind, Gauge>::default();
        r.register(
            "bc_reservation_slots",
            "Slot accounts of a bound reservation as last settled",
            slots.clone(),
        );
        let grants = Family::<GrantState, Gauge>::default();
        r.register(
            "bc_reservation_grants",
            "Open grants of a bound reservation by state",
            grants.clone(),
        );
        let dropped = Gauge::default();
        r.register(
            "bc_reservation_gauges_dropped",
            "Bound reservations beyond the cap, summed in the reservation gauges' other series",
            dropped.clone(),
        );
        let capacity_short = Counter::default();
        r.register(
            "bc_capacity_short",
            "reservation-grant.capacity-short events published by this worker",
            capacity_short.clone(),
        );
        let vm = vms::VmMetrics::register(&mut r);
        let webhooks = webhooks::WebhookMetrics::register(&mut r);
        let deficit = deficit::DeficitMetrics::register(&mut r);
        let lending = lending::LendingMetrics::register(&mut r);
        let provider = Arc::new(ProviderMetrics {
            duration: Family::new_with_constructor(latency),
            pages: Counter::default(),
            refreshes: Counter::default(),
        });
        r.register_with_unit(
            "bc_provider_request_duration",
            "Provider HTTP requests by status (none: no answer)",
            Unit::Seconds,
            provider.duration.clone(),
        );
        r.register(
            "bc_provider_pages",
            "Pages of reservations read from providers",
            provider.pages.clone(),
        );
        r.register(
            "bc_provider_token_refreshes",
            "Access tokens obtained from a token endpoint or the metadata server",
            provider.refreshes.clone(),
        );
        for pass in passes {
            for outcome in ["ok", "error"] {
                runs.get_or_create(&PassOutcome {
                    pass: (*pass).to_owned(),
                    outcome: outcome.to_owned(),
                })
                .inc_by(0);
            }
        }
        WorkerMetrics {
            registry: r,
            duration,
            runs,
            last_success,
            items,
            scans,
            scan_labels: std::sync::Mutex::default(),
            metering_lag,
            usage_lag,
            slots,
            grants,
            dropped,
            capacity_short,
            vm,
            webhooks,
            deficit,
            lending,
            provider,
        }
    }

    /// Records one run of a pass.
    pub fn observe(&self, pass: &'static str, ok: bool, elapsed: Duration, report: &PassReport) {
        let label = PassLabel {
            pass: pass.to_owned(),
        };
        self.duration
            .get_or_create(&label)
            .observe(elapsed.as_secs_f64());
        self.runs
            .get_or_create(&PassOutcome {
                pass: pass.to_owned(),
                outcome: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
        if ok {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.last_success.get_or_create(&label).set(now);
        }
        for (item, n) in &report.counts {
            self.items
                .get_or_create(&PassItem {
                    pass: pass.to_owned(),
                    item: (*item).to_owned(),
                })
                .inc_by(*n);
            if *item == "capacityShort" {
                self.capacity_short.inc_by(*n);
            }
        }
        self.vm.observe(report);
        if pass == crate::webhooks::PASS {
            self.webhooks.observe(report);
        }
        if report.accounts.is_empty() {
            return;
        }
        let mut named = self
            .scan_labels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (account, result) in &report.accounts {
            let account = if named.contains(account) {
                account.clone()
            } else if named.len() < MAX_ACCOUNT_LABELS {
                named.insert(account.clone());
                account.clone()
            } else {
                OTHER.to_owned()
            };
            self.scans
                .get_or_create(&AccountResult {
                    account,
                    result: (*result).to_owned(),
                })
                .inc();
        }
    }

    /// Sets the lag and reservation gauges from what the database says now.
    pub fn set_state(
        &self,
        lag: storage::ops::metering::Lag,
        reservations: &[storage::ops::gauges::ReservationGauge],
    ) {
        let bound = reservations.first().map_or(0, |r| r.bound);
        self.metering_lag.set(lag.grants_ms as f64 / 1000.0);
        self.usage_lag.set(lag.usage_ms as f64 / 1000.0);
        self.slots.clear();
        self.grants.clear();
        for r in reservations {
            let kinds = [
                ("total", r.total),
                ("granted", r.granted),
                ("held", r.held),
                ("ordinaryInUse", r.ordinary),
                ("ordinary", r.ordinary),
                ("physical", r.physical),
            ];
            for (kind, v) in kinds {
                self.slots
                    .get_or_create(&SlotKind {
                        account: r.account_id.clone(),
                        reservation: r.reservation_id.clone(),
                        kind: kind.to_owned(),
                    })
                    .set(v);
            }
            for (state, v) in [("scheduled", r.scheduled), ("active", r.active)] {
                self.grants
                    .get_or_create(&GrantState {
                        account: r.account_id.clone(),
                        reservation: r.reservation_id.clone(),
                        state: state.to_owned(),
                    })
                    .set(v);
            }
        }
        let named = reservations
            .iter()
            .filter(|r| r.account_id != OTHER)
            .count();
        self.dropped.set((bound - named as i64).max(0));
    }

    /// Sets the managed instances' gauges from what the database says now.
    pub fn set_vm_state(&self, gauges: &storage::ops::gauges::VmGauges) {
        self.vm.set(gauges);
    }

    /// Sets the webhooks' gauges from what the database says now.
    pub fn set_webhook_state(&self, gauges: &storage::ops::gauges::WebhookGauges) {
        self.webhooks.set(gauges);
    }

    /// The exposition in `format`.
    pub fn render(&self, format: telemetry::Format) -> String {
        telemetry::render(&self.registry, format)
    }
}

/// Serves `GET /metrics` on `listen` in the background (the shared
/// listener of the `telemetry` crate: head deadline, connection cap, accept
/// backoff).
pub async fn serve(listen: &str, metrics: Arc<WorkerMetrics>) -> anyhow::Result<()> {
    let addr = telemetry::listener::serve(listen, Arc::new(move |f| metrics.render(f))).await?;
    tracing::info!(%addr, "worker metrics listening");
    Ok(())
}

#[cfg(test)]
mod tests;
