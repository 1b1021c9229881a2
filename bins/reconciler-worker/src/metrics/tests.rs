use super::*;
use control::vms::{StepEnd, StepReport};
use grants_core::vm::StepKind;

fn has(text: &str, want: &str) {
    assert!(
        text.lines().any(|l| l == want),
        "{want} missing from\n{text}"
    );
}

#[test]
fn vm_steps_drift_and_orphans_are_counted() {
    let m = WorkerMetrics::new(&["vps.instances"]);
    let text = m.render(telemetry::Format::Text);
    // Every step and drift series exists from the start, at 0.
    has(
        &text,
        r#"bc_vm_steps_total{kind="delete",outcome="lease_lost"} 0"#,
    );
    has(&text, r#"bc_vm_drift_total{kind="lost"} 0"#);
    has(&text, "bc_vm_orphans_deleted_total 0");
    let report = PassReport {
        steps: vec![
            StepReport {
                kind: StepKind::Create,
                end: StepEnd::Done,
                latency: Some(Duration::from_secs(42)),
            },
            StepReport {
                kind: StepKind::Create,
                end: StepEnd::Waiting,
                latency: None,
            },
            StepReport {
                kind: StepKind::Stop,
                end: StepEnd::Failed,
                latency: Some(Duration::from_secs(700)),
            },
        ],
        drift: control::vms::Drift {
            stopped: 2,
            lost: 1,
            ..Default::default()
        },
        orphans_deleted: 3,
        ..PassReport::default()
    };
    m.observe("vps.instances", true, Duration::from_millis(5), &report);
    let text = m.render(telemetry::Format::Text);
    for want in [
        r#"bc_vm_steps_total{kind="create",outcome="done"} 1"#,
        r#"bc_vm_steps_total{kind="create",outcome="put_off"} 1"#,
        r#"bc_vm_steps_total{kind="stop",outcome="failed"} 1"#,
        r#"bc_vm_steps_total{kind="start",outcome="done"} 0"#,
        r#"bc_vm_step_seconds_count{kind="create"} 1"#,
        r#"bc_vm_step_seconds_sum{kind="create"} 42.0"#,
        r#"bc_vm_step_seconds_bucket{le="600.0",kind="stop"} 0"#,
        r#"bc_vm_step_seconds_bucket{le="900.0",kind="stop"} 1"#,
        r#"bc_vm_drift_total{kind="stopped"} 2"#,
        r#"bc_vm_drift_total{kind="lost"} 1"#,
        r#"bc_vm_drift_total{kind="restopped"} 0"#,
        "bc_vm_orphans_deleted_total 3",
    ] {
        has(&text, want);
    }
}

#[test]
fn vm_gauges_are_set() {
    let m = WorkerMetrics::new(&[]);
    m.set_vm_state(&storage::ops::gauges::VmGauges {
        running: 4,
        provisioning: 1,
        steps_overdue: 2,
        orphans_found: 1,
        without_step: 3,
        ..Default::default()
    });
    let text = m.render(telemetry::Format::Text);
    for want in [
        r#"bc_instances{state="running"} 4"#,
        r#"bc_instances{state="provisioning"} 1"#,
        r#"bc_instances{state="deleting"} 0"#,
        "bc_vm_steps_overdue 2",
        "bc_vm_orphans_found 1",
        "bc_vm_instances_without_step 3",
    ] {
        has(&text, want);
    }
}
