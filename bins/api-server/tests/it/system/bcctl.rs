//! `bcctl`, the real binary, against the real api-server over HTTP: the
//! README's first session end to end, tables and JSON (equal to the API's
//! answers), `call` from the server's own schema, profiles whose token never
//! appears in process arguments, `events --follow`, and exit codes by class.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::bcctl::{Ctl, Run};
use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{Platform, id, platform_at_t0};
use crate::support::gce::Gce;
use crate::support::meter::{micros, total, usage};
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

/// The first column of a table's data rows.
fn first_column(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The README's first session, every step with bcctl: a provider account
/// on fake-gce, its scan, a pool, a binding, a tenant offered the pool, a
/// grant previewed then made, an instance landing in it, its hours, the
/// timeline, the events, the clock, and the grant's end.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_session_runs_with_bcctl() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let gce = Gce::start().await;
    gce.put("res-a", 8, 0, "READY").await;
    let root = Ctl::new(&s, ROOT_TOKEN);

    let account = root
        .run(&[
            "accounts",
            "create",
            "--name",
            "dev",
            "--project",
            "platform-prod",
            "--provider-endpoint",
            &gce.url,
            "--credentials",
            "none",
        ])
        .await
        .ok()
        .trim()
        .to_owned();
    assert!(account.starts_with("pacct_"), "{account}");
    let scanned = root.run(&["accounts", "scan", &account]).await;
    let reservation = Gce::reservation_id("res-a");
    assert!(scanned.ok().contains(&reservation), "{scanned:?}");
    let listed = root.run(&["accounts", "reservations", &account]).await;
    let header = listed.ok().lines().next().unwrap_or_default().to_owned();
    assert!(
        header.contains("TOTAL") && header.contains("FREE"),
        "{header}"
    );
    assert_eq!(
        first_column(listed.ok()),
        std::slice::from_ref(&reservation)
    );

    let pool = root
        .run(&[
            "pools",
            "create",
            "--name",
            "us-central1",
            "--region",
            "us-central1",
            "--account",
            &account,
            "--flavor",
            "n2-standard-4:4:16",
            "--quota",
            "instances=100",
        ])
        .await
        .ok()
        .trim()
        .to_owned();
    assert!(pool.starts_with("pool_"), "{pool}");
    root.run(&["accounts", "bind", &account, &reservation, "--pool", &pool])
        .await
        .ok();
    let acme_token = root
        .run(&["tenants", "create", "acme"])
        .await
        .ok()
        .trim()
        .to_owned();
    assert!(!acme_token.is_empty());
    root.run(&[
        "pools",
        "offer",
        &pool,
        "--to",
        "acme",
        "--quota",
        "instances=10",
        "--quota",
        "vcpus=40",
        "--quota",
        "memoryGib=160",
    ])
    .await
    .ok();

    // A dry run previews and writes nothing; the create then commits.
    let terms = [
        "--account",
        &account,
        "--reservation",
        &reservation,
        "--grantee",
        "acme",
        "--slots",
        "2",
        "--starts-at",
        "now",
        "--for",
        "3h",
    ];
    let mut dry = vec!["grants", "create", "--dry-run"];
    dry.extend(terms);
    let preview = root.run(&dry).await;
    assert!(
        preview.ok().contains("slotHours") && preview.ok().contains("6.000000"),
        "{preview:?}"
    );
    assert!(
        root.run(&["grants", "list", "--all"])
            .await
            .ok()
            .lines()
            .count()
            <= 1
    );
    let mut create = vec!["grants", "create", "-v"];
    create.extend(terms);
    let made = root.run(&create).await;
    let grant_id = made.ok().trim().to_owned();
    assert!(grant_id.starts_with("rgrant_"), "{made:?}");
    assert!(
        made.stderr.contains("idempotency key"),
        "-v shows the key: {made:?}"
    );
    let got = root
        .run(&["-o", "json", "grants", "get", &grant_id])
        .await
        .json();
    let api = s
        .root("reservationGrants/get", json!({ "grantId": grant_id }))
        .await
        .ok();
    assert_eq!(got, api, "-o json is the API's answer");
    assert_eq!(got["grant"]["endsAt"], T0 + 3 * HOUR);

    // acme's instance lands in its grant.
    let acme = Ctl::new(&s, &acme_token);
    let vm = acme
        .run(&[
            "--tenant",
            "acme",
            "instances",
            "create",
            "--pool",
            &pool,
            "--flavor",
            "n2-standard-4",
        ])
        .await
        .ok()
        .trim()
        .to_owned();
    let row = acme.run(&["--tenant", "acme", "instances", "list"]).await;
    assert!(
        row.ok().contains(&vm) && row.ok().contains(&grant_id),
        "{row:?}"
    );

    // Two hours on: the hours, the usage sums, the timeline, the events.
    root.run(&["clock", "set", "+2h"]).await.ok();
    assert!(
        root.run(&["clock", "get"])
            .await
            .ok()
            .contains("2030-01-01T02:00:00Z")
    );
    worker::once(&s, &[]).await;
    let hours = acme
        .run(&[
            "--tenant", "acme", "-o", "json", "grants", "usage", &grant_id,
        ])
        .await
        .json();
    assert_eq!(hours["items"].as_array().map(Vec::len), Some(3));
    let sums = acme
        .run(&[
            "--tenant", "acme", "-o", "json", "usage", "--sum-by", "grant",
        ])
        .await
        .json();
    let slot_records = usage(&s, &acme_token, "acme", "vm.grant.slot.hours").await;
    let slot_sum = sums["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["grantId"] == grant_id.as_str() && i["meter"] == "vm.grant.slot.hours")
        .expect("the grant's slot-hours");
    assert_eq!(
        micros(slot_sum["quantity"].as_str().expect("q")),
        total(&slot_records)
    );
    assert_eq!(slot_sum["quantity"], "4.000000");
    let chart = root
        .run(&[
            "timeline",
            "--account",
            &account,
            &reservation,
            "--from",
            "-2h",
            "--to",
            "+2h",
            "--width",
            "100",
        ])
        .await;
    assert!(
        chart.ok().contains("acme") && chart.ok().contains('█'),
        "{chart:?}"
    );
    assert!(
        chart.ok().lines().all(|l| l.chars().count() <= 100),
        "{chart:?}"
    );
    let events = acme.run(&["--tenant", "acme", "events"]).await;
    assert!(
        events.ok().contains("reservation-grant.active"),
        "{events:?}"
    );

    // The end is quiet on success, and the grant says so.
    let ended = root.run(&["grants", "end", &grant_id]).await;
    assert_eq!(ended.ok(), "", "quiet on success");
    let state = root
        .run(&["-o", "json", "grants", "get", &grant_id])
        .await
        .json();
    assert_eq!(state["grant"]["state"], "ended");
}

async fn api_list(s: &Server, token: &str, path: &str, body: Value) -> Value {
    s.call(token, path, body).await.ok()
}

/// `-o json` prints exactly what the API answers, for every read command;
/// tables show the same rows.
#[tokio::test(flavor = "multi_thread")]
async fn json_output_is_the_apis_answer_and_tables_show_its_rows() {
    let (s, p) = platform_at_t0(6).await;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let vm = id(&InstanceBuilder::new(&p).create(&s).await);
    let root = Ctl::new(&s, ROOT_TOKEN);
    let acme = Ctl::new(&s, &p.tenant_token);
    let cases: Vec<(&Ctl, Vec<&str>, &str, &str, Value)> = vec![
        (
            &root,
            vec!["grants", "list", "--all"],
            "reservationGrants/list",
            ROOT_TOKEN,
            json!({ "tenantId": "root", "all": true }),
        ),
        (
            &root,
            vec!["accounts", "list"],
            "providerAccounts/list",
            ROOT_TOKEN,
            json!({ "tenantId": "root" }),
        ),
        (
            &root,
            vec!["accounts", "reservations", &p.account],
            "providerAccounts/listReservations",
            ROOT_TOKEN,
            json!({ "tenantId": "root", "accountId": p.account }),
        ),
        (
            &root,
            vec!["pools", "list"],
            "pools/list",
            ROOT_TOKEN,
            json!({ "tenantId": "root" }),
        ),
        (
            &root,
            vec!["tenants", "list"],
            "tenants/list",
            ROOT_TOKEN,
            json!({ "tenantId": "root" }),
        ),
        (
            &root,
            vec!["keys", "list"],
            "apiKeys/list",
            ROOT_TOKEN,
            json!({ "tenantId": "root" }),
        ),
        (
            &acme,
            vec!["--tenant", "acme", "instances", "list"],
            "instances/list",
            &p.tenant_token,
            json!({ "tenantId": "acme" }),
        ),
        (
            &acme,
            vec!["--tenant", "acme", "quotas", "get"],
            "quotas/get",
            &p.tenant_token,
            json!({ "tenantId": "acme" }),
        ),
        (
            &acme,
            vec!["--tenant", "acme", "grants", "list"],
            "reservationGrants/list",
            &p.tenant_token,
            json!({ "tenantId": "acme" }),
        ),
        (
            &acme,
            vec!["--tenant", "acme", "grants", "usage", &g],
            "reservationGrants/usage",
            &p.tenant_token,
            json!({ "tenantId": "acme", "grantId": g }),
        ),
        (
            &acme,
            vec!["--tenant", "acme", "instances", "get", &vm],
            "instances/get",
            &p.tenant_token,
            json!({ "tenantId": "acme", "instanceId": vm }),
        ),
        (
            &root,
            vec!["pools", "get", &p.pool],
            "pools/get",
            ROOT_TOKEN,
            json!({ "tenantId": "root", "poolId": p.pool }),
        ),
    ];
    for (ctl, args, path, token, body) in cases {
        let mut json_args = vec!["-o", "json"];
        json_args.extend(&args);
        let got = ctl.run(&json_args).await.json();
        let want = api_list(&s, token, path, body).await;
        assert_eq!(got, want, "bcctl {}", args.join(" "));
        let yaml = {
            let mut a = vec!["-o", "yaml"];
            a.extend(&args);
            ctl.run(&a).await
        };
        assert!(
            !yaml.ok().trim_start().starts_with('{'),
            "YAML, not JSON: {yaml:?}"
        );
        let table = ctl.run(&args).await;
        if let Some(items) = want["items"].as_array() {
            assert_eq!(
                table.ok().lines().count(),
                items.len() + 1,
                "a header and one row per item: {table:?}"
            );
        } else {
            assert!(table.ok().starts_with("FIELD"), "{table:?}");
        }
    }
    // A grant row shows its times as RFC 3339.
    let t = root
        .run(&["grants", "list", "--all", "--state", "active"])
        .await;
    assert!(
        t.ok().contains(&g) && t.ok().contains("2030-01-01T00:00:00Z"),
        "{t:?}"
    );
    assert!(
        root.run(&["--local", "grants", "get", &g])
            .await
            .ok()
            .contains("2030-01-0")
    );
}

/// `bcctl call` reaches any method, typed by the server's OpenAPI document.
#[tokio::test(flavor = "multi_thread")]
async fn call_reaches_every_method_typed_by_the_servers_schema() {
    let (s, p) = platform_at_t0(6).await;
    let root = Ctl::new(&s, ROOT_TOKEN);
    // Every method the server lists is known to call.
    let methods = root.run(&["-o", "json", "methods"]).await.json();
    let names: Vec<String> = methods["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|m| m["name"].as_str().expect("name").to_owned())
        .collect();
    assert!(names.len() > 40, "{names:?}");
    for name in &names {
        let d = root.run(&["call", name, "--fields"]).await;
        assert!(
            d.ok().contains("FIELD") && d.ok().contains("tenantId"),
            "{name}: {d:?}"
        );
    }
    let fields = root
        .run(&["call", "reservationGrants.create", "--fields"])
        .await;
    assert!(
        fields.ok().contains("startsAt") && fields.ok().contains("time"),
        "{fields:?}"
    );

    // Fields typed by the schema, times in human forms, the key generated.
    let preview = root
        .run(&[
            "-o",
            "json",
            "call",
            "reservationGrants.preview",
            &format!("accountId={}", p.account),
            &format!("reservationId={}", p.reservation),
            "grantTenantId=acme",
            "slots=2",
            "startsAt=now",
            "endsAt=+90m",
        ])
        .await
        .json();
    assert_eq!(preview["preview"]["slotHours"], "3.000000");
    let made = root
        .run(&[
            "-o",
            "json",
            "call",
            "reservationGrants/create",
            &format!("accountId={}", p.account),
            &format!("reservationId={}", p.reservation),
            "grantTenantId=acme",
            "slots=1",
            "startsAt=2030-01-01T00:30:00Z",
            &format!("endsAt={}", T0 + 2 * HOUR),
        ])
        .await
        .json();
    assert_eq!(made["grant"]["startsAt"], T0 + 30 * MIN);
    let listed = root
        .run(&[
            "-o",
            "json",
            "call",
            "reservationGrants.list",
            "all=true",
            "states=scheduled",
        ])
        .await
        .json();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
    let data = root
        .run(&[
            "-o",
            "json",
            "call",
            "reservationGrants.get",
            "--data",
            &json!({ "grantId": made["grant"]["grantId"] }).to_string(),
        ])
        .await
        .json();
    assert_eq!(data["grant"], made["grant"]);

    // Refused before sending: unknown field, missing field, bad value, method.
    for (args, what) in [
        (
            vec!["call", "reservationGrants.get", "grant=x"],
            "unknown field",
        ),
        (vec!["call", "reservationGrants.get"], "needs grantId"),
        (
            vec!["call", "quotas.set", "poolId=p", "resource=r", "max=lots"],
            "not an integer",
        ),
        (
            vec!["call", "reservationGrants.make"],
            "reservationGrants.create",
        ),
    ] {
        let r = root.run(&args).await;
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains(what), "{args:?}: {r:?}");
        assert!(r.stdout.is_empty());
    }
}

/// The exit code says the class of failure; the error's code, message and
/// details go to standard error, nothing to standard output.
#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_follow_the_class_of_failure() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p: Platform = PlatformBuilder::new().slots(2).build(&s).await;
    let root = Ctl::new(&s, ROOT_TOKEN);
    let full = |slots: &'static str| {
        vec![
            "grants".to_owned(),
            "create".into(),
            "--account".into(),
            p.account.clone(),
            "--reservation".into(),
            p.reservation.clone(),
            "--grantee".into(),
            "acme".into(),
            "--slots".into(),
            slots.into(),
            "--for".into(),
            "1h".into(),
        ]
    };
    let capacity = run_owned(&root, full("5")).await;
    assert_eq!(capacity.code, 7, "{capacity:?}");
    assert!(
        capacity.stderr.contains("CAPACITY_UNAVAILABLE"),
        "{capacity:?}"
    );
    assert!(
        capacity.stderr.contains("\"granted\""),
        "details shown: {capacity:?}"
    );
    assert!(capacity.stdout.is_empty());
    let invalid = run_owned(&root, full("0")).await;
    assert_eq!(invalid.code, 4, "{invalid:?}");
    assert!(invalid.stderr.contains("INVALID_INPUT") && invalid.stderr.contains("slots"));
    let missing = root
        .run(&["grants", "get", "rgrant_00000000000000000000000000"])
        .await;
    assert_eq!(missing.code, 6, "{missing:?}");
    let acme = Ctl::new(&s, &p.tenant_token);
    let denied = run_owned(&acme, full("1")).await;
    assert_eq!(denied.code, 5, "{denied:?}");
    let bad_key = Ctl::new(&s, "bc_not_a_key");
    let r = bad_key.run(&["pools", "list"]).await;
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stderr.contains("UNAUTHENTICATED"));
    let usage_error = root.run(&["grants", "create", "--slots", "x"]).await;
    assert_eq!(usage_error.code, 2, "{usage_error:?}");
    let bad_time = root
        .run(&["grants", "list", "--active-at", "yesterday-ish"])
        .await;
    assert_eq!(bad_time.code, 2, "{bad_time:?}");
    assert!(bad_time.stderr.contains("yesterday-ish"), "{bad_time:?}");
    let mut nowhere = Ctl::new(&s, ROOT_TOKEN);
    nowhere.endpoint = String::new();
    let r = nowhere.run(&["pools", "list"]).await;
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("bcctl login"), "{r:?}");
    let mut down = Ctl::new(&s, ROOT_TOKEN);
    down.endpoint = "http://127.0.0.1:9".into();
    let r = down.run(&["pools", "list"]).await;
    assert_eq!(r.code, 8, "{r:?}");
}

async fn run_owned(ctl: &Ctl, args: Vec<String>) -> Run {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ctl.run(&refs).await
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

/// `bcctl login` reads the token from standard input, checks it, and keeps
/// it in a file only its owner reads; commands then use the profile, and
/// the token is in no process's arguments.
#[tokio::test(flavor = "multi_thread")]
async fn a_profile_login_keeps_the_token_out_of_arguments_and_other_eyes() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let mut ctl = Ctl::new(&s, ROOT_TOKEN);
    let endpoint = std::mem::take(&mut ctl.endpoint);
    ctl.token = None;

    // A wrong token is refused and nothing is saved.
    let bad = ctl
        .run_with(
            &["login", "--endpoint", &endpoint, "--profile", "dev"],
            "bc_wrong\n",
        )
        .await;
    assert_eq!(bad.code, 5, "{bad:?}");
    let file = ctl.config.path().join("bcctl").join("config.toml");
    assert!(!file.exists());

    let good = ctl
        .run_with(
            &["login", "--endpoint", &endpoint, "--profile", "dev"],
            &format!("{ROOT_TOKEN}\n"),
        )
        .await;
    assert_eq!(good.code, 0, "{good:?}");
    assert!(!good.stdout.contains(ROOT_TOKEN) && !good.stderr.contains(ROOT_TOKEN));
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().expect("dir")), 0o700);
    let text = std::fs::read_to_string(&file).expect("config");
    assert!(
        text.contains(ROOT_TOKEN) && text.contains("[profiles.dev]"),
        "{text}"
    );

    // Commands use the profile (the default now) with no token in the env.
    assert!(ctl.run(&["pools", "list"]).await.ok().starts_with("POOL"));
    assert_eq!(
        ctl.run(&["--profile", "nope", "pools", "list"]).await.code,
        3
    );
    // A long-running command's arguments hold no token.
    let mut follow = ctl.command(&["events", "--follow", "--interval", "0.1"]);
    let child = follow.spawn().expect("spawn");
    let pid = child.id().expect("pid");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(
        cmdline.contains("events") && !cmdline.contains(ROOT_TOKEN),
        "{cmdline}"
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    assert!(!String::from_utf8_lossy(&environ).contains(ROOT_TOKEN));
    drop(child);
}

/// `events --follow` prints an event written after it started.
#[tokio::test(flavor = "multi_thread")]
async fn events_follow_prints_an_event_written_after_it_started() {
    let (s, p) = platform_at_t0(4).await;
    let acme = Ctl::new(&s, &p.tenant_token);
    let mut child = acme
        .command(&[
            "--tenant",
            "acme",
            "-o",
            "json",
            "events",
            "--follow",
            "--interval",
            "0.1",
        ])
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Give it a first poll, then write a grant.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let g = GrantBuilder::new(&p)
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .create(&s)
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("no event within 20 s")
            .expect("read")
            .expect("bcctl exited");
        let e: Value = serde_json::from_str(&line).expect("one JSON object per line");
        if e["type"] == "reservation-grant.created" && e["data"]["grantId"] == g.as_str() {
            break;
        }
    }
    child.kill().await.ok();
}

/// Secrets: `put` reads the value from standard input or a file, never an
/// argument; list shows no value.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_are_put_from_stdin_or_a_file_and_never_shown() {
    let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let s = Server::start_with(crate::support::server::Options {
        env: vec![("BC_SECRETS_KEY".into(), key.into())],
        ..Default::default()
    })
    .await;
    let p = PlatformBuilder::new().slots(2).build(&s).await;
    let acme = Ctl::new(&s, &p.tenant_token);
    let fp = acme
        .run_with(
            &["--tenant", "acme", "secrets", "put", "gce-token"],
            "tok-123-secret\n",
        )
        .await;
    assert_eq!(fp.ok().trim().len(), 16, "the fingerprint: {fp:?}");
    let file = acme.config.path().join("value");
    std::fs::write(&file, "tok-456-secret").expect("write");
    acme.run(&[
        "--tenant",
        "acme",
        "secrets",
        "put",
        "other",
        "--from-file",
        file.to_str().expect("path"),
    ])
    .await
    .ok();
    let list = acme.run(&["--tenant", "acme", "secrets", "list"]).await;
    assert_eq!(first_column(list.ok()), ["gce-token", "other"]);
    assert!(
        !list.ok().contains("secret-") && !list.ok().contains("tok-"),
        "{list:?}"
    );
    acme.run(&["--tenant", "acme", "secrets", "delete", "other"])
        .await
        .ok();
    let again = acme
        .run(&["--tenant", "acme", "secrets", "delete", "other"])
        .await;
    assert_eq!(again.code, 6, "{again:?}");
}

/// Usage sums are exact (micro-units) by grant, meter and day, and a
/// completion script is printed for each shell.
#[tokio::test(flavor = "multi_thread")]
async fn usage_sums_are_exact_and_completions_print() {
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .slots(3)
        .term(T0 + 10 * MIN, T0 + 30 * HOUR)
        .create(&s)
        .await;
    InstanceBuilder::new(&p).create(&s).await;
    s.set_clock(T0 + 28 * HOUR + 5 * MIN).await;
    worker::once(&s, &[]).await;
    let acme = Ctl::new(&s, &p.tenant_token);
    let records = usage(&s, &p.tenant_token, "acme", "vm.grant.slot.hours").await;
    let by_day = acme
        .run(&[
            "--tenant",
            "acme",
            "-o",
            "json",
            "usage",
            "--meter",
            "vm.grant.slot.hours",
            "--sum-by",
            "day",
        ])
        .await
        .json();
    let days = by_day["items"].as_array().expect("items");
    assert_eq!(days.len(), 2, "{by_day}");
    assert_eq!(days[0]["day"], "2030-01-01");
    let day_total: i64 = days
        .iter()
        .map(|d| micros(d["quantity"].as_str().expect("q")))
        .sum();
    assert_eq!(day_total, total(&records));
    // 23 h 50 min of 3 slots on the first day.
    assert_eq!(days[0]["quantity"], "71.500000");
    let by_meter = acme
        .run(&[
            "--tenant", "acme", "-o", "json", "usage", "--sum-by", "meter",
        ])
        .await
        .json();
    let meters: Vec<&str> = by_meter["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|m| m["meter"].as_str().expect("meter"))
        .collect();
    assert!(meters.contains(&"vm.grant.slot.hours") && meters.contains(&"vm.grant.usage.hours"));
    let table = acme
        .run(&["--tenant", "acme", "usage", "--sum-by", "grant"])
        .await;
    assert!(table.ok().contains(&g), "{table:?}");
    for shell in ["bash", "zsh", "fish"] {
        let c = acme.run(&["completion", shell]).await;
        assert!(
            c.ok().contains("bcctl") && c.ok().contains("grants"),
            "{shell}"
        );
    }
    let help = acme.run(&["grants", "create", "--help"]).await;
    assert!(
        help.ok().contains("--dry-run") && help.ok().contains("--for"),
        "{help:?}"
    );
}

/// The rest of the nouns and verbs: keys, projects, quotas, instance
/// power, a preview, unbinding, deleting an account and a tenant.
#[tokio::test(flavor = "multi_thread")]
async fn the_other_commands_do_what_they_say() {
    let (s, p) = platform_at_t0(4).await;
    let root = Ctl::new(&s, ROOT_TOKEN);
    let acme = Ctl::new(&s, &p.tenant_token);
    let a = |args: &[&'static str]| {
        let mut v = vec!["--tenant", "acme"];
        v.extend(args);
        v
    };

    // Keys: a viewer key is made (its secret printed once), then revoked.
    let secret = acme
        .run(&a(&["keys", "create", "--role", "viewer", "--name", "ci"]))
        .await
        .ok()
        .trim()
        .to_owned();
    let viewer = Ctl::new(&s, &secret);
    assert!(
        viewer
            .run(&a(&["pools", "list"]))
            .await
            .ok()
            .starts_with("POOL")
    );
    let keys = acme.run(&a(&["-o", "json", "keys", "list"])).await.json();
    let ci = keys["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|k| k["name"] == "ci")
        .and_then(|k| k["keyId"].as_str())
        .expect("the ci key")
        .to_owned();
    acme.run(&["--tenant", "acme", "keys", "revoke", &ci])
        .await
        .ok();
    assert_eq!(viewer.run(&a(&["pools", "list"])).await.code, 5);

    // Projects and quotas.
    let prj = acme
        .run(&a(&["projects", "create", "web"]))
        .await
        .ok()
        .trim()
        .to_owned();
    assert!(prj.starts_with("prj_"), "{prj}");
    assert_eq!(
        first_column(acme.run(&a(&["projects", "list"])).await.ok()),
        std::slice::from_ref(&prj)
    );
    root.run(&[
        "--tenant",
        "acme",
        "quotas",
        "set",
        "--pool",
        &p.pool,
        "--resource",
        "instances",
        "--max",
        "7",
    ])
    .await
    .ok();
    let q = acme.run(&a(&["-o", "json", "quotas", "get"])).await.json();
    let instances = q["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|r| r["resource"] == "instances")
        .expect("instances row")
        .clone();
    assert_eq!(instances["max"], 7);

    // Instance power: stop, start, delete.
    let vm = acme
        .run(&[
            "--tenant",
            "acme",
            "instances",
            "create",
            "--pool",
            &p.pool,
            "--flavor",
            "n2-standard-4",
            "--project",
            &prj,
        ])
        .await
        .ok()
        .trim()
        .to_owned();
    acme.run(&["--tenant", "acme", "instances", "stop", &vm])
        .await
        .ok();
    assert_eq!(instance_state(&acme, &vm).await, "stopped");
    acme.run(&["--tenant", "acme", "instances", "start", &vm])
        .await
        .ok();
    assert_eq!(instance_state(&acme, &vm).await, "running");
    acme.run(&["--tenant", "acme", "instances", "delete", &vm])
        .await
        .ok();
    assert_eq!(instance_state(&acme, &vm).await, "deleted");

    // A preview answers as the API does and writes nothing.
    let preview = root
        .run(&[
            "-o",
            "json",
            "grants",
            "preview",
            "--account",
            &p.account,
            "--reservation",
            &p.reservation,
            "--grantee",
            "acme",
            "--slots",
            "5",
            "--starts-at",
            "+1h",
            "--ends-at",
            "+2h",
        ])
        .await
        .json();
    assert_eq!(preview["preview"]["fits"], false);
    assert_eq!(preview["preview"]["available"], 4);
    let table = root
        .run(&[
            "grants",
            "preview",
            "--account",
            &p.account,
            "--reservation",
            &p.reservation,
            "--grantee",
            "acme",
            "--slots",
            "1",
            "--for",
            "30m",
        ])
        .await;
    assert!(
        table.ok().contains("fits") && table.ok().contains("0.500000"),
        "{table:?}"
    );
    assert!(
        root.run(&["-o", "json", "grants", "list", "--all"])
            .await
            .json()["items"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );

    // Unbind, delete the account, delete the tenant.
    root.run(&["accounts", "unbind", &p.account, &p.reservation])
        .await
        .ok();
    let res = root
        .run(&["-o", "json", "accounts", "reservations", &p.account])
        .await
        .json();
    assert!(res["items"][0]["poolId"].is_null(), "{res}");
    root.run(&["accounts", "delete", &p.account]).await.ok();
    assert_eq!(root.run(&["accounts", "get", &p.account]).await.code, 6);
    root.run(&["tenants", "delete", "acme"]).await.ok();
    assert_eq!(acme.run(&a(&["pools", "list"])).await.code, 5);
}

async fn instance_state(ctl: &Ctl, vm: &str) -> String {
    let v = ctl
        .run(&["--tenant", "acme", "-o", "json", "instances", "get", vm])
        .await
        .json();
    v["instance"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `bcctl grants usage` shows the hours credited for a shortfall (contract
/// 5.4) beside the slot-hours, and `grants get` the grant's credit so far.
#[tokio::test(flavor = "multi_thread")]
async fn grants_usage_shows_the_hours_credited_for_a_shortfall() {
    use crate::billing::deficit::{GRANTS, total_at};
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    total_at(&s, &p, 2, T0 + 30 * MIN).await;
    s.set_clock(T0 + HOUR).await;
    worker::once(&s, &[GRANTS]).await;

    let acme = Ctl::new(&s, &p.tenant_token);
    let table = acme.run(&["--tenant", "acme", "grants", "usage", &g]).await;
    let lines: Vec<&str> = table.ok().lines().collect();
    assert!(lines[0].trim_end().ends_with("CREDITED"), "{lines:?}");
    let last = |l: &str| l.split_whitespace().last().map(str::to_owned);
    let credited: Vec<Option<String>> = lines[1..].iter().map(|l| last(l)).collect();
    let want = ["0.500000", "0.000000", "0.000000"].map(|q| Some(q.to_owned()));
    assert_eq!(credited, want, "{lines:?}");
    let got = acme
        .run(&["-o", "json", "--tenant", "acme", "grants", "get", &g])
        .await
        .json();
    assert_eq!(got["grant"]["deficitSlotHours"], "0.500000", "{got}");
}
