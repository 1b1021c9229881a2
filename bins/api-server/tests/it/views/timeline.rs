//! `reservations.timeline` and `reservationGrants.usage` (contract 3.10)
//! over HTTP, for a scenario worked out by hand: a take-in at a grant's
//! start, a hand-over to a renewal at its end, a refill of a freed slot, a
//! stop, and another tenant's grant; what a grantee may see of others; who
//! may read at all; capacity changes.

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    Platform, account_in, end_grant, id, in_grant, instance_op_ok, items, no_such, placement_of,
    plain, platform_at_t0, reservations, scan, second_account, tenant_with_pool,
};
use crate::support::meter::{micros, usage_all};
use crate::support::server::{Answer, ROOT, ROOT_TOKEN, Server};
use crate::support::worker;

const DAY: i64 = 24 * HOUR;

/// `reservations.timeline` of the platform's reservation.
async fn timeline(
    s: &Server,
    token: &str,
    tenant: &str,
    p: &Platform,
    from: i64,
    to: i64,
) -> Answer {
    timeline_of(s, token, tenant, (&p.account, &p.reservation), from, to).await
}

/// `reservations.timeline` of `(account, reservation)`.
async fn timeline_of(
    s: &Server,
    token: &str,
    tenant: &str,
    (account, reservation): (&str, &str),
    from: i64,
    to: i64,
) -> Answer {
    s.call(
        token,
        "reservations/timeline",
        json!({
            "tenantId": tenant,
            "accountId": account,
            "reservationId": reservation,
            "from": from,
            "to": to,
        }),
    )
    .await
}

/// The `vm.grant.slot.hours` records of an acme grant as `(periodStart
/// relative to T0, micros)`.
async fn billed(s: &Server, token: &str, grant: &str) -> Vec<(i64, i64)> {
    let filter = json!({ "grantId": grant, "meter": "vm.grant.slot.hours" });
    usage_all(s, token, "acme", filter)
        .await
        .iter()
        .map(|r| {
            let start = r["periodStart"].as_i64().expect("periodStart");
            (
                start - T0,
                micros(r["quantity"].as_str().expect("quantity")),
            )
        })
        .collect()
}

/// `committed` as `(from, to, slots)`, instants relative to T0.
fn committed(v: &Value) -> Vec<(i64, i64, i64)> {
    v["timeline"]["committed"]
        .as_array()
        .expect("committed")
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_i64().expect(k);
            (n("from") - T0, n("to") - T0, n("slots"))
        })
        .collect()
}

/// `inUse` as `(from, to, inGrants, ordinary)`, instants relative to T0.
fn in_use(v: &Value) -> Vec<(i64, i64, i64, i64)> {
    v["timeline"]["inUse"]
        .as_array()
        .expect("inUse")
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_i64().expect(k);
            (n("from") - T0, n("to") - T0, n("inGrants"), n("ordinary"))
        })
        .collect()
}

/// `events` as `(at relative to T0, type, grantId)`.
fn events(v: &Value) -> Vec<(i64, String, Option<String>)> {
    v["timeline"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["at"].as_i64().expect("at") - T0,
                e["type"].as_str().expect("type").to_owned(),
                e["grantId"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn ev(at: i64, kind: &str, grant: Option<&str>) -> (i64, String, Option<String>) {
    (
        at,
        format!("reservation-grant.{kind}"),
        grant.map(str::to_owned),
    )
}

/// `grants` of a timeline: `Ok(grantId)` for a full grant, `Err((slots,
/// startsAt, endsAt))` (relative to T0) for an anonymous one, which must
/// carry exactly those three fields.
fn grants(v: &Value) -> Vec<Result<String, (i64, i64, i64)>> {
    v["timeline"]["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| match g["grantId"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => {
                let keys: Vec<&String> = g.as_object().expect("object").keys().collect();
                assert_eq!(
                    keys.len(),
                    3,
                    "an anonymous grant is slots and term only: {g}"
                );
                let n = |k: &str| g[k].as_i64().expect(k);
                Err((n("slots"), n("startsAt") - T0, n("endsAt") - T0))
            }
        })
        .collect()
}

async fn usage(
    s: &Server,
    token: &str,
    tenant: &str,
    grant: &str,
    range: Option<(i64, i64)>,
) -> Answer {
    let mut body = json!({ "tenantId": tenant, "grantId": grant });
    if let Some((from, to)) = range {
        body["from"] = json!(from);
        body["to"] = json!(to);
    }
    s.call(token, "reservationGrants/usage", body).await
}

type Row = (i64, i64, String, String, String);

/// `items` of a usage answer as `(periodStart relative to T0, slots,
/// slotHours, heldHours, usageHours)`, checking each bucket is an hour.
fn rows(v: &Value) -> Vec<Row> {
    items(v)
        .iter()
        .map(|r| {
            let start = r["periodStart"].as_i64().expect("periodStart");
            assert_eq!(r["periodEnd"].as_i64(), Some(start + HOUR), "{r}");
            let q = |k: &str| r[k].as_str().expect(k).to_owned();
            (
                start - T0,
                r["slots"].as_i64().expect("slots"),
                q("slotHours"),
                q("heldHours"),
                q("usageHours"),
            )
        })
        .collect()
}

fn row(start: i64, slots: i64, slot: &str, held: &str, used: &str) -> Row {
    (start, slots, slot.into(), held.into(), used.into())
}

/// `(grantedSlots, heldInGrants, ordinaryInUse, ordinaryFree, physicalInUse)`.
async fn slot_accounts(s: &Server, p: &Platform) -> [i64; 5] {
    let listed = reservations(s, &p.account).await;
    let r = listed
        .iter()
        .find(|r| r["reservationId"] == p.reservation)
        .expect("the reservation");
    [
        "grantedSlots",
        "heldInGrants",
        "ordinaryInUse",
        "ordinaryFree",
        "physicalInUse",
    ]
    .map(|k| r[k].as_i64().expect(k))
}

#[tokio::test(flavor = "multi_thread")]
async fn timeline_and_usage_follow_take_in_hand_over_refill_and_stop() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    // acme runs a1 from T0 and a2 from T0+30m on ordinary slots; then
    // g1 (2 slots, 1h-3h) and its renewal g2 (1 slot, 3h-4h40m) for acme,
    // gx (1 slot, 2h-4h) for globex.
    let a1 = id(&InstanceBuilder::new(&p).key("a1").create(&s).await);
    s.set_clock(T0 + 30 * MIN).await;
    let a2 = id(&InstanceBuilder::new(&p).key("a2").create(&s).await);
    s.set_clock(T0 + 31 * MIN).await;
    let g1 = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + HOUR, T0 + 3 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 32 * MIN).await;
    let g2 = GrantBuilder::new(&p)
        .term(T0 + 3 * HOUR, T0 + 4 * HOUR + 40 * MIN)
        .create(&s)
        .await;
    s.set_clock(T0 + 33 * MIN).await;
    let gx = GrantBuilder::new(&p)
        .grantee("globex")
        .term(T0 + 2 * HOUR, T0 + 4 * HOUR)
        .create(&s)
        .await;

    // T0+1h30m: g1 started at 1h and took a1 and a2 in, but nothing has
    // settled the reservation since. The timeline shows it all the same,
    // and reading it settles nothing.
    s.set_clock(T0 + 90 * MIN).await;
    let early = timeline(&s, ROOT_TOKEN, ROOT, &p, T0, T0 + 2 * HOUR)
        .await
        .ok();
    assert_eq!(committed(&early), [(0, HOUR, 0), (HOUR, 2 * HOUR, 2)]);
    assert_eq!(
        in_use(&early),
        [
            (0, 30 * MIN, 0, 1),
            (30 * MIN, HOUR, 0, 2),
            (HOUR, 90 * MIN, 2, 0)
        ]
    );
    assert_eq!(
        events(&early),
        [
            ev(31 * MIN, "created", Some(&g1)),
            ev(32 * MIN, "created", Some(&g2)),
            ev(33 * MIN, "created", Some(&gx)),
            ev(HOUR, "active", Some(&g1)),
        ]
    );
    assert_eq!(slot_accounts(&s, &p).await, [2, 2, 0, 2, 2]);
    assert_eq!(placement_of(&s, t, "acme", &a1).await, plain("reservation"));

    // 2h: globex's instance enters gx. 3h30m: a1 is deleted; at 3h g1 had
    // handed a1 over to g2 and a2 to an ordinary slot, and now g2 refills
    // its freed slot with a2. 4h15m: a2 stops in g2 (after gx ended at 4h
    // and handed x1 to an ordinary slot).
    s.set_clock(T0 + 2 * HOUR).await;
    let x1 = id(&InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x1")
        .create(&s)
        .await);
    assert_eq!(
        placement_of(&s, &globex, "globex", &x1).await,
        in_grant(&gx)
    );
    s.set_clock(T0 + 3 * HOUR + 30 * MIN).await;
    instance_op_ok(&s, t, "acme", "delete", &a1).await;
    assert_eq!(placement_of(&s, t, "acme", &a2).await, in_grant(&g2));
    s.set_clock(T0 + 4 * HOUR + 15 * MIN).await;
    instance_op_ok(&s, t, "acme", "stop", &a2).await;

    // T0+4h30m.
    s.set_clock(T0 + 4 * HOUR + 30 * MIN).await;
    let all = timeline(&s, ROOT_TOKEN, ROOT, &p, T0, T0 + 6 * HOUR)
        .await
        .ok();
    let tl = &all["timeline"];
    assert_eq!(tl["reservationId"], json!(p.reservation));
    assert_eq!(
        (tl["total"].clone(), tl["from"].clone(), tl["to"].clone()),
        (json!(4), json!(T0), json!(T0 + 6 * HOUR))
    );
    assert_eq!(
        grants(&all),
        [Ok(g1.clone()), Ok(gx.clone()), Ok(g2.clone())]
    );
    assert_eq!(tl["grants"][1]["tenantId"], "globex");
    assert_eq!(tl["grants"][0]["state"], "ended");
    assert_eq!(tl["grants"][2]["state"], "active");
    let h = HOUR;
    assert_eq!(
        committed(&all),
        [
            (0, h, 0),
            (h, 2 * h, 2),
            (2 * h, 3 * h, 3),
            (3 * h, 4 * h, 2),
            (4 * h, 4 * h + 40 * MIN, 1),
            (4 * h + 40 * MIN, 6 * h, 0),
        ]
    );
    assert_eq!(
        in_use(&all),
        [
            (0, 30 * MIN, 0, 1),
            (30 * MIN, h, 0, 2),
            (h, 2 * h, 2, 0),
            (2 * h, 3 * h, 3, 0),
            (3 * h, 3 * h + 30 * MIN, 2, 1),
            (3 * h + 30 * MIN, 4 * h, 2, 0),
            (4 * h, 4 * h + 15 * MIN, 1, 1),
            (4 * h + 15 * MIN, 4 * h + 30 * MIN, 0, 1),
        ]
    );
    let every_event = [
        ev(31 * MIN, "created", Some(&g1)),
        ev(32 * MIN, "created", Some(&g2)),
        ev(33 * MIN, "created", Some(&gx)),
        ev(h, "active", Some(&g1)),
        ev(2 * h, "active", Some(&gx)),
        ev(3 * h, "ended", Some(&g1)),
        ev(3 * h, "active", Some(&g2)),
        ev(4 * h, "ended", Some(&gx)),
    ];
    assert_eq!(events(&all), every_event);
    assert_eq!(slot_accounts(&s, &p).await, [1, 1, 1, 2, 1]);

    // acme, a grantee, sees its grants in full and globex's anonymously;
    // the aggregates are the same; nothing names globex or its grant.
    let mine = timeline(&s, t, "acme", &p, T0, T0 + 6 * HOUR).await.ok();
    assert_eq!(
        grants(&mine),
        [Ok(g1.clone()), Err((1, 2 * h, 4 * h)), Ok(g2.clone())]
    );
    assert_eq!(committed(&mine), committed(&all));
    assert_eq!(in_use(&mine), in_use(&all));
    let anonymised: Vec<_> = every_event
        .iter()
        .map(|(at, kind, g)| (*at, kind.clone(), g.clone().filter(|g| *g != gx)))
        .collect();
    assert_eq!(events(&mine), anonymised);
    let text = mine.to_string();
    for hidden in [gx.as_str(), x1.as_str(), "\"globex\""] {
        assert!(!text.contains(hidden), "{hidden} shown to acme: {text}");
    }
    // globex likewise.
    let theirs = timeline(&s, &globex, "globex", &p, T0, T0 + 6 * HOUR)
        .await
        .ok();
    assert_eq!(
        grants(&theirs),
        [
            Err((2, h, 3 * h)),
            Ok(gx.clone()),
            Err((1, 3 * h, 4 * h + 40 * MIN))
        ]
    );
    let text = theirs.to_string();
    for hidden in [
        g1.as_str(),
        g2.as_str(),
        a1.as_str(),
        a2.as_str(),
        "\"acme\"",
    ] {
        assert!(!text.contains(hidden), "{hidden} shown to globex: {text}");
    }

    // Usage by hour. g2: 3h-4h committed 1 slot-hour, held by a1 then a2
    // half an hour each, both running; 4h-5h: 40 minutes committed, a2
    // held from 4h to now (4h30m), running until 4h15m.
    let g2_rows = vec![
        row(3 * h, 1, "1.000000", "1.000000", "1.000000"),
        row(4 * h, 1, "0.666667", "0.500000", "0.250000"),
    ];
    assert_eq!(rows(&usage(&s, t, "acme", &g2, None).await.ok()), g2_rows);
    assert_eq!(
        rows(&usage(&s, ROOT_TOKEN, ROOT, &g2, None).await.ok()),
        g2_rows
    );
    let g1_rows = vec![
        row(h, 2, "2.000000", "2.000000", "2.000000"),
        row(2 * h, 2, "2.000000", "2.000000", "2.000000"),
    ];
    assert_eq!(rows(&usage(&s, t, "acme", &g1, None).await.ok()), g1_rows);
    let gx_rows = vec![
        row(2 * h, 1, "1.000000", "1.000000", "1.000000"),
        row(3 * h, 1, "1.000000", "1.000000", "1.000000"),
    ];
    assert_eq!(
        rows(&usage(&s, &globex, "globex", &gx, None).await.ok()),
        gx_rows
    );
    // from/to pick the hours they overlap.
    let later = usage(&s, t, "acme", &g2, Some((T0 + 4 * h + 1, T0 + 10 * h)))
        .await
        .ok();
    assert_eq!(rows(&later), g2_rows[1..]);
    let first = usage(&s, t, "acme", &g2, Some((T0, T0 + 4 * h))).await.ok();
    assert_eq!(rows(&first), g2_rows[..1]);
    assert!(items(&usage(&s, t, "acme", &g2, Some((T0, T0 + h))).await.ok()).is_empty());
    for (from, to) in [(T0 + h, T0 + h), (T0 + 2 * h, T0 + h)] {
        let bad = usage(&s, t, "acme", &g2, Some((from, to))).await;
        let d = bad.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].clone(), d["reason"].clone()),
            (json!("to"), json!("range"))
        );
    }

    // slotHours is what is billed, usageHours what the grant's instances
    // record: the metering passes write exactly those for ended hours, and
    // the rows do not change.
    worker::once(&s, &["vps.grants", "vps.usage"]).await;
    assert_eq!(
        billed(&s, t, &g1).await,
        [(h, 2_000_000), (2 * h, 2_000_000)]
    );
    assert_eq!(billed(&s, t, &g2).await, [(3 * h, 1_000_000)]);
    let recorded: i64 = usage_all(
        &s,
        t,
        "acme",
        json!({ "grantId": g2, "meter": "vm.grant.usage.hours" }),
    )
    .await
    .iter()
    .filter(|r| r["periodStart"] == T0 + 3 * h)
    .map(|r| micros(r["quantity"].as_str().expect("quantity")))
    .sum();
    assert_eq!(recorded, 1_000_000);
    assert_eq!(rows(&usage(&s, t, "acme", &g2, None).await.ok()), g2_rows);

    // T0+5h: g2 ended at 4h40m and nothing has settled that. Its end is on
    // the timeline already, and its slot is free in the accounts.
    s.set_clock(T0 + 5 * HOUR).await;
    let tail = timeline(&s, ROOT_TOKEN, ROOT, &p, T0 + 4 * h, T0 + 6 * h)
        .await
        .ok();
    let tail_events = [
        ev(4 * h, "ended", Some(&gx)),
        ev(4 * h + 40 * MIN, "ended", Some(&g2)),
    ];
    assert_eq!(events(&tail), tail_events);
    assert_eq!(
        committed(&tail),
        [(4 * h, 4 * h + 40 * MIN, 1), (4 * h + 40 * MIN, 6 * h, 0)]
    );
    assert_eq!(
        in_use(&tail),
        [
            (4 * h, 4 * h + 15 * MIN, 1, 1),
            (4 * h + 15 * MIN, 5 * h, 0, 1)
        ]
    );
    assert_eq!(slot_accounts(&s, &p).await, [0, 0, 1, 3, 1]);
    // Once settled, the same timeline: the end's event is shown once.
    worker::once(&s, &["vps.grants"]).await;
    let settled = timeline(&s, ROOT_TOKEN, ROOT, &p, T0 + 4 * h, T0 + 6 * h)
        .await
        .ok();
    assert_eq!(events(&settled), tail_events);
    assert_eq!(in_use(&settled), in_use(&tail));
    assert_eq!(placement_of(&s, t, "acme", &a2).await, plain("none"));
}

#[tokio::test(flavor = "multi_thread")]
async fn who_may_read_a_timeline_and_a_grants_usage() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let initech = tenant_with_pool(&s, "initech", &p.pool).await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    // globex's only grant is cancelled: a grantee all the same.
    let cancelled = GrantBuilder::new(&p)
        .grantee("globex")
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .create(&s)
        .await;
    end_grant(&s, &p.account, &cancelled).await.ok();
    let (from, to) = (T0, T0 + 2 * HOUR);

    // Root, root's viewer, acme's admin, member and viewer keys read.
    let root_viewer = s.key(ROOT_TOKEN, ROOT, "viewer", None).await;
    let member = s.key(t, "acme", "member", None).await;
    let viewer = s.key(t, "acme", "viewer", None).await;
    for (token, tenant) in [
        (ROOT_TOKEN, ROOT),
        (root_viewer.as_str(), ROOT),
        (t.as_str(), "acme"),
        (member.as_str(), "acme"),
        (viewer.as_str(), "acme"),
    ] {
        let v = timeline(&s, token, tenant, &p, from, to).await.ok();
        assert_eq!(grants(&v)[0], Ok(g.clone()), "{tenant}");
        let u = usage(&s, token, tenant, &g, None).await.ok();
        assert_eq!(rows(&u).len(), 2, "{tenant}");
    }
    // Root sees the cancelled grant; acme does not see globex's cancelled
    // one at all (it commits nothing); globex sees its own.
    let root_view = timeline(&s, ROOT_TOKEN, ROOT, &p, from, to).await.ok();
    assert_eq!(grants(&root_view), [Ok(g.clone()), Ok(cancelled.clone())]);
    let acme_view = timeline(&s, t, "acme", &p, from, to).await.ok();
    assert_eq!(grants(&acme_view), [Ok(g.clone())]);
    assert!(!acme_view.to_string().contains(&cancelled));
    let globex_view = timeline(&s, &globex, "globex", &p, from, to).await.ok();
    assert_eq!(
        grants(&globex_view),
        [Err((1, 0, 2 * HOUR)), Ok(cancelled.clone())]
    );
    assert_eq!(globex_view["timeline"]["grants"][1]["state"], "cancelled");
    // A cancelled grant committed nothing: no hours.
    assert!(items(&usage(&s, &globex, "globex", &cancelled, None).await.ok()).is_empty());

    // A tenant without a grant on it, another tenant's grant, and unknown
    // objects: NOT_FOUND, the same answer as for a missing reservation.
    timeline(&s, &initech, "initech", &p, from, to)
        .await
        .err(404, "NOT_FOUND");
    usage(&s, &initech, "initech", &g, None)
        .await
        .err(404, "NOT_FOUND");
    usage(&s, &globex, "globex", &g, None)
        .await
        .err(404, "NOT_FOUND");
    usage(&s, t, "acme", &cancelled, None)
        .await
        .err(404, "NOT_FOUND");
    usage(&s, ROOT_TOKEN, ROOT, &no_such("rgrant"), None)
        .await
        .err(404, "NOT_FOUND");
    let missing = (
        p.account.as_str(),
        "projects/platform-prod/zones/us-central1-a/reservations/missing",
    );
    timeline_of(&s, ROOT_TOKEN, ROOT, missing, from, to)
        .await
        .err(404, "NOT_FOUND");
    timeline_of(&s, t, "acme", missing, from, to)
        .await
        .err(404, "NOT_FOUND");
    let nowhere = (no_such("pacct"), p.reservation.clone());
    let nowhere = (nowhere.0.as_str(), nowhere.1.as_str());
    timeline_of(&s, ROOT_TOKEN, ROOT, nowhere, from, to)
        .await
        .err(404, "NOT_FOUND");
    // The reservation on another account, and acme's own account naming it.
    let (_fake, account_b, _res_b) = second_account(&s, &p.pool, 2).await;
    let on_b = (account_b.as_str(), p.reservation.as_str());
    timeline_of(&s, ROOT_TOKEN, ROOT, on_b, from, to)
        .await
        .err(404, "NOT_FOUND");
    let acme_account = account_in(&s, t, "acme").await;
    let on_acme = (acme_account.as_str(), p.reservation.as_str());
    timeline_of(&s, t, "acme", on_acme, from, to)
        .await
        .err(404, "NOT_FOUND");

    // Keys limited to one provider account hold nothing at tenant scope:
    // denied whatever account they name.
    let scoped = s
        .key(t, "acme", "provider-admin", Some(&acme_account))
        .await;
    timeline(&s, &scoped, "acme", &p, from, to)
        .await
        .err(403, "ACCESS_DENIED");
    timeline_of(&s, &scoped, "acme", on_acme, from, to)
        .await
        .err(403, "ACCESS_DENIED");
    usage(&s, &scoped, "acme", &g, None)
        .await
        .err(403, "ACCESS_DENIED");
    // A key of another tenant acting in acme.
    timeline(&s, &globex, "acme", &p, from, to)
        .await
        .err(403, "ACCESS_DENIED");
    usage(&s, &globex, "acme", &g, None)
        .await
        .err(403, "ACCESS_DENIED");

    // The range: after from, at most 400 days.
    for (f, to) in [(T0, T0), (T0 + 1, T0), (T0, T0 + 400 * DAY + 1)] {
        let bad = timeline(&s, ROOT_TOKEN, ROOT, &p, f, to).await;
        let d = bad.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].clone(), d["reason"].clone()),
            (json!("to"), json!("range"))
        );
    }
    let year = timeline(&s, ROOT_TOKEN, ROOT, &p, T0, T0 + 400 * DAY)
        .await
        .ok();
    assert_eq!(
        committed(&year),
        [(0, 2 * HOUR, 1), (2 * HOUR, 400 * DAY, 0)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_answers_at_most_9000_hours_and_future_hours_hold_nothing() {
    let (s, p) = platform_at_t0(2).await;
    let t = &p.tenant_token;
    let start = T0 + 10 * HOUR;
    let long = GrantBuilder::new(&p)
        .slots(2)
        .term(start, start + 9001 * HOUR + 30 * MIN)
        .create(&s)
        .await;
    let d = usage(&s, t, "acme", &long, None)
        .await
        .err(400, "INVALID_INPUT")
        .clone();
    assert_eq!(
        (d["field"].clone(), d["reason"].clone()),
        (json!("to"), json!("range"))
    );
    assert_eq!(d["maxBuckets"], 9000);
    // 9000 hours is allowed; the hours after now are committed, not held.
    let most = usage(&s, t, "acme", &long, Some((start, start + 9000 * HOUR)))
        .await
        .ok();
    let all = rows(&most);
    assert_eq!(all.len(), 9000);
    assert_eq!(
        all[0],
        row(10 * HOUR, 2, "2.000000", "0.000000", "0.000000")
    );
    assert_eq!(all[8999].0, 10 * HOUR + 8999 * HOUR);
    // The last, partial hour of the term: 30 minutes of 2 slots.
    let tail = usage(
        &s,
        t,
        "acme",
        &long,
        Some((start + 9001 * HOUR, start + 9002 * HOUR)),
    )
    .await
    .ok();
    assert_eq!(
        rows(&tail),
        [row(
            10 * HOUR + 9001 * HOUR,
            2,
            "1.000000",
            "0.000000",
            "0.000000"
        )]
    );
    // A root grant on another account's reservation, read by root.
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 1).await;
    let mine = GrantBuilder::on(&account_b, &res_b)
        .grantee(ROOT)
        .term(T0 + 20 * MIN, T0 + HOUR)
        .create(&s)
        .await;
    assert_eq!(
        rows(&usage(&s, ROOT_TOKEN, ROOT, &mine, None).await.ok()),
        [row(0, 1, "0.666667", "0.000000", "0.000000")]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_changes_and_the_loss_of_the_reservation_are_on_the_timeline() {
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .slots(3)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    // 1h: the provider shrinks it below the grant; 2h: it is gone.
    s.set_clock(T0 + HOUR).await;
    p.gce.put("res-a", 2, 0, "READY").await;
    scan(&s, &p.account).await;
    s.set_clock(T0 + 2 * HOUR).await;
    p.gce.delete("res-a").await;
    scan(&s, &p.account).await;
    s.set_clock(T0 + 3 * HOUR).await;

    let expected = [
        ev(0, "created", Some(&g)),
        ev(0, "active", Some(&g)),
        ev(HOUR, "capacity-short", None),
        ev(2 * HOUR, "ended", Some(&g)),
        (2 * HOUR, "reservation.gone".to_owned(), None),
    ];
    let root_view = timeline(&s, ROOT_TOKEN, ROOT, &p, T0, T0 + 6 * HOUR)
        .await
        .ok();
    assert_eq!(events(&root_view), expected);
    assert_eq!(root_view["timeline"]["total"], 2);
    assert_eq!(
        committed(&root_view),
        [(0, 2 * HOUR, 3), (2 * HOUR, 6 * HOUR, 0)]
    );
    assert_eq!(
        root_view["timeline"]["grants"][0]["reason"],
        "reservation-gone"
    );
    // The grantee sees the capacity changes of its reservation too.
    let acme_view = timeline(&s, &p.tenant_token, "acme", &p, T0, T0 + 6 * HOUR)
        .await
        .ok();
    assert_eq!(events(&acme_view), expected);
    // A range that holds none of it, partly after now.
    let later = timeline(&s, ROOT_TOKEN, ROOT, &p, T0 + 150 * MIN, T0 + 4 * HOUR)
        .await
        .ok();
    assert!(events(&later).is_empty());
    assert!(grants(&later).is_empty());
    assert_eq!(committed(&later), [(150 * MIN, 4 * HOUR, 0)]);
    assert_eq!(in_use(&later), [(150 * MIN, 3 * HOUR, 0, 0)]);
    // Entirely after now: nothing in use yet.
    let future = timeline(&s, ROOT_TOKEN, ROOT, &p, T0 + 4 * HOUR, T0 + 5 * HOUR)
        .await
        .ok();
    assert!(in_use(&future).is_empty());
}

/// Stop/start cycles of one instance in the history below.
const CYCLES: i64 = 100_000;
/// One cycle: running 9 s, then stopped 9 s (200 cycles an hour).
const CYCLE_MS: i64 = 18_000;

/// A grantee stopped and started one instance 100,000 times (written in
/// SQL as the API writes it: a running then a stopped segment in the grant
/// per cycle, each starting where the last ended, then the open running
/// segment). The timeline, `reservationGrants.usage` and a notices pass
/// answer exactly, and the segment rows each reads from the database are
/// bounded by its answer, not by the history. The bound is on rows the
/// storage readers return (what the process loads and walks), counted by
/// calling them with the arguments the operations use; a wall-time bound
/// would fail on a loaded machine:
/// - the timeline loads the running spans: one per start, so at most half
///   its `inUse` steps plus one (the 200,001 segments were loaded before,
///   stops included);
/// - usage loads one row per hour bucket its segments touch, at most its
///   answer's rows (720 here, against 200,001 segments before);
/// - the notices load what the grant held merged per instance: one row
///   for an instance that never left the grant (200,001 before).
#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_thousand_stop_start_cycles_keep_views_and_notices_bounded() {
    use diesel::sql_types::{BigInt, Text};
    use diesel_async::RunQueryDsl;
    use grants_core::Term;
    use storage::model::segment;

    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 30 * DAY)
        .create(&s)
        .await;
    let x = InstanceBuilder::new(&p).key("x").create(&s).await;
    assert_eq!(crate::support::fixtures::placement(&x), in_grant(&g));
    let mut conn = crate::support::db::db(&s).await;
    diesel::sql_query("DELETE FROM placement_segments WHERE instance_id = $1")
        .bind::<Text, _>(id(&x))
        .execute(&mut conn)
        .await
        .expect("delete");
    let last = T0 + CYCLES * CYCLE_MS;
    assert_eq!(last, T0 + 500 * HOUR);
    let inserted = diesel::sql_query(
        "INSERT INTO placement_segments \
           (instance_id, from_ms, to_ms, kind, running, grant_id, account_id, reservation_id) \
         SELECT $1, $2 + k * $3 + h * ($3 / 2), $2 + k * $3 + (h + 1) * ($3 / 2), 'grant', \
                h = 0, $4, $5, $6 \
         FROM generate_series(0::bigint, $7 - 1) k, generate_series(0::bigint, 1) h \
         UNION ALL SELECT $1, $2 + $7 * $3, NULL, 'grant', true, $4, $5, $6",
    )
    .bind::<Text, _>(id(&x))
    .bind::<BigInt, _>(T0)
    .bind::<BigInt, _>(CYCLE_MS)
    .bind::<Text, _>(&g)
    .bind::<Text, _>(&p.account)
    .bind::<Text, _>(&p.reservation)
    .bind::<BigInt, _>(CYCLES)
    .execute(&mut conn)
    .await
    .expect("the history");
    assert_eq!(inserted, 2 * CYCLES as usize + 1);
    let now = last + 30 * MIN;
    s.set_clock(now).await;

    // The timeline: one step per start and per stop, then the open one.
    let t = timeline(&s, ROOT_TOKEN, ROOT, &p, T0, T0 + 501 * HOUR)
        .await
        .ok();
    let steps = in_use(&t);
    assert_eq!(steps.len(), 2 * CYCLES as usize + 1);
    assert_eq!(
        steps[..3],
        [
            (0, 9_000, 1, 0),
            (9_000, 18_000, 0, 0),
            (18_000, 27_000, 1, 0)
        ]
    );
    assert_eq!(
        steps[steps.len() - 2..],
        [
            (500 * HOUR - 9_000, 500 * HOUR, 0, 0),
            (500 * HOUR, 500 * HOUR + 30 * MIN, 1, 0)
        ]
    );
    let running = segment::running_spans(&mut conn, &p.account, &p.reservation, Term::new(T0, now))
        .await
        .expect("running spans");
    assert_eq!(running.len(), CYCLES as usize);
    assert!(running.len() <= steps.len() / 2 + 1);

    // Usage: every hour held the instance throughout and ran it half.
    let u = usage(&s, &p.tenant_token, "acme", &g, None).await.ok();
    let got = rows(&u);
    assert_eq!(got.len(), 720);
    for (k, r) in got.iter().enumerate() {
        let k = i64::try_from(k).expect("k");
        let expected = match k {
            0..500 => row(k * HOUR, 2, "2.000000", "1.000000", "0.500000"),
            500 => row(k * HOUR, 2, "2.000000", "0.500000", "0.500000"),
            _ => row(k * HOUR, 2, "2.000000", "0.000000", "0.000000"),
        };
        assert_eq!(*r, expected, "hour {k}");
    }
    let hours = Term::new(T0, now);
    let buckets = segment::grant_bucket_ms(&mut conn, &p.account, &p.reservation, &g, hours)
        .await
        .expect("bucket sums");
    assert_eq!(buckets.len(), 500);
    assert!(buckets.len() <= got.len());

    // Notices: the last 24 hours held one instance of two slots.
    let env = [("BC_EXPIRY_NOTICES", "none"), ("BC_UNDERUSE_RATIO", "0.6")];
    let (status, err) = worker::once_with(&s, &["vps.grants"], &env).await;
    assert!(status.success(), "{err}");
    let underused = s
        .events_of(ROOT_TOKEN, ROOT, "reservation-grant.underused")
        .await;
    assert_eq!(underused.len(), 1, "{underused:?}");
    let d = &underused[0]["data"];
    assert_eq!(d["grantId"], g.as_str());
    assert_eq!(
        (&d["utilisation"], &d["suggestedSlots"]),
        (&json!("0.500000"), &json!(1))
    );
    let held = segment::held_spans(&mut conn, &p.account, &p.reservation, &g, hours)
        .await
        .expect("held spans");
    assert_eq!(
        held.iter()
            .map(|h| (h.from - T0, h.to.map(|t| t - T0)))
            .collect::<Vec<_>>(),
        [(0, Some(500 * HOUR))]
    );
}
