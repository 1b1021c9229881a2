//! reservationGrants.preview (contract 3.6, r2): the same checks and codes
//! as create from the same code path, a grant that does not fit answered as
//! `fits: false`, the exact slot-hours the meter then writes, the instances
//! it would take in, and nothing written.

use serde_json::{Value, json};

use crate::support::bodies::GrantBody;
use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, SEC, T0};
use crate::support::db::contents;
use crate::support::fixtures::{
    Platform, create_grant, get_instance, grant_body, grant_body_for, grant_id, grant_of, id,
    no_such, platform_at_t0, unbind,
};
use crate::support::meter::{micros, round_micros, total, usage};
use crate::support::rng::Rng;
use crate::support::server::{Answer, ROOT_TOKEN, Server};
use crate::support::worker;

/// The preview body of a create body: the same input without its key.
fn preview_of(create: &Value) -> Value {
    let mut body = create.clone();
    body.as_object_mut()
        .expect("object")
        .remove("idempotencyKey");
    body
}

async fn preview(s: &Server, create: &Value) -> Answer {
    s.root("reservationGrants/preview", preview_of(create))
        .await
}

fn key() -> String {
    format!("k-{}", crate::support::server::rand_suffix())
}

#[tokio::test(flavor = "multi_thread")]
async fn preview_and_create_agree_on_fitting_and_refusing() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .slots(3)
        .term(T0 + HOUR, T0 + 5 * HOUR)
        .create(&s)
        .await;

    // Does not fit: 2 more slots over an hour where 3 of 4 are committed.
    let body = grant_body(&p, 2, T0 + 2 * HOUR, T0 + 3 * HOUR, &key());
    let v = preview(&s, &body).await.ok()["preview"].clone();
    assert_eq!(v["fits"], false, "{v}");
    assert_eq!(
        (&v["total"], &v["granted"], &v["available"]),
        (&json!(4), &json!(3), &json!(1))
    );
    let refused = create_grant(&s, body).await;
    let details = refused.err(409, "CAPACITY_UNAVAILABLE").clone();
    assert_eq!(
        (&details["total"], &details["granted"]),
        (&v["total"], &v["granted"])
    );

    // Fits: the same term with the one slot left, and a term after the peak.
    for body in [
        grant_body(&p, 1, T0 + 2 * HOUR, T0 + 3 * HOUR, &key()),
        grant_body(&p, 4, T0 + 5 * HOUR, T0 + 6 * HOUR, &key()),
    ] {
        let v = preview(&s, &body).await.ok()["preview"].clone();
        assert_eq!(v["fits"], true, "{v}");
        create_grant(&s, body).await.ok();
    }
    // Now full over [2h, 3h): the preview says so and the create agrees.
    let body = grant_body(
        &p,
        1,
        T0 + 2 * HOUR + 30 * MIN,
        T0 + 2 * HOUR + 31 * MIN,
        &key(),
    );
    let v = preview(&s, &body).await.ok()["preview"].clone();
    assert_eq!(
        (&v["fits"], &v["granted"], &v["available"]),
        (&json!(false), &json!(4), &json!(0))
    );
    create_grant(&s, body)
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
}

#[tokio::test(flavor = "multi_thread")]
async fn random_terms_never_make_preview_and_create_disagree() {
    let (s, p) = platform_at_t0(6).await;
    let mut rng = Rng::from_env("preview_agrees");
    let (mut fits, mut refused) = (0, 0);
    for _ in 0..60 {
        let starts = T0 + rng.range(0, 48) * 30 * MIN + rng.range(0, 59) * SEC;
        let ends = starts + rng.range(1, 12 * 60) * MIN + rng.range(0, 999);
        let body = grant_body(&p, rng.range(1, 4), starts, ends, &key());
        let v = preview(&s, &body).await.ok()["preview"].clone();
        let a = create_grant(&s, body).await;
        if v["fits"] == true {
            assert_eq!(a.status, 200, "preview said it fits: {v} {:?}", a.body);
            fits += 1;
        } else {
            let d = a.err(409, "CAPACITY_UNAVAILABLE").clone();
            assert_eq!((&d["total"], &d["granted"]), (&v["total"], &v["granted"]));
            refused += 1;
        }
    }
    assert!(fits > 5 && refused > 5, "{fits} fitted, {refused} refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn preview_refuses_what_create_refuses_with_the_same_code() {
    let (s, p) = platform_at_t0(4).await;
    let cases: Vec<(&str, Value)> = vec![
        (
            "unknown grantee",
            grant_body_for(&p, "nobody", 1, T0, T0 + HOUR, &key()),
        ),
        (
            "start long past",
            grant_body(&p, 1, T0 - HOUR, T0 + HOUR, &key()),
        ),
        (
            "end before start",
            grant_body(&p, 1, T0 + HOUR, T0 + HOUR, &key()),
        ),
        (
            "unknown account",
            GrantBody::on(&p, 1)
                .term(T0, T0 + HOUR)
                .key(&key())
                .account(&no_such("pacct"))
                .json(),
        ),
        (
            "unknown reservation",
            GrantBody::on(&p, 1)
                .term(T0, T0 + HOUR)
                .key(&key())
                .reservation("gce:us-central1-a:nope")
                .json(),
        ),
        ("zero slots", grant_body(&p, 0, T0, T0 + HOUR, &key())),
    ];
    for (what, body) in &cases {
        let c = create_grant(&s, body.clone()).await;
        let v = preview(&s, body).await;
        assert_ne!(c.status, 200, "{what}");
        assert_eq!(
            (v.status, v.code()),
            (c.status, c.code()),
            "{what}: {:?}",
            v.body
        );
        assert_eq!(
            v.body["error"]["details"], c.body["error"]["details"],
            "{what}"
        );
    }
    // Unbound: INVALID_STATE for both.
    unbind(&s, &p.account, &p.reservation).await.ok();
    let body = grant_body(&p, 1, T0, T0 + HOUR, &key());
    preview(&s, &body).await.err(409, "INVALID_STATE");
    create_grant(&s, body).await.err(409, "INVALID_STATE");
    // A preview takes create's input without the key: a key is unknown.
    let keyed = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key(&key())
        .acting("root")
        .json();
    s.call(ROOT_TOKEN, "reservationGrants/preview", keyed)
        .await
        .err(400, "INVALID_INPUT");
}

#[tokio::test(flavor = "multi_thread")]
async fn preview_is_root_only() {
    let (s, p) = platform_at_t0(4).await;
    let mut body = preview_of(&grant_body(&p, 1, T0, T0 + HOUR, "x"));
    for tenant in ["acme", "root"] {
        body["tenantId"] = json!(tenant);
        s.call(&p.tenant_token, "reservationGrants/preview", body.clone())
            .await
            .err(403, "ACCESS_DENIED");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_odd_term_previews_the_slot_hours_the_meter_writes() {
    let (s, p) = platform_at_t0(8).await;
    // 3 slots from 00:17:23.250 to 05:05:07.5.
    let starts = T0 + 17 * MIN + 23 * SEC + 250;
    let ends = T0 + 5 * HOUR + 5 * MIN + 7 * SEC + 500;
    let body = grant_body(&p, 3, starts, ends, &key());
    let v = preview(&s, &body).await.ok()["preview"].clone();
    let expected = round_micros(3 * i128::from(ends - starts));
    assert_eq!(
        micros(v["slotHours"].as_str().expect("slotHours")),
        expected,
        "{v}"
    );
    assert_eq!(v["slotHours"], "14.386875");
    assert_eq!(
        (&v["firstPeriodStart"], &v["lastPeriodEnd"]),
        (&json!(T0), &json!(T0 + 6 * HOUR))
    );
    assert_eq!(
        v["takeIn"],
        json!([]),
        "a future start takes nothing in now"
    );

    let g = grant_id(&create_grant(&s, body).await.ok()["grant"]);
    s.set_clock(ends + HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    let records: Vec<Value> = usage(&s, &p.tenant_token, &p.tenant, "vm.grant.slot.hours")
        .await
        .into_iter()
        .filter(|r| r["grantId"] == g.as_str())
        .collect();
    assert_eq!(total(&records), expected);
    assert_eq!(
        records.first().map(|r| r["periodStart"].clone()),
        Some(json!(T0))
    );
    assert_eq!(
        records.last().map(|r| r["periodEnd"].clone()),
        Some(json!(T0 + 6 * HOUR))
    );
}

/// Instances of `p`'s tenant running on ordinary slots.
async fn ordinary_instances(s: &Server, p: &Platform, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(id(&InstanceBuilder::new(p).create(s).await));
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_preview_names_the_instances_a_create_takes_in_and_writes_nothing() {
    let (s, p) = platform_at_t0(6).await;
    let running = ordinary_instances(&s, &p, 3).await;
    s.set_clock(T0 + 10 * MIN).await;

    let body = grant_body(&p, 2, T0 + 10 * MIN, T0 + 3 * HOUR, &key());
    let before = contents(&s).await;
    let v = preview(&s, &body).await.ok()["preview"].clone();
    // A refused preview, and one of another tenant's grant, write nothing either.
    preview(&s, &grant_body(&p, 5, T0 + 10 * MIN, T0 + HOUR, &key()))
        .await
        .ok();
    preview(
        &s,
        &grant_body_for(&p, "nobody", 1, T0 + HOUR, T0 + 2 * HOUR, &key()),
    )
    .await
    .err(404, "NOT_FOUND");
    assert_eq!(
        contents(&s).await,
        before,
        "a preview wrote to the database"
    );

    let take_in: Vec<String> = serde_json::from_value(v["takeIn"].clone()).expect("takeIn");
    assert_eq!(take_in.len(), 2, "{v}");
    assert!(take_in.iter().all(|i| running.contains(i)), "{v}");
    // The create takes in exactly those.
    let g = grant_id(&create_grant(&s, body).await.ok()["grant"]);
    let mut held = Vec::new();
    for i in &running {
        if grant_of(&get_instance(&s, &p.tenant_token, &p.tenant, i).await).as_deref()
            == Some(g.as_str())
        {
            held.push(i.clone());
        }
    }
    held.sort();
    let mut expected = take_in;
    expected.sort();
    assert_eq!(held, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_that_does_not_fit_previews_no_take_in() {
    let (s, p) = platform_at_t0(2).await;
    ordinary_instances(&s, &p, 1).await;
    let v = preview(&s, &grant_body(&p, 3, T0, T0 + HOUR, &key()))
        .await
        .ok()["preview"]
        .clone();
    assert_eq!(
        (&v["fits"], &v["available"], &v["takeIn"]),
        (&json!(false), &json!(2), &json!([]))
    );
    let v = preview(&s, &grant_body(&p, 1, T0, T0 + HOUR, &key()))
        .await
        .ok()["preview"]
        .clone();
    assert_eq!(v["takeIn"].as_array().map(Vec::len), Some(1), "{v}");
}
