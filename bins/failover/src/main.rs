//! `just failover`: the product on a primary and a synchronous streaming
//! standby, under load; the primary is SIGKILLed and the standby promoted.
//!
//! Checked: every mutation answered 200 (before the kill and after) is there
//! afterwards, as answered; no usage record is lost or written twice once
//! the workers caught up (the chaos audit's oracle); between the kill and
//! the first write that succeeds again the API answers `503 UNAVAILABLE`,
//! never 500, and the api-server and the workers recover without a
//! restart. The time to recover is reported. Exits non-zero with the failed
//! check's message; everything it started is stopped and its temporary
//! directory removed either way.
//!
//! Needs the workspace's binaries beside this one (`cargo build --workspace
//! --bins`) and PostgreSQL's server binaries (`PG_BIN`, else the newest
//! `/usr/lib/postgresql/*/bin`); ports 29350 and 29351 on 127.0.0.1.

mod api;
mod audit;
mod cluster;
mod load;
mod procs;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use tokio::task::JoinHandle;

use crate::api::{Api, by_status};
use crate::cluster::{Cluster, DATABASE, Node, connect, database_url, tail};
use crate::load::{Load, lock};

/// Load before the kill.
const WARM_UP: Duration = Duration::from_secs(6);
/// Load between the kill and the promotion.
const BEFORE_PROMOTION: Duration = Duration::from_secs(2);
/// Load after the first write succeeds again.
const AFTER_RECOVERY: Duration = Duration::from_secs(4);

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    let cluster = match Cluster::new() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("failover: FAILED: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    // Interrupted, the scenario is dropped (its processes killed) and the
    // guard still runs.
    let result = tokio::select! {
        r = scenario(&cluster, started) => r,
        s = interrupted() => Err(anyhow::anyhow!("interrupted by {s}")),
    };
    let code = match result {
        #[expect(clippy::print_stdout, reason = "the summary is the run's output")]
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            for (name, path) in logs(&cluster) {
                let lines = tail(&path, 15);
                if !lines.is_empty() {
                    eprintln!("--- last lines of {name} ---\n{lines}");
                }
            }
            eprintln!("failover: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    };
    // The guard: servers stopped, temporary directory removed.
    drop(cluster);
    code
}

/// SIGINT or SIGTERM.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Every log of the run, by name.
fn logs(cluster: &Cluster) -> Vec<(String, std::path::PathBuf)> {
    let mut out = vec![
        ("primary.log".to_owned(), cluster.server_log(Node::Primary)),
        ("standby.log".to_owned(), cluster.server_log(Node::Standby)),
    ];
    if let Ok(dir) = std::fs::read_dir(cluster.logs()) {
        for e in dir.flatten() {
            out.push((e.file_name().to_string_lossy().into_owned(), e.path()));
        }
    }
    out
}

/// Waits `d`, failing as soon as a load task has stopped on an error.
async fn watch(tasks: &mut [JoinHandle<anyhow::Result<()>>], d: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        for t in tasks.iter_mut() {
            if t.is_finished() {
                t.await.context("a load task panicked")??;
                bail!("a load task stopped early");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// `usage_head.last_seq`: how many usage records were ever written.
async fn last_seq(node: Node) -> anyhow::Result<i64> {
    let client = connect(node, DATABASE).await?;
    let row = client
        .query_one("SELECT last_seq FROM usage_head WHERE id = 1", &[])
        .await?;
    Ok(row.get(0))
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

async fn scenario(cluster: &Cluster, started: Instant) -> anyhow::Result<String> {
    // 1. The pair, synchronous.
    cluster.start().await?;
    let url = database_url();

    // 2. The product's processes on the multi-host URL, and the world.
    let logs = cluster.logs();
    let (_gce, gce_url) = procs::fake_gce(&logs).await?;
    let (mut server, api_url) = procs::api_server(&logs, &url).await?;
    let api = Api::new(&api_url)?;
    let (world, clock) = load::seed(&api, &gce_url).await?;
    let mut workers = vec![
        procs::worker(&logs, &url, "worker-1", 200).await?,
        procs::worker(&logs, &url, "worker-2", 200).await?,
    ];

    // 3. The steady load; the workers must have metered before the kill.
    let load = Load::new(api.clone(), world, clock);
    let mut tasks: Vec<JoinHandle<anyhow::Result<()>>> = vec![
        tokio::spawn(load.clone().clock_task()),
        tokio::spawn(load.clone().grants_task()),
        tokio::spawn(load.clone().instances_task(0)),
        tokio::spawn(load.clone().instances_task(1)),
    ];
    watch(&mut tasks, WARM_UP).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while last_seq(Node::Primary).await? == 0 {
        ensure!(
            Instant::now() < deadline,
            "the workers wrote no usage record in 30 s"
        );
        watch(&mut tasks, Duration::from_millis(200)).await?;
    }

    // 4. The kill, then the promotion.
    let grants_before = lock(&load.ledger.grants)?.len();
    let instance_writes_before = load.ledger.instance_writes.load(Ordering::SeqCst);
    let records_before = last_seq(Node::Primary).await?;
    let killed = Instant::now();
    let children = cluster.kill_primary().await?;
    let all_gone = killed.elapsed();
    // Until the promotion, /readyz says the server cannot serve: 503 on
    // every probe, never 200 (a load balancer drains it).
    let mut ready_probes = Vec::new();
    let until = Instant::now() + BEFORE_PROMOTION;
    while Instant::now() < until {
        ready_probes.push(api.get_status("/readyz").await?);
        watch(&mut tasks, Duration::from_millis(100)).await?;
    }
    if let Some(status) = ready_probes.iter().find(|s| **s != 503) {
        bail!("/readyz answered {status} while the primary was down: {ready_probes:?}");
    }
    ensure!(
        !ready_probes.is_empty(),
        "/readyz was never probed in the gap"
    );
    cluster.promote_standby().await?;
    let promoted = killed.elapsed();

    // 5. Until a write sent after the kill succeeds, then a bit more.
    let deadline = Instant::now() + Duration::from_secs(60);
    let recovered = loop {
        let first = api
            .seen()
            .into_iter()
            .filter(|s| s.write && s.status == 200 && s.sent > killed)
            .map(|s| s.answered)
            .min();
        if let Some(at) = first {
            break at;
        }
        ensure!(
            Instant::now() < deadline,
            "no write succeeded within 60 s of the promotion"
        );
        watch(&mut tasks, Duration::from_millis(20)).await?;
    };
    let seq_at_recovery = last_seq(Node::Standby).await?;
    // Ready again on the promoted server, without a restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_status("/readyz").await? != 200 {
        ensure!(
            Instant::now() < deadline,
            "/readyz did not answer 200 within 30 s of the first successful write"
        );
        watch(&mut tasks, Duration::from_millis(50)).await?;
    }
    watch(&mut tasks, AFTER_RECOVERY).await?;
    // The running workers meter again, without a restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    while last_seq(Node::Standby).await? <= seq_at_recovery {
        ensure!(
            Instant::now() < deadline,
            "the running workers wrote no usage record in 30 s after the recovery"
        );
        watch(&mut tasks, Duration::from_millis(200)).await?;
    }
    for w in &mut workers {
        ensure!(w.running(), "{} exited (see {})", w.name, w.log.display());
    }
    ensure!(server.running(), "the api-server exited");
    load.stop();
    for t in tasks {
        t.await.context("a load task panicked")??;
    }
    let mut failed_passes = 0;
    for w in workers {
        let log = w.log.clone();
        w.terminate().await?;
        failed_passes += std::fs::read_to_string(&log)?
            .lines()
            .filter(|l| l.contains("pass failed"))
            .count();
    }

    // 6. Catch up, then audit.
    procs::worker_once(&logs, &url).await?;
    let mut audited = audit::Audited::default();
    audit::acknowledged(&api, &load, &mut audited).await?;
    audit::usage(&api, &load, &mut audited).await?;
    ensure!(server.running(), "the api-server exited");

    // 7. The answers: never 500; 503 only as UNAVAILABLE; nothing else in
    // the gap.
    let seen = api.seen();
    let fives: Vec<_> = seen.iter().filter(|s| s.status == 500).collect();
    if let Some(s) = fives.first() {
        bail!(
            "{} answers were 500, the first of {}: {s:?}",
            fives.len(),
            s.path
        );
    }
    if let Some(s) = seen
        .iter()
        .find(|s| s.status == 503 && s.code != "UNAVAILABLE")
    {
        bail!("a 503 without UNAVAILABLE: {s:?}");
    }
    let gap: Vec<_> = seen
        .iter()
        .filter(|s| s.sent > killed && s.answered < recovered)
        .collect();
    if let Some(s) = gap.iter().find(|s| s.status != 503) {
        bail!("during the gap an answer was not 503 UNAVAILABLE: {s:?}");
    }
    ensure!(!gap.is_empty(), "no request was answered during the gap");
    let mut messages = std::collections::BTreeMap::<&str, usize>::new();
    for s in &gap {
        *messages.entry(s.message.as_str()).or_default() += 1;
    }
    let gap_503 = gap.len();
    server.terminate().await?;

    let statuses = by_status(&seen)
        .into_iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let messages = messages
        .into_iter()
        .map(|(m, n)| format!("{m:?}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let recovery = recovered.duration_since(killed);
    Ok(format!(
        "failover: OK in {:.1} s\n\
         \x20 requests answered:        {} ({statuses})\n\
         \x20 503 UNAVAILABLE in gap:   {gap_503} ({messages})\n\
         \x20 /readyz in the gap:       503 on all {} probes, 200 after the recovery\n\
         \x20 500 answers:              0\n\
         \x20 primary's processes gone: {} after the SIGKILL ({children} children)\n\
         \x20 standby promoted:         {} after the kill\n\
         \x20 first write succeeded:    {} after the kill (time to recover)\n\
         \x20 acknowledged before kill: {grants_before} grants, {instance_writes_before} \
         instance writes, {records_before} usage records written\n\
         \x20 acknowledged, all found:  {} grants, {} instances (last state), {} clock ticks\n\
         \x20 usage records audited:    {} ({} slot-hour records of {} grants, up to {})\n\
         \x20 worker passes failed:     {failed_passes} (logged, retried; workers not restarted)",
        started.elapsed().as_secs_f64(),
        seen.len(),
        ready_probes.len(),
        ms(all_gone),
        ms(promoted),
        ms(recovery),
        audited.grants,
        audited.instances,
        load.ledger.ticks.load(Ordering::SeqCst),
        audited.records,
        audited.slot_records,
        audited.metered_grants,
        audited.cutoff,
    ))
}
