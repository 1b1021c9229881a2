//! `bcctl instances create --wait`, the real binary, against the real
//! api-server and a worker running all along: it prints the VM once the
//! worker made it, and fails (non-zero, the provider's code printed) when
//! the create failed.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::support::clock::T0;
use crate::support::gce::{FLAVOR, ZONE};
use crate::support::server::{Server, sibling_binary};
use crate::support::vms::managed_platform;
use crate::support::worker::{self, Running};

/// What one run printed.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs bcctl with `token` against the server.
async fn bcctl(s: &Server, token: &str, args: &[&str]) -> Run {
    let config = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(sibling_binary("bcctl", "cargo build -p bcctl"));
    cmd.args(args)
        .env_remove("BC_TENANT")
        .env_remove("BC_PROFILE")
        .env("BC_ENDPOINT", &s.url)
        .env("BC_TOKEN", token)
        .env("XDG_CONFIG_HOME", config.path())
        .env("COLUMNS", "160")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("bcctl hung")
        .expect("bcctl");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
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
