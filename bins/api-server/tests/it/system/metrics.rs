//! Both processes' metrics, read through a real OpenMetrics parser (the
//! Python `prometheus_client` one, which refuses anything malformed), moving
//! as an SRE expects: a pool exhausted by requests stuck on a row lock,
//! denials by class, metering lag while grants go unbilled, per-account
//! scan results and provider statuses while the provider fails, and the
//! reservation gauges equal to the API's slot accounts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::accounts::google_auth::account_on;
use crate::support::bodies::GrantBody;
use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::calls::create_project;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::hold_reservation;
use crate::support::fixtures::{platform_at_t0, reservations};
use crate::support::gce::Gce;
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

/// One parsed sample.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// Debian's python3 (where python3-prometheus-client installs), not a
/// python3 a version manager puts first on PATH.
fn python() -> String {
    ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .unwrap_or("python3")
        .to_owned()
}

/// Runs `program` with `args`, `text` on its standard input; its output.
fn pipe(program: &str, args: &[&str], text: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs (python3-prometheus-client, prometheus): {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    child.wait_with_output().expect("wait")
}

/// The exposition parsed by `prometheus_client`'s OpenMetrics parser
/// (`python3-prometheus-client`): it fails the test on anything it refuses,
/// and every family must have a HELP text.
fn parse(text: &str) -> Vec<Sample> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    if not family.documentation:
        raise SystemExit("no HELP for " + family.name)
    for s in family.samples:
        out.append({"name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let out = pipe(&python(), &["-c", SCRIPT], text);
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
    samples
        .into_iter()
        .map(|s| Sample {
            name: s["name"].as_str().expect("name").to_owned(),
            labels: serde_json::from_value(s["labels"].clone()).expect("labels"),
            value: s["value"].as_f64().expect("value"),
        })
        .collect()
}

/// The value of the sample `name` with (at least) `labels`.
pub(crate) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// What Prometheus sends: OpenMetrics preferred, the text format accepted.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.5,\
                                 application/openmetrics-text;version=0.0.1;q=0.4,\
                                 text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

async fn scrape(url: &str) -> Option<String> {
    let resp = reqwest::Client::new()
        .get(url)
        .header("accept", PROMETHEUS_ACCEPT)
        .send()
        .await
        .ok()?;
    let ctype = resp
        .headers()
        .get("content-type")?
        .to_str()
        .ok()?
        .to_owned();
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    resp.text().await.ok()
}

/// Scrapes until `ready` holds of the parsed samples (at most 60 s).
pub(crate) async fn scrape_until(
    url: &str,
    what: &str,
    ready: impl Fn(&[Sample]) -> bool,
) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(text) = scrape(url).await {
            let samples = parse(&text);
            if ready(&samples) {
                return samples;
            }
        }
        assert!(Instant::now() < deadline, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_servers_metrics_show_saturation_in_flight_and_denials() {
    let s = Server::start_with_env("BC_DB_POOL_SIZE", "2").await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new().slots(8).build(&s).await;
    let url = format!("{}/metrics", s.url);

    // Denials by class: a root-only method from a tenant, a viewer writing.
    s.call(
        &p.tenant_token,
        "reservationGrants/create",
        GrantBody::on(&p, 1)
            .term(T0, T0 + HOUR)
            .key("deny-1")
            .acting("acme")
            .json(),
    )
    .await
    .err(403, "ACCESS_DENIED");
    let viewer = s.key(&p.tenant_token, "acme", "viewer", None).await;
    create_project(&s, &viewer, "acme", "nope")
        .await
        .err(403, "ACCESS_DENIED");

    // Four creates stuck behind a row lock on the reservation, with two
    // connections in the pool: two hold them, two wait for one.
    let mut lock = hold_reservation(&s, &p.account, &p.reservation).await;
    let creates: Vec<_> = (0..4)
        .map(|k| {
            let (url, body) = (
                s.url.clone(),
                GrantBody::on(&p, 1)
                    .term(T0, T0 + HOUR)
                    .key(&format!("slow-{k}"))
                    .acting("root")
                    .json(),
            );
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(format!("{url}/api/compute/reservationGrants/create"))
                    .bearer_auth(ROOT_TOKEN)
                    .json(&body)
                    .send()
                    .await
                    .expect("create")
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let held = Instant::now();
    let busy = scrape_until(&url, "the pool exhausted", |m| {
        value(m, "bc_db_pool_waiting", &[]) >= Some(2.0)
            && value(m, "bc_db_pool_available", &[]) == Some(0.0)
            && value(m, "bc_db_pool_connections", &[]) == Some(2.0)
    })
    .await;
    assert_eq!(value(&busy, "bc_db_pool_connections", &[]), Some(2.0));
    assert_eq!(value(&busy, "bc_db_pool_max_connections", &[]), Some(2.0));
    // The four creates and the scrape itself.
    assert_eq!(value(&busy, "bc_api_requests_in_flight", &[]), Some(5.0));
    tokio::time::sleep(Duration::from_millis(800).saturating_sub(held.elapsed())).await;
    {
        use diesel_async::RunQueryDsl;
        diesel::sql_query("ROLLBACK")
            .execute(&mut lock)
            .await
            .expect("release the lock");
    }
    for c in creates {
        assert_eq!(c.await.expect("join"), 200);
    }
    let after = parse(&scrape(&url).await.expect("scrape"));
    let ok = [("method", "reservationGrants.create"), ("code", "OK")];
    assert_eq!(value(&after, "bc_api_requests_total", &ok), Some(4.0));
    let denied = [
        ("method", "reservationGrants.create"),
        ("code", "ACCESS_DENIED"),
    ];
    assert_eq!(value(&after, "bc_api_requests_total", &denied), Some(1.0));
    assert_eq!(
        value(&after, "bc_api_denials_total", &[("reason", "root-only")]),
        Some(1.0)
    );
    assert_eq!(
        value(&after, "bc_api_denials_total", &[("reason", "role")]),
        Some(1.0)
    );
    assert_eq!(value(&after, "bc_api_requests_in_flight", &[]), Some(1.0));
    assert_eq!(value(&after, "bc_db_pool_waiting", &[]), Some(0.0));
    // The creates took at least the lock's 0.8 s; the waits show in the
    // pool's histogram, above half a second for the two that queued.
    let create = [("method", "reservationGrants.create")];
    let fast = value(
        &after,
        "bc_api_request_duration_seconds_bucket",
        &[("method", "reservationGrants.create"), ("le", "0.5")],
    );
    assert_eq!(fast, Some(1.0), "only the denied create was fast");
    assert!(value(&after, "bc_api_request_duration_seconds_sum", &create) >= Some(3.2));
    let waits = value(&after, "bc_db_pool_wait_seconds_count", &[]).expect("waits");
    let quick = value(&after, "bc_db_pool_wait_seconds_bucket", &[("le", "0.5")]).expect("le");
    assert!(waits - quick >= 2.0, "{waits} waits, {quick} under 0.5 s");
    // Build and process.
    assert_eq!(
        value(&after, "bc_build_info", &[("process", "api-server")]),
        Some(1.0)
    );
    assert!(value(&after, "process_resident_memory_bytes", &[]) > Some(1e6));
    assert!(value(&after, "process_cpu_seconds_total", &[]) > Some(0.0));
    assert!(value(&after, "process_open_fds", &[]) > Some(5.0));
    assert!(value(&after, "process_start_time_seconds", &[]) > Some(1.7e9));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workers_metrics_show_lag_scan_failures_and_reservation_fullness() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    InstanceBuilder::new(&p).create(&s).await;
    s.set_clock(T0 + 5 * HOUR + 30 * MIN).await;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();

    // Only scans run: nothing is billed, the lag grows with the clock.
    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_WORKER_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("BC_INTERVAL_MS", "50")
        .args(["--only", "vps.reservations"]);
    let w = worker::Running::spawn(cmd);
    // The oldest unbilled hour is [T0, T0 + 1 h): 4.5 hours behind.
    // The gauges have a loop of their own: wait for a finished scan too.
    let scans_ok = [("account", p.account.as_str()), ("result", "ok")];
    let lagging = scrape_until(&url, "the lag after a scan", |m| {
        value(m, "bc_metering_lag_seconds", &[]) == Some(16_200.0)
            && value(m, "bc_worker_account_scans_total", &scans_ok) >= Some(1.0)
    })
    .await;
    assert_eq!(value(&lagging, "bc_usage_lag_seconds", &[]), Some(16_200.0));
    // The reservation's gauges are its slot accounts.
    let res = reservations(&s, &p.account).await[0].clone();
    let r = [
        ("account", p.account.as_str()),
        ("reservation", p.reservation.as_str()),
    ];
    for (kind, field) in [
        ("total", "total"),
        ("granted", "grantedSlots"),
        ("held", "heldInGrants"),
        ("ordinaryInUse", "ordinaryInUse"),
        ("ordinary", "ordinaryInUse"),
        ("physical", "physicalInUse"),
    ] {
        let mut labels = r.to_vec();
        labels.push(("kind", kind));
        assert_eq!(
            value(&lagging, "bc_reservation_slots", &labels),
            res[field].as_f64(),
            "{kind}: {res}"
        );
    }
    let mut active = r.to_vec();
    active.push(("state", "active"));
    assert_eq!(value(&lagging, "bc_reservation_grants", &active), Some(1.0));
    assert!(value(&lagging, "bc_provider_pages_total", &[]) >= Some(1.0));
    let last = value(
        &lagging,
        "bc_worker_pass_last_success_timestamp_seconds",
        &[("pass", "vps.reservations")],
    )
    .expect("last success");
    assert!(last >= started - 1.0, "{last} < {started}");

    // The provider fails: the account's scans are errors, its statuses 503.
    p.gce.fail(1).await;
    let failing = scrape_until(&url, "a failed scan", |m| {
        value(m, "bc_worker_account_scans_total", &[("result", "error")]) >= Some(1.0)
    })
    .await;
    let e503 = value(
        &failing,
        "bc_provider_request_duration_seconds_count",
        &[("status", "503")],
    );
    assert!(e503 >= Some(4.0), "{e503:?}");
    assert!(
        value(
            &failing,
            "bc_worker_pass_items_total",
            &[("item", "accountsFailed")]
        ) >= Some(1.0)
    );
    let (status, err) = w.terminate().await;
    assert!(status.success(), "{err}");

    // With every pass, metering catches up: no lag.
    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_WORKER_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("BC_INTERVAL_MS", "50");
    let w = worker::Running::spawn(cmd);
    // Each pass has run (each on its own loop) and the gauges are fresh.
    let caught_up = scrape_until(&url, "no lag", |m| {
        ["vps.reservations", "vps.grants", "vps.usage"]
            .iter()
            .all(|pass| {
                value(
                    m,
                    "bc_worker_pass_runs_total",
                    &[("pass", pass), ("outcome", "ok")],
                ) >= Some(1.0)
            })
            && value(m, "bc_reservation_slots", &[("kind", "total")]).is_some()
            && value(m, "bc_metering_lag_seconds", &[]) == Some(0.0)
            && value(m, "bc_usage_lag_seconds", &[]) == Some(0.0)
    })
    .await;
    for pass in ["vps.reservations", "vps.grants", "vps.usage"] {
        let ok = [("pass", pass), ("outcome", "ok")];
        assert!(
            value(&caught_up, "bc_worker_pass_runs_total", &ok) >= Some(1.0),
            "{pass}"
        );
        let err = [("pass", pass), ("outcome", "error")];
        assert_eq!(
            value(&caught_up, "bc_worker_pass_runs_total", &err),
            Some(0.0)
        );
        assert!(
            value(
                &caught_up,
                "bc_worker_pass_duration_seconds_count",
                &[("pass", pass)]
            ) >= Some(1.0)
        );
    }
    let records = [("pass", "vps.grants"), ("item", "records")];
    assert_eq!(
        value(&caught_up, "bc_worker_pass_items_total", &records),
        Some(5.0)
    );
    assert_eq!(value(&caught_up, "bc_capacity_short_total", &[]), Some(0.0));
    assert_eq!(
        value(&caught_up, "bc_reservation_gauges_dropped", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &caught_up,
            "bc_build_info",
            &[("process", "reconciler-worker")]
        ),
        Some(1.0)
    );
    let (status, err) = w.terminate().await;
    assert!(status.success(), "{err}");
}

/// Token refreshes and 401s: a worker on `adc` asks the metadata server
/// once, reuses the token, and asks again only when the provider refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn the_workers_metrics_count_token_refreshes_and_refusals() {
    let gce = Gce::start_with(fake_gce::FakeGceConfig {
        require_auth: true,
        ..fake_gce::FakeGceConfig::default()
    })
    .await;
    gce.put("res-a", 4, 0, "READY").await;
    let s = Server::start_with_env("GCE_METADATA_HOST", gce.host()).await;
    s.set_clock(T0).await;
    account_on(&s, ROOT_TOKEN, "root", &gce, "adc").await;
    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_WORKER_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("BC_INTERVAL_MS", "50")
        .env("GCE_METADATA_HOST", gce.host())
        .args(["--only", "vps.reservations"]);
    let w = worker::Running::spawn(cmd);
    let pages = |n: f64| move |m: &[Sample]| value(m, "bc_provider_pages_total", &[]) >= Some(n);
    let first = scrape_until(&url, "three pages", pages(3.0)).await;
    assert_eq!(
        value(&first, "bc_provider_token_refreshes_total", &[]),
        Some(1.0)
    );
    let ok = value(
        &first,
        "bc_provider_request_duration_seconds_count",
        &[("status", "200")],
    );
    assert!(ok >= Some(3.0), "{ok:?}");
    // Revoked at the provider: one 401, one fresh token, then pages again.
    gce.revoke_tokens().await;
    let seen = value(&first, "bc_provider_pages_total", &[]).unwrap_or(0.0);
    let after = scrape_until(&url, "a page after the refusal", |m| {
        value(m, "bc_provider_token_refreshes_total", &[]) == Some(2.0)
            && value(m, "bc_provider_pages_total", &[]) > Some(seen + 1.0)
    })
    .await;
    let refused = [("status", "401")];
    assert_eq!(
        value(
            &after,
            "bc_provider_request_duration_seconds_count",
            &refused
        ),
        Some(1.0)
    );
    assert_eq!(gce.tokens().await, (0, 2));
    let (status, err) = w.terminate().await;
    assert!(status.success(), "{err}");
}

/// The 0.0.4 text format, parsed by `prometheus_client`'s parser of that
/// format; every family documented.
fn parse_text_format(text: &str) -> Vec<String> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
names = []
for family in text_string_to_metric_families(sys.stdin.read()):
    if not family.documentation:
        raise SystemExit("no HELP for " + family.name)
    names.extend(s.name for s in family.samples)
print(json.dumps(names))
"#;
    let out = pipe(&python(), &["-c", SCRIPT], text);
    assert!(
        out.status.success(),
        "the text-format parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// `promtool check metrics` (Debian's `prometheus`) on the exposition: it
/// reads the text format only, and its lint must find nothing.
fn promtool_check(text: &str) {
    let out = pipe("promtool", &["check", "metrics"], text);
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scrape with `accept`: its content type and text.
async fn scrape_as(url: &str, accept: Option<&str>) -> (String, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = req.send().await.expect("scrape");
    assert_eq!(resp.status().as_u16(), 200, "{url}");
    let ctype = resp.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    (ctype, resp.text().await.expect("text"))
}

/// Both processes answer what the scraper's `Accept` asks for, as
/// Prometheus' client libraries do: the 0.0.4 text format by default (what
/// `promtool check metrics` and older scrapers read), OpenMetrics when asked.
/// With `BC_METRICS_LISTEN` the api-server serves `/metrics` there and no
/// longer on the API's listener.
#[tokio::test(flavor = "multi_thread")]
async fn expositions_follow_the_accept_header_and_move_to_their_own_listener() {
    let port = worker::free_port();
    let s = Server::start_with_env("BC_METRICS_LISTEN", format!("127.0.0.1:{port}")).await;
    s.root("tenants/list", json!({})).await.ok();
    let (status, body) = s.get_text("/metrics").await;
    assert_eq!(status, 404, "/metrics is still on the API listener: {body}");
    let api = format!("http://127.0.0.1:{port}/metrics");

    let wport = worker::free_port();
    let mut cmd = worker::command(&s);
    cmd.env("BC_WORKER_METRICS_LISTEN", format!("127.0.0.1:{wport}"))
        .env("BC_INTERVAL_MS", "50")
        .args(["--only", "vps.grants"]);
    let w = worker::Running::spawn(cmd);
    let worker_url = format!("http://127.0.0.1:{wport}/metrics");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(&worker_url).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the worker's metrics never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    for (url, counter) in [
        (&api, "bc_api_requests_total"),
        (&worker_url, "bc_worker_pass_runs_total"),
    ] {
        let (ctype, text) = scrape_as(url, None).await;
        assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8", "{url}");
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains(&format!("# TYPE {counter} counter\n")),
            "{text}"
        );
        let names = parse_text_format(&text);
        assert!(names.iter().any(|n| n == counter), "{counter} in {names:?}");
        promtool_check(&text);

        let (ctype, text) = scrape_as(url, Some(PROMETHEUS_ACCEPT)).await;
        assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(!parse(&text).is_empty());
        let (ctype, _) = scrape_as(
            url,
            Some("text/plain;q=0.9,application/openmetrics-text;q=0.1"),
        )
        .await;
        assert!(ctype.starts_with("text/plain"), "{ctype}");
    }
    let (_, text) = scrape_as(&api, None).await;
    assert!(
        text.contains(r#"bc_api_requests_total{method="tenants.list",code="OK"} 1"#),
        "{text}"
    );
    w.terminate().await;
}
