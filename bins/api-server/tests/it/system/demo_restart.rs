//! `just run` twice (issue 43): the demo world, served by the real binaries
//! as `scripts/run.sh` starts them (fake-gce keeping its world in the state
//! file `BC_FAKE_GCE_STATE`, with the operation latency `just run` gives
//! it), stopped and started again, comes back as it was: the same
//! reservations `ready`, the same grants, the same instances where they
//! were, the managed VMs running at the fake (not made again), no event of
//! anything gone, ended or lost, and the managed instances' billing going on
//! from before the restart with no hour billed twice. And `scripts/run.sh`
//! itself, on a database built on a fake-gce whose state file is missing:
//! it says so, names `just reset` and starts nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diesel_async::RunQueryDsl;
use serde_json::{Value, json};
use storage::test_db::TestDatabase;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::db::{db as connect, segments};
use crate::support::demo;
use crate::support::server::{Options, ROOT, ROOT_TOKEN, Server, sibling_binary};
use crate::support::worker;

const HOUR: i64 = 3_600_000;
/// The operation latency `scripts/run.sh` starts fake-gce with.
const LATENCY_MS: &str = "2000-5000";
/// How long anything the test waits for may take on a slow, loaded machine.
const PATIENCE: Duration = Duration::from_secs(240);
/// The managed instances the demo creates.
const MANAGED: [&str; 2] = ["managed-1", "managed-2"];

/// The `fake-gce` binary, on `listen`, keeping its world in `state`.
struct Fake {
    child: Child,
    url: String,
}

impl Fake {
    async fn start(listen: &str, state: &Path) -> Fake {
        let mut child = Command::new(sibling_binary("fake-gce", "cargo build --workspace --bins"))
            .env("BC_FAKE_GCE_LISTEN", listen)
            .env("BC_FAKE_GCE_STATE", state)
            .env("BC_FAKE_GCE_OPERATION_LATENCY_MS", LATENCY_MS)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fake-gce");
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::time::timeout(
            Duration::from_secs(60),
            BufReader::new(stdout).lines().next_line(),
        )
        .await
        .expect("fake-gce ready within 60 s")
        .expect("read stdout")
        .expect("fake-gce exited before listening");
        let url = line
            .strip_prefix("fake-gce listening on ")
            .expect("ready line")
            .to_owned();
        Fake { child, url }
    }

    /// `host:port`.
    fn listen(&self) -> String {
        self.url.trim_start_matches("http://").to_owned()
    }

    async fn get(&self, path: &str) -> Value {
        reqwest::get(format!("{}{path}", self.url))
            .await
            .expect("fake-gce answers")
            .json()
            .await
            .expect("json")
    }

    /// SIGTERM, as Ctrl-C in `just run` stops it: it writes its world and
    /// exits 0.
    async fn stop(mut self) {
        let status = terminate(&mut self.child, "fake-gce").await;
        assert!(status.success(), "fake-gce exited with {status:?}");
    }
}

/// Sends SIGTERM and waits for the exit (at most 30 s).
async fn terminate(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let pid = child.id().expect("pid");
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap_or_else(|_| panic!("{what} stops within 30 s of SIGTERM"))
        .expect("wait")
}

/// The long-running worker of `just run` (system clock), its log in a file.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(db: &TestDatabase, log: PathBuf) -> Worker {
        let file = std::fs::File::create(&log).expect("worker log");
        let mut cmd = worker::command_for(db.product_url());
        cmd.env("BC_CLOCK", "system")
            .env("BC_INTERVAL_MS", "200")
            .env("BC_VM_LIST_INTERVAL", "1s")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::from(file));
        let child = cmd.spawn().expect("spawn reconciler-worker");
        Worker { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of `count` over the "pass done" lines of `pass` so far.
    fn done(&self, pass: &str, count: &str) -> u64 {
        self.log()
            .lines()
            .filter(|l| l.contains("pass done") && worker::names_pass(l, pass))
            .filter_map(|l| {
                let at = l.find(&format!("{count}="))? + count.len() + 1;
                let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
                digits.parse::<u64>().ok()
            })
            .sum()
    }

    /// Waits until both accounts were scanned and the VM account listed a
    /// few times.
    async fn wait_for_rounds(&self, rounds: u64) {
        let deadline = Instant::now() + PATIENCE;
        while self.done("vps.reservations", "accountsScanned") < 2 * rounds
            || self.done("vps.instances", "accountsListed") < rounds
        {
            assert!(
                Instant::now() < deadline,
                "the worker did not scan and list {rounds} times: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn stop(mut self) -> String {
        let _ = terminate(&mut self.child, "reconciler-worker").await;
        self.log()
    }
}

/// What one `just run` started: fake-gce, the api-server and the worker.
struct Run {
    fake: Fake,
    api: Server,
    worker: Worker,
    /// demo-seed's summary.
    seeded: Value,
}

/// What `scripts/run.sh` does: fake-gce; an api-server on the manual clock
/// that demo-seed seeds (a fresh database's clock set back three days
/// first) followed by one worker round on the manual clock when it seeded;
/// then the api-server and the worker on the system clock.
async fn just_run(db: &TestDatabase, listen: &str, state: &Path, log: PathBuf) -> Run {
    let fake = Fake::start(listen, state).await;
    let seeder = Server::start_on(TestDatabase::existing(db.url()), Options::default()).await;
    {
        let mut conn = connect(&seeder).await;
        diesel::sql_query(
            "UPDATE manual_clock SET now_ms = \
             (floor(extract(epoch FROM now()) / 3600) * 3600 - 3 * 86400)::bigint * 1000 \
             WHERE (SELECT count(*) FROM tenants) = 1",
        )
        .execute(&mut conn)
        .await
        .expect("set a fresh database's clock back");
    }
    let seeded = demo::run_seeder_at(&seeder.url, &fake.url).await;
    if seeded["seeded"] == true {
        let once = worker::command_for(db.product_url())
            .arg("--once")
            .output()
            .await
            .expect("run the worker once");
        assert!(
            once.status.success(),
            "the seeding round failed: {}",
            String::from_utf8_lossy(&once.stderr)
        );
    }
    seeder.stop().await;
    let api = Server::start_on(
        TestDatabase::existing(db.url()),
        Options {
            clock: "system",
            ..Options::default()
        },
    )
    .await;
    let worker = Worker::start(db, log);
    Run {
        fake,
        api,
        worker,
        seeded,
    }
}

impl Run {
    /// Ctrl-C: everything stopped with SIGTERM.
    async fn stop(self) -> String {
        let log = self.worker.stop().await;
        self.api.stop().await;
        self.fake.stop().await;
        log
    }
}

fn ids(items: &Value, key: &str) -> Vec<String> {
    items["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i[key].as_str().expect(key).to_owned())
        .collect()
}

/// Everything a restart must keep, as the API and the fake show it (less
/// the times that move with every scan or listing).
async fn world(run: &Run, keys: &Value) -> Value {
    let s = &run.api;
    let mut reservations = BTreeMap::new();
    let accounts = s.root("providerAccounts/list", json!({})).await.ok();
    for account in ids(&accounts, "accountId") {
        let listed = s
            .root(
                "providerAccounts/listReservations",
                json!({ "accountId": account }),
            )
            .await
            .ok();
        for mut r in listed["items"].as_array().expect("items").clone() {
            let id = r["reservationId"].as_str().expect("id").to_owned();
            r.as_object_mut().expect("object").remove("lastScannedAt");
            reservations.insert(id, r);
        }
    }
    let grants = s
        .list_all(
            ROOT_TOKEN,
            "reservationGrants/list",
            json!({ "tenantId": ROOT, "all": true }),
        )
        .await
        .into_iter()
        .map(|mut g| {
            g.as_object_mut().expect("object").remove("meteredThrough");
            (g["grantId"].as_str().expect("grantId").to_owned(), g)
        })
        .collect::<BTreeMap<_, _>>();
    let mut instances = BTreeMap::new();
    let mut placements = BTreeMap::new();
    let listed = s
        .list_all(
            ROOT_TOKEN,
            "instances/list",
            json!({ "tenantId": ROOT, "all": true }),
        )
        .await;
    for mut i in listed {
        let id = i["instanceId"].as_str().expect("instanceId").to_owned();
        if let Some(vm) = i["vm"].as_object_mut() {
            vm.remove("observedAt");
        }
        placements.insert(id.clone(), format!("{:?}", segments(s, &id).await));
        instances.insert(id, i);
    }
    let mut events = BTreeMap::new();
    for tenant in [ROOT, "acme", "globex"] {
        let token = keys[tenant].as_str().unwrap_or(ROOT_TOKEN);
        let kept: Vec<Value> = s
            .events(token, tenant)
            .await
            .into_iter()
            .filter(|e| {
                let ty = e["type"].as_str().unwrap_or_default();
                ty.starts_with("instance.")
                    || ty == "reservation.gone"
                    || [
                        ".created",
                        ".active",
                        ".ended",
                        ".cancelled",
                        ".capacity-short",
                    ]
                    .iter()
                    .any(|end| ty.starts_with("reservation-grant") && ty.ends_with(end))
            })
            .collect();
        events.insert(tenant.to_owned(), kept);
    }
    json!({
        "reservations": reservations,
        "grants": grants,
        "instances": instances,
        "placementSegments": placements,
        "events": events,
        "fakeVmRuns": run.fake.get("/fake/vm-runs").await,
    })
}

/// The managed instances' ids, by name.
fn managed_ids(world: &Value) -> BTreeMap<String, String> {
    world["instances"]
        .as_object()
        .expect("instances")
        .iter()
        .filter(|(_, i)| MANAGED.contains(&i["name"].as_str().unwrap_or_default()))
        .map(|(id, i)| (i["name"].as_str().expect("name").to_owned(), id.clone()))
        .collect()
}

/// Waits until both managed instances are `running` (the fake's latency of
/// a few seconds makes them `provisioning` first).
async fn managed_running(s: &Server) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let listed = s
            .list_all(
                ROOT_TOKEN,
                "instances/list",
                json!({ "tenantId": ROOT, "all": true }),
            )
            .await;
        let running = listed
            .iter()
            .filter(|i| MANAGED.contains(&i["name"].as_str().unwrap_or_default()))
            .filter(|i| i["state"] == "running" && i["vm"]["status"] == "RUNNING")
            .count();
        if running == MANAGED.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the managed instances did not run: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn wall_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    i64::try_from(ms).expect("ms")
}

/// Every usage record, keyed by `(meter, owner, periodStart)`, asserting no
/// key twice.
async fn usage(s: &Server) -> BTreeMap<(String, String, i64), Value> {
    let mut out = BTreeMap::new();
    let all = json!({ "tenantId": ROOT, "all": true });
    for r in s.list_all(ROOT_TOKEN, "usage/list", all).await {
        let owner = ["instanceId", "grantId"]
            .iter()
            .filter_map(|k| r[*k].as_str())
            .collect::<Vec<_>>()
            .join("/");
        let key = (
            r["meter"].as_str().expect("meter").to_owned(),
            owner,
            r["periodStart"].as_i64().expect("periodStart"),
        );
        assert!(out.insert(key.clone(), r).is_none(), "{key:?} billed twice");
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn just_run_twice_brings_the_demo_world_back_as_it_was() {
    let db = TestDatabase::new().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("fake-gce.json");

    // The first `just run`: seeded, the managed VMs made (with the fake's
    // latency), the worker scanning and listing.
    let first = just_run(&db, "127.0.0.1:0", &state, dir.path().join("worker-1.log")).await;
    assert_eq!(first.seeded["seeded"], true, "{}", first.seeded);
    managed_running(&first.api).await;
    first.worker.wait_for_rounds(2).await;
    let keys = first.seeded["keys"].clone();
    let before = world(&first, &keys).await;
    let billed_before = usage(&first.api).await;
    let listen = first.fake.listen();
    first.stop().await;

    // The second `just run` on the same database and state file.
    let second = just_run(&db, &listen, &state, dir.path().join("worker-2.log")).await;
    assert_eq!(second.seeded, json!({ "seeded": false }));
    // Enough rounds that an empty fake would have shown: every reservation
    // gone at the first scan, the VMs lost at the listings.
    second.worker.wait_for_rounds(3).await;
    let after = world(&second, &keys).await;
    for part in [
        "reservations",
        "grants",
        "instances",
        "placementSegments",
        "fakeVmRuns",
        "events",
    ] {
        assert_eq!(
            after[part], before[part],
            "{part} changed across the restart"
        );
    }
    let statuses: Vec<&Value> = after["reservations"]
        .as_object()
        .expect("reservations")
        .values()
        .map(|r| &r["status"])
        .collect();
    assert_eq!(statuses, vec!["ready"; 3], "{}", after["reservations"]);
    let managed = managed_ids(&after);
    assert_eq!(managed.len(), 2, "{}", after["instances"]);
    for (name, id) in &managed {
        let inst = &after["instances"][id];
        assert_eq!(
            (&inst["state"], &inst["vm"]["status"]),
            (&json!("running"), &json!("RUNNING")),
            "{name}"
        );
        let vm = inst["vm"]["name"].as_str().expect("vm name");
        // One VM of that name ever made, running since before the restart.
        assert_eq!(after["fakeVmRuns"]["created"][vm], 1, "{name}");
        let runs = &after["fakeVmRuns"]["runs"][vm];
        assert_eq!(runs.as_array().map(Vec::len), Some(1), "{name}: {runs}");
        assert_eq!(runs[0][1], Value::Null, "{name} still runs: {runs}");
    }
    let billed_after = usage(&second.api).await;
    for (key, record) in &billed_before {
        assert_eq!(billed_after.get(key), Some(record), "{key:?} changed");
    }

    // Three hours on: the managed instances are billed every hour from
    // before the restart to now, each hour once.
    let log = second.worker.stop().await;
    for line in log.lines() {
        assert!(
            !line
                .replace("reservationsGone=0", "")
                .to_lowercase()
                .contains("gone"),
            "the worker saw something gone after the restart: {line}"
        );
    }
    let later = wall_ms() + 3 * HOUR;
    {
        let mut conn = connect(&second.api).await;
        diesel::sql_query(format!("UPDATE manual_clock SET now_ms = {later}"))
            .execute(&mut conn)
            .await
            .expect("clock");
    }
    let once = worker::command_for(db.product_url())
        .args(["--once", "--only", "vps.usage"])
        .output()
        .await
        .expect("run the worker once");
    assert!(
        once.status.success(),
        "{}",
        String::from_utf8_lossy(&once.stderr)
    );
    let billed = usage(&second.api).await;
    let last_full = (later / HOUR - 1) * HOUR;
    for (name, id) in &managed {
        let mut meters: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
        for ((meter, owner, at), r) in &billed {
            if owner.split('/').any(|o| o == id) {
                let q = r["quantity"].as_str().expect("quantity");
                let q = q.parse::<f64>().expect("a number");
                meters.entry(meter.as_str()).or_default().push((*at, q));
            }
        }
        assert!(!meters.is_empty(), "{name} is billed");
        for (meter, hours) in meters {
            let first_hour = <[_]>::first(&hours).map_or(0, |h| h.0) / HOUR;
            let starts: Vec<i64> = hours.iter().map(|h| h.0).collect();
            let every: Vec<i64> = (first_hour..=last_full / HOUR).map(|h| h * HOUR).collect();
            assert_eq!(starts, every, "{name} {meter}: every hour once, up to now");
            assert!(
                hours.iter().skip(1).all(|h| (h.1 - 1.0).abs() < 1e-6),
                "{name} {meter}: every hour after the first is whole: {hours:?}"
            );
        }
    }
    second.api.stop().await;
    second.fake.stop().await;
}

/// Runs `scripts/run.sh` with `env`, a `cargo` on the `PATH` that exits 97
/// (so a run that gets past its checks stops at its build, having started
/// nothing), and a bootstrap token and secrets key of its own (so it writes
/// no key under the checkout's `.data/`); answers its exit code and stderr.
async fn run_script(bin: &Path, env: &[(&str, String)]) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/run.sh");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .env("PATH", path)
        .env("BC_BOOTSTRAP_TOKEN", ROOT_TOKEN)
        .env(
            "BC_SECRETS_KEY",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )
        .env("BC_LISTEN", "127.0.0.1:1")
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("run.sh ends within 120 s")
        .expect("run scripts/run.sh");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn just_run_refuses_to_start_when_fake_gces_state_file_is_missing() {
    let s = Server::start().await;
    let port = worker::free_port();
    let fake_url = format!("http://127.0.0.1:{port}");
    s.root(
        "providerAccounts/create",
        json!({
            "name": "on the fake",
            "provider": "gce",
            "config": { "project": "platform-dev", "endpoint": fake_url, "credentials": "none" },
            "idempotencyKey": "run-sh-refusal",
        }),
    )
    .await
    .ok();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\nexit 97\n").expect("fake cargo");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let state = dir.path().join("fake-gce.json");
    let env = |listen: String| {
        vec![
            ("DATABASE_URL", s.db.url().to_owned()),
            ("BC_FAKE_GCE_LISTEN", listen),
            ("BC_FAKE_GCE_STATE", state.display().to_string()),
        ]
    };

    let (code, stderr) = run_script(&bin, &env(format!("127.0.0.1:{port}"))).await;
    assert_eq!(code, Some(1), "{stderr}");
    for says in [
        "fake-gce's state file is missing",
        "1 provider account(s) on http://127.0.0.1:",
        "would mark every reservation gone",
        "Nothing was started",
        "just reset && just run",
    ] {
        assert!(stderr.contains(says), "{says:?} in {stderr}");
    }
    assert!(!state.exists(), "no state file made");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens for the fake"
    );

    // The refusal is that case only: another fake's address, or the state
    // file there, and the run goes on (to the build, stopped by our cargo).
    let other = format!("127.0.0.1:{}", worker::free_port());
    let (code, stderr) = run_script(&bin, &env(other)).await;
    assert_eq!(code, Some(97), "{stderr}");
    std::fs::write(&state, "{}").expect("a state file");
    let (code, stderr) = run_script(&bin, &env(format!("127.0.0.1:{port}"))).await;
    assert_eq!(code, Some(97), "{stderr}");
}
