//! The managed instances' metrics (contract 3.12): the steps by kind and
//! outcome and how long they took, drift, orphans deleted, and the gauges
//! of live instances by state, overdue steps and orphans found (kept for
//! the operator).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::passes::PassReport;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepOutcome {
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// A VM step's buckets: from a second to past the default deadline.
const STEP_BUCKETS: [f64; 12] = [
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
];

fn step_latency() -> Histogram {
    Histogram::new(STEP_BUCKETS)
}

/// The step kinds, as labelled.
const STEP_KINDS: [&str; 4] = ["create", "stop", "start", "delete"];

/// A step's outcome label.
fn step_outcome(end: control::vms::StepEnd) -> &'static str {
    use control::vms::StepEnd;
    match end {
        StepEnd::Done => "done",
        StepEnd::Failed => "failed",
        StepEnd::Waiting => "put_off",
        StepEnd::LeaseLost => "lease_lost",
    }
}

/// The managed instances' metrics.
pub(super) struct VmMetrics {
    steps: Family<StepOutcome, Counter>,
    step_seconds: Family<KindLabel, Histogram, fn() -> Histogram>,
    drift: Family<KindLabel, Counter>,
    orphans_deleted: Counter,
    instances: Family<StateLabel, Gauge>,
    steps_overdue: Gauge,
    orphans_found: Gauge,
    without_step: Gauge,
}

impl VmMetrics {
    /// Registers them in `r`, every step and drift series at 0.
    pub(super) fn register(r: &mut Registry) -> VmMetrics {
        let m = VmMetrics {
            steps: Family::default(),
            step_seconds: Family::new_with_constructor(step_latency),
            drift: Family::default(),
            orphans_deleted: Counter::default(),
            instances: Family::default(),
            steps_overdue: Gauge::default(),
            orphans_found: Gauge::default(),
            without_step: Gauge::default(),
        };
        r.register(
            "bc_vm_steps",
            "Steps of managed instances that ended or were put off, by kind and outcome",
            m.steps.clone(),
        );
        r.register_with_unit(
            "bc_vm_step",
            "From a step's recording to its end (done or failed), by kind",
            Unit::Seconds,
            m.step_seconds.clone(),
        );
        r.register(
            "bc_vm_drift",
            "Managed instances the provider's listings changed, by drift kind",
            m.drift.clone(),
        );
        r.register(
            "bc_vm_orphans_deleted",
            "Labelled VMs without a live instance deleted by this worker",
            m.orphans_deleted.clone(),
        );
        r.register(
            "bc_instances",
            "Live managed instances by state",
            m.instances.clone(),
        );
        r.register(
            "bc_vm_steps_overdue",
            "Open steps of managed instances past their deadline",
            m.steps_overdue.clone(),
        );
        r.register(
            "bc_vm_orphans_found",
            "VMs of this installation kept because their instance is newer than every \
             instance this database has made, as their account's last listing saw them",
            m.orphans_found.clone(),
        );
        r.register(
            "bc_vm_instances_without_step",
            "Managed instances waiting for a step (provisioning, stopping, starting, deleting) \
             with no open step",
            m.without_step.clone(),
        );
        for kind in STEP_KINDS {
            for outcome in ["done", "failed", "put_off", "lease_lost"] {
                m.steps
                    .get_or_create(&StepOutcome {
                        kind: kind.to_owned(),
                        outcome: outcome.to_owned(),
                    })
                    .inc_by(0);
            }
        }
        for kind in control::vms::Drift::KINDS {
            m.drift
                .get_or_create(&KindLabel {
                    kind: kind.to_owned(),
                })
                .inc_by(0);
        }
        m
    }

    /// Counts a pass's steps, drift and orphans.
    pub(super) fn observe(&self, report: &PassReport) {
        for step in &report.steps {
            let kind = step.kind.as_str().to_owned();
            if let Some(latency) = step.latency {
                self.step_seconds
                    .get_or_create(&KindLabel { kind: kind.clone() })
                    .observe(latency.as_secs_f64());
            }
            self.steps
                .get_or_create(&StepOutcome {
                    kind,
                    outcome: step_outcome(step.end).to_owned(),
                })
                .inc();
        }
        for (kind, n) in report.drift.by_kind() {
            self.drift
                .get_or_create(&KindLabel {
                    kind: kind.to_owned(),
                })
                .inc_by(n);
        }
        self.orphans_deleted.inc_by(report.orphans_deleted);
    }

    /// Sets the gauges.
    pub(super) fn set(&self, g: &storage::ops::gauges::VmGauges) {
        for (state, n) in g.by_state() {
            self.instances
                .get_or_create(&StateLabel {
                    state: state.to_owned(),
                })
                .set(n);
        }
        self.steps_overdue.set(g.steps_overdue);
        self.orphans_found.set(g.orphans_found);
        self.without_step.set(g.without_step);
    }
}
