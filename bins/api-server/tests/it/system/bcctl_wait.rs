//! `bcctl instances create --wait`, the real binary, against the real
//! api-server and a worker running all along: it prints the VM once the
//! worker made it, and fails (non-zero, the provider's code printed) when
//! the create failed.

use crate::support::bcctl::{Ctl, Run};
use crate::support::clock::T0;
use crate::support::gce::{FLAVOR, ZONE};
use crate::support::server::Server;
use crate::support::vms::managed_platform;
use crate::support::worker::{self, Running};

/// Runs bcctl with `token` against the server, tables 160 columns wide.
async fn bcctl(s: &Server, token: &str, args: &[&str]) -> Run {
    let mut ctl = Ctl::new(s, token);
    ctl.columns = 160;
    ctl.run(args).await
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_create_wait_prints_the_vm_or_the_failure() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let mut cmd = worker::command(&s);
    cmd.args(["--only", "vps.instances"])
        .env("BC_VM_LIST_INTERVAL", "1s");
    let w = Running::spawn(cmd);
    let create = [
        "--tenant",
        "acme",
        "instances",
        "create",
        "--pool",
        &p.pool,
        "--flavor",
        FLAVOR,
        "--wait",
        "--timeout",
        "45s",
    ];
    let ok = bcctl(&s, &p.tenant_token, &create).await;
    assert_eq!(ok.code, 0, "{ok:?}");
    let vms = p.gce.vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    let vm = &vms[0];
    assert!(ok.stdout.contains(&vm.name), "{ok:?}");
    assert!(ok.stdout.contains(ZONE), "{ok:?}");
    assert!(ok.stdout.contains("running"), "{ok:?}");
    assert!(ok.stdout.contains("RUNNING"), "{ok:?}");
    // A create the provider refuses: non-zero, the code printed.
    p.gce.fail_creates(1, "QUOTA_EXCEEDED").await;
    let failed = bcctl(&s, &p.tenant_token, &create).await;
    assert_ne!(failed.code, 0, "{failed:?}");
    assert!(
        failed.stderr.contains("QUOTA_EXCEEDED") || failed.stdout.contains("QUOTA_EXCEEDED"),
        "{failed:?}"
    );
    assert_eq!(p.gce.vms().await.len(), 1);
    w.terminate_clean().await;
}
