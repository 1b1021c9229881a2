//! The reconciler-worker process (contract 8.2): one log line per pass
//! naming what it did, Prometheus pass counters on
//! `BC_WORKER_METRICS_LISTEN`, `--only`, SIGTERM, usage errors.

use std::time::{Duration, Instant};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, T0};
use crate::support::fixtures::{id, platform_at_t0};
use crate::support::worker;

const PASSES: [&str; 5] = [
    "vps.reservations",
    "vps.grants",
    "vps.instances",
    "vps.usage",
    "events.webhooks",
];

#[tokio::test(flavor = "multi_thread")]
async fn each_pass_logs_one_line_naming_what_it_did() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 2 * HOUR).await;

    let err = worker::once_logged(&s, &[]).await;
    let done: Vec<&str> = err.lines().filter(|l| l.contains("pass done")).collect();
    assert_eq!(done.len(), PASSES.len(), "{err}");
    for (line, pass) in done.iter().zip(PASSES) {
        assert!(worker::names_pass(line, pass), "{line}");
        assert!(line.contains("elapsed_ms="), "{line}");
    }
    let grants = worker::pass_counts(&err, "vps.grants").expect("grants line");
    assert_eq!(grants["records"], 2, "{err}");
    assert_eq!(grants["grantsMetered"], 1, "{err}");
    let usage = worker::pass_counts(&err, "vps.usage").expect("usage line");
    assert_eq!(usage["records"], 2, "{err}");
    assert_eq!(usage["instancesMetered"], 1, "{err}");
    let scans = worker::pass_counts(&err, "vps.reservations").expect("scan line");
    assert_eq!(scans["accountsScanned"], 1, "{err}");

    // Nothing left to do: still one line per pass, counting zero.
    let err = worker::once_logged(&s, &["vps.grants"]).await;
    let done: Vec<&str> = err.lines().filter(|l| l.contains("pass done")).collect();
    assert_eq!(done.len(), 1, "{err}");
    assert!(worker::names_pass(done[0], "vps.grants"), "{err}");
    assert_eq!(
        worker::pass_counts(&err, "vps.grants").expect("line")["records"],
        0
    );
    // JSON logs carry the same fields.
    let (status, err) = worker::once_with(
        &s,
        &["vps.usage"],
        &[("RUST_LOG", "info"), ("RUST_LOG_FORMAT", "json")],
    )
    .await;
    assert!(status.success(), "{err}");
    let lines: Vec<serde_json::Value> = err
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["message"] == "pass done")
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert_eq!(lines[0]["pass"], "vps.usage");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_serve_pass_counters_and_sigterm_stops_the_worker() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * HOUR).await;
    let port = worker::free_port();
    let mut cmd = worker::command(&s);
    cmd.env("BC_WORKER_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("BC_INTERVAL_MS", "100")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1");
    let w = worker::Running::spawn(cmd);
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let scrape = async || -> Option<String> {
        let resp = client.get(&url).send().await.ok()?;
        resp.text().await.ok()
    };
    let value = |body: &str, series: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l[series.len() + 1..].trim().parse().ok())
    };
    let ok = |pass: &str| format!("bc_worker_pass_runs_total{{pass=\"{pass}\",outcome=\"ok\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        if let Some(b) = scrape().await
            && PASSES
                .iter()
                .all(|p| value(&b, &ok(p)).is_some_and(|v| v >= 1.0))
        {
            break b;
        }
        assert!(Instant::now() < deadline, "no pass counters within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A scrape without `Accept` gets the 0.0.4 text format.
    assert!(
        body.contains("# TYPE bc_worker_pass_runs_total counter"),
        "{body}"
    );
    for pass in PASSES {
        let failed = format!("bc_worker_pass_runs_total{{pass=\"{pass}\",outcome=\"error\"}}");
        assert_eq!(value(&body, &failed), Some(0.0), "{body}");
        assert!(
            value(
                &body,
                &format!("bc_worker_pass_duration_seconds_sum{{pass=\"{pass}\"}}")
            )
            .is_some(),
            "{body}"
        );
    }
    assert_eq!(
        value(
            &body,
            "bc_worker_pass_items_total{pass=\"vps.grants\",item=\"records\"}"
        ),
        Some(3.0),
        "{body}"
    );
    // The counters keep counting passes: every pass runs again (a whole
    // second round, so SIGTERM below never lands inside it).
    let first: Vec<f64> = PASSES
        .iter()
        .map(|p| value(&body, &ok(p)).expect("counter"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let b = scrape().await.expect("scrape");
        let grew = |(p, f): (&&str, &f64)| value(&b, &ok(p)).is_some_and(|v| v > *f);
        if PASSES.iter().zip(&first).all(grew) {
            break;
        }
        assert!(Instant::now() < deadline, "counter did not grow");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, err) = w.terminate().await;
    assert!(status.success(), "SIGTERM exits 0: {status:?}\n{err}");
    assert!(!err.contains("pass failed"), "{err}");
    assert!(
        err.lines().filter(|l| l.contains("pass done")).count() >= 6,
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_exit_2_before_doing_anything() {
    for (args, env, needle) in [
        (vec!["--once", "--only", "vps.nope"], vec![], "unknown pass"),
        (vec!["--bogus"], vec![], "unknown argument"),
        (vec!["--once"], vec![("BC_CLOCK", "sundial")], "BC_CLOCK"),
    ] {
        let mut cmd = tokio::process::Command::new(worker::path());
        cmd.args(&args)
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .env("NO_COLOR", "1")
            .env_remove("BC_CLOCK");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().await.expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
