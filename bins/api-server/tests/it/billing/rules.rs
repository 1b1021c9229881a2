//! Every billing sentence of the source document (seed-reservation-grants.md,
//! "Billing") and contract 3.8 / 5.2, each as its own test, against the real
//! api-server and the real `reconciler-worker --once` on a manual clock.

use serde_json::{Value, json};

use crate::support::bodies::InstanceBody;
use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    end_grant, get_grant, id, instance_op_ok, platform_at_t0, set_quota,
};
use crate::support::gce::FLAVOR;
use crate::support::meter::{
    at, fmt_micros, of_meter, q, round_micros, total, usage, usage_all, usage_everyone,
    usage_of_instance, usage_page,
};
use crate::support::server::{ROOT, ROOT_TOKEN};
use crate::support::worker;

/// Records of `meter` among `records` that carry `grantId`.
fn of_grant(records: &[Value], meter: &str, grant_id: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["meter"] == meter && r["grantId"] == grant_id)
        .cloned()
        .collect()
}

fn meters(records: &[Value]) -> Vec<String> {
    let mut m: Vec<String> = records
        .iter()
        .map(|r| r["meter"].as_str().expect("meter").to_owned())
        .collect();
    m.sort();
    m.dedup();
    m
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_slots_bill_every_hour_of_the_term_used_or_not() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let used = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    let idle = GrantBuilder::new(&p)
        .term(T0 + 30 * MIN, T0 + 3 * HOUR + 30 * MIN)
        .create(&s)
        .await;
    let a = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(a["placement"]["grantId"], used.as_str());
    let a = a["instanceId"].as_str().expect("id").to_owned();
    // The instance uses one of `used`'s two slots for the first hour only.
    s.set_clock(T0 + HOUR).await;
    instance_op_ok(&s, &t, "acme", "stop", &a).await;
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[]).await;

    let slots = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        q(&of_grant(&slots, "vm.grant.slot.hours", &used)),
        at(&[(0, "2.000000"), (1, "2.000000"), (2, "2.000000")])
    );
    assert_eq!(
        q(&of_grant(&slots, "vm.grant.slot.hours", &idle)),
        at(&[
            (0, "0.500000"),
            (1, "1.000000"),
            (2, "1.000000"),
            (3, "0.500000")
        ])
    );
    for r in &slots {
        assert_eq!(r["tenantId"], "acme");
        assert_eq!(r["unit"], "slot-hours");
        assert_eq!(r["tags"]["region"], "us-central1");
        assert_eq!(r["tags"]["poolId"], p.pool.as_str());
        assert_eq!(r["tags"]["provider"], "gce");
        assert_eq!(r["tags"]["reservationId"], p.reservation.as_str());
        assert!(r["tags"].get("flavor").is_none(), "{r}");
    }
    assert_eq!(get_grant(&s, &used).await["meteredThrough"], T0 + 3 * HOUR);
    assert_eq!(
        get_grant(&s, &idle).await["meteredThrough"],
        T0 + 3 * HOUR + 30 * MIN
    );
    assert_eq!(
        q(&usage_of_instance(&s, &t, "acme", &a).await),
        at(&[(0, "1.000000")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_inside_their_grant_record_only_grant_usage() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 10 * MIN).await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    let b = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;
    for id in [&a, &b] {
        let recs = usage_of_instance(&s, &t, "acme", id).await;
        assert_eq!(meters(&recs), ["vm.grant.usage.hours"], "{recs:?}");
        assert_eq!(
            q(&recs),
            at(&[(0, "0.833333"), (1, "1.000000"), (2, "1.000000")])
        );
        for r in &recs {
            assert_eq!(r["grantId"], g.as_str());
            assert_eq!(r["tags"]["grantId"], g.as_str());
            assert_eq!(r["tags"]["reservationId"], p.reservation.as_str());
            assert_eq!(r["unit"], "instance-hours");
        }
        let i = instance_op_ok(&s, &t, "acme", "get", id).await;
        assert_eq!(i["placement"]["kind"], "grant");
    }
    assert!(usage(&s, &t, "acme", "vm.reserved.hours").await.is_empty());
    assert!(usage(&s, &t, "acme", "vm.ondemand.hours").await.is_empty());
    // The grantee pays the committed slots instead.
    assert_eq!(
        q(&usage(&s, &t, "acme", "vm.grant.slot.hours").await),
        at(&[(0, "2.000000"), (1, "2.000000"), (2, "2.000000")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_beyond_its_grant_bills_at_the_reserved_rate() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 15 * MIN).await;
    let b = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(b["placement"]["kind"], "reservation");
    assert_eq!(b["placement"]["reservationId"], p.reservation.as_str());
    let b = b["instanceId"].as_str().expect("id").to_owned();
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[]).await;

    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(meters(&ra), ["vm.grant.usage.hours"]);
    assert_eq!(q(&ra), at(&[(0, "1.000000"), (1, "1.000000")]));
    assert!(ra.iter().all(|r| r["grantId"] == g.as_str()));
    let rb = usage_of_instance(&s, &t, "acme", &b).await;
    assert_eq!(meters(&rb), ["vm.reserved.hours"]);
    assert_eq!(q(&rb), at(&[(0, "0.750000"), (1, "1.000000")]));
    for r in &rb {
        assert!(r.get("grantId").is_none(), "{r}");
        assert_eq!(r["tags"]["reservationId"], p.reservation.as_str());
        assert_eq!(r["tags"]["flavor"], FLAVOR);
    }
    assert!(usage(&s, &t, "acme", "vm.ondemand.hours").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn when_a_grant_ends_its_running_instances_bill_at_the_reserved_rate() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 90 * MIN)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    let c = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 30 * MIN).await;
    // A stopped instance keeps its grant slot, and loses it at the end.
    let stopped = instance_op_ok(&s, &t, "acme", "stop", &c).await;
    assert_eq!(stopped["placement"]["kind"], "grant");
    // Nobody settles at 01:30; the worker runs at 03:00.
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;

    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(
        q(&of_grant(&ra, "vm.grant.usage.hours", &g)),
        at(&[(0, "1.000000"), (1, "0.500000")])
    );
    assert_eq!(
        q(&of_meter(&ra, "vm.reserved.hours")),
        at(&[(1, "0.500000"), (2, "1.000000")])
    );
    assert_eq!(ra.len(), 4, "{ra:?}");
    let rc = usage_of_instance(&s, &t, "acme", &c).await;
    assert_eq!(q(&rc), at(&[(0, "0.500000")]));
    assert_eq!(meters(&rc), ["vm.grant.usage.hours"]);
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "get", &a).await["placement"]["kind"],
        "reservation"
    );
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "get", &c).await["placement"]["kind"],
        "none"
    );
    let gv = get_grant(&s, &g).await;
    assert_eq!(gv["state"], "ended");
    assert_eq!(gv["reason"], "term-over");
    assert_eq!(gv["meteredThrough"], T0 + 90 * MIN);
    // Its billing stops at endsAt.
    assert_eq!(
        q(&usage_all(
            &s,
            &t,
            "acme",
            json!({ "grantId": g, "meter": "vm.grant.slot.hours" })
        )
        .await),
        at(&[(0, "2.000000"), (1, "1.000000")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_takes_the_running_instances_of_an_ending_grant_up_to_its_free_slots() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let old = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 90 * MIN)
        .create(&s)
        .await;
    let renewal = GrantBuilder::new(&p)
        .term(T0 + HOUR, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + MIN).await;
    let b = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(b["placement"]["grantId"], old.as_str());
    let b = b["instanceId"].as_str().expect("id").to_owned();
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;

    // The oldest goes into the renewal's one free slot from 01:30.
    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(
        q(&of_grant(&ra, "vm.grant.usage.hours", &old)),
        at(&[(0, "1.000000"), (1, "0.500000")])
    );
    let in_renewal = of_grant(&ra, "vm.grant.usage.hours", &renewal);
    assert_eq!(q(&in_renewal), at(&[(1, "0.500000"), (2, "1.000000")]));
    assert!(
        in_renewal
            .iter()
            .all(|r| r["tags"]["grantId"] == renewal.as_str())
    );
    assert!(of_meter(&ra, "vm.reserved.hours").is_empty(), "{ra:?}");
    assert_eq!(ra.len(), 4);
    let ia = instance_op_ok(&s, &t, "acme", "get", &a).await;
    assert_eq!(ia["placement"]["grantId"], renewal.as_str());
    // The other one, with no free slot left, goes to the reservation rate.
    let rb = usage_of_instance(&s, &t, "acme", &b).await;
    assert_eq!(
        q(&of_grant(&rb, "vm.grant.usage.hours", &old)),
        at(&[(0, "0.983333"), (1, "0.500000")])
    );
    assert_eq!(
        q(&of_meter(&rb, "vm.reserved.hours")),
        at(&[(1, "0.500000"), (2, "1.000000")])
    );
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "get", &b).await["placement"]["kind"],
        "reservation"
    );
    // Each grant bills its own term.
    let slots = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        q(&of_grant(&slots, "vm.grant.slot.hours", &renewal)),
        at(&[(1, "1.000000"), (2, "1.000000")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_takes_in_running_instances_from_its_start_even_when_the_worker_runs_hours_later() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let a = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(a["placement"]["kind"], "reservation");
    let a = a["instanceId"].as_str().expect("id").to_owned();
    s.set_clock(T0 + 5 * MIN).await;
    let b = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 10 * MIN).await;
    let g = GrantBuilder::new(&p)
        .term(T0 + 40 * MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // Nothing settles until the usage pass runs at 05:00; it settles itself.
    s.set_clock(T0 + 5 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;

    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(
        q(&of_meter(&ra, "vm.reserved.hours")),
        at(&[(0, "0.666667")])
    );
    assert_eq!(
        q(&of_grant(&ra, "vm.grant.usage.hours", &g)),
        at(&[
            (0, "0.333333"),
            (1, "1.000000"),
            (2, "1.000000"),
            (3, "1.000000"),
            (4, "1.000000")
        ])
    );
    assert_eq!(ra.len(), 6, "{ra:?}");
    // The younger one stays on its ordinary slot: the grant has one slot.
    let rb = usage_of_instance(&s, &t, "acme", &b).await;
    assert_eq!(meters(&rb), ["vm.reserved.hours"]);
    assert_eq!(
        q(&rb),
        at(&[
            (0, "0.916667"),
            (1, "1.000000"),
            (2, "1.000000"),
            (3, "1.000000"),
            (4, "1.000000")
        ])
    );
    worker::once(&s, &["vps.grants"]).await;
    assert_eq!(
        q(&usage(&s, &t, "acme", "vm.grant.slot.hours").await),
        at(&[
            (0, "0.333333"),
            (1, "1.000000"),
            (2, "1.000000"),
            (3, "1.000000"),
            (4, "1.000000")
        ])
    );
    let active = s.events_of(&t, "acme", "reservation-grant.active").await;
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["occurredAt"], T0 + 40 * MIN);
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "get", &a).await["placement"]["grantId"],
        g.as_str()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn billing_none_instances_write_nothing_and_are_never_taken_in() {
    let (s, p) = platform_at_t0(4).await;
    set_quota(&s, ROOT, &p.pool, "memoryGib", 1000).await;
    let none = s
        .root(
            "instances/create",
            InstanceBody::new(&p.pool, "n").billing("none").json(),
        )
        .await
        .ok();
    assert_eq!(none["instance"]["placement"]["kind"], "reservation");
    let none = none["instance"]["instanceId"]
        .as_str()
        .expect("id")
        .to_owned();
    s.set_clock(T0 + MIN).await;
    let std = id(&InstanceBuilder::new(&p)
        .by(ROOT, ROOT_TOKEN)
        .create(&s)
        .await);
    let g = GrantBuilder::new(&p)
        .grantee("root")
        .term(T0 + 30 * MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;

    // The older billing-none instance is passed over; the standard one is taken in.
    assert!(
        usage_of_instance(&s, ROOT_TOKEN, "root", &none)
            .await
            .is_empty()
    );
    assert_eq!(
        instance_op_ok(&s, ROOT_TOKEN, "root", "get", &none).await["placement"]["kind"],
        "reservation"
    );
    let rs = usage_of_instance(&s, ROOT_TOKEN, "root", &std).await;
    assert_eq!(
        q(&of_meter(&rs, "vm.reserved.hours")),
        at(&[(0, "0.483333")])
    );
    assert_eq!(
        q(&of_grant(&rs, "vm.grant.usage.hours", &g)),
        at(&[(0, "0.500000"), (1, "1.000000"), (2, "1.000000")])
    );
    assert_eq!(rs.len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn stopped_instances_write_nothing() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await); // in the grant
    let b = id(&InstanceBuilder::new(&p).create(&s).await); // ordinary slot
    s.set_clock(T0 + 20 * MIN).await;
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "stop", &a).await["placement"]["kind"],
        "grant"
    );
    s.set_clock(T0 + 30 * MIN).await;
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "stop", &b).await["placement"]["kind"],
        "none"
    );
    s.set_clock(T0 + HOUR + 40 * MIN).await;
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "start", &b).await["placement"]["kind"],
        "reservation"
    );
    s.set_clock(T0 + 2 * HOUR + 20 * MIN).await;
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "start", &a).await["placement"]["grantId"],
        g.as_str()
    );
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[]).await;

    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(meters(&ra), ["vm.grant.usage.hours"]);
    assert_eq!(
        q(&ra),
        at(&[(0, "0.333333"), (2, "0.666667"), (3, "1.000000")])
    );
    let rb = usage_of_instance(&s, &t, "acme", &b).await;
    assert_eq!(meters(&rb), ["vm.reserved.hours"]);
    assert_eq!(
        q(&rb),
        at(&[
            (0, "0.500000"),
            (1, "0.333333"),
            (2, "1.000000"),
            (3, "1.000000")
        ])
    );
    // The idle committed slot is billed all the same.
    assert_eq!(
        q(&usage(&s, &t, "acme", "vm.grant.slot.hours").await),
        at(&[
            (0, "1.000000"),
            (1, "1.000000"),
            (2, "1.000000"),
            (3, "1.000000")
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_moving_between_two_grants_inside_one_hour_gets_one_record_per_grant() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let x = GrantBuilder::new(&p)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let y = GrantBuilder::new(&p)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let a = InstanceBuilder::new(&p).create(&s).await;
    let first = a["placement"]["grantId"]
        .as_str()
        .expect("grant")
        .to_owned();
    let second = if first == x { y.clone() } else { x.clone() };
    let a = a["instanceId"].as_str().expect("id").to_owned();
    s.set_clock(T0 + 20 * MIN).await;
    let ended = end_grant(&s, &p.account, &first).await.ok()["grant"].clone();
    assert_eq!(ended["endsAt"], T0 + 20 * MIN);
    assert_eq!(
        instance_op_ok(&s, &t, "acme", "get", &a).await["placement"]["grantId"],
        second.as_str()
    );
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[]).await;

    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(meters(&ra), ["vm.grant.usage.hours"]);
    assert_eq!(
        q(&of_grant(&ra, "vm.grant.usage.hours", &first)),
        at(&[(0, "0.333333")])
    );
    assert_eq!(
        q(&of_grant(&ra, "vm.grant.usage.hours", &second)),
        at(&[(0, "0.666667"), (1, "1.000000")])
    );
    assert_eq!(ra.len(), 3);
    let slots = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        q(&of_grant(&slots, "vm.grant.slot.hours", &first)),
        at(&[(0, "0.333333")])
    );
    let ev = s.events_of(&t, "acme", "reservation-grant.ended").await;
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["data"]["reason"], "ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn quantities_are_exact_and_rounded_cumulatively() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    set_quota(&s, ROOT, &p.pool, "memoryGib", 1000).await;
    // Root's grant: 2 h 20 min of one slot from 00:20 to 02:40.
    let g = GrantBuilder::new(&p)
        .grantee("root")
        .term(T0 + 20 * MIN, T0 + 2 * HOUR + 40 * MIN)
        .create(&s)
        .await;
    // Acme's instance runs 20 minutes in each of three hours.
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    for h in 0..3 {
        if h > 0 {
            s.set_clock(T0 + h * HOUR).await;
            instance_op_ok(&s, &t, "acme", "start", &a).await;
        }
        s.set_clock(T0 + h * HOUR + 20 * MIN).await;
        instance_op_ok(&s, &t, "acme", "stop", &a).await;
        // The worker runs at every hour: the result is the same as one run.
        s.set_clock(T0 + (h + 1) * HOUR).await;
        worker::once(&s, &[]).await;
    }
    let ra = usage_of_instance(&s, &t, "acme", &a).await;
    assert_eq!(
        q(&ra),
        at(&[(0, "0.333333"), (1, "0.333334"), (2, "0.333333")])
    );
    assert_eq!(total(&ra), 1_000_000);
    let rg = usage_all(&s, ROOT_TOKEN, "root", json!({ "grantId": g })).await;
    assert_eq!(
        q(&rg),
        at(&[(0, "0.666667"), (1, "1.000000"), (2, "0.666666")])
    );
    assert_eq!(total(&rg), round_micros(i128::from(2 * HOUR + 20 * MIN)));
    assert_eq!(fmt_micros(total(&rg)), "2.333333");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_record_is_written_before_its_hour_ends() {
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    id(&InstanceBuilder::new(&p).create(&s).await);
    id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + HOUR - 1).await;
    worker::once(&s, &[]).await;
    assert!(usage_everyone(&s).await.is_empty());
    assert_eq!(get_grant(&s, &g).await["meteredThrough"], T0);

    s.set_clock(T0 + HOUR).await;
    worker::once(&s, &[]).await;
    let recs = usage_everyone(&s).await;
    let mut got: Vec<(String, i64, String)> = recs
        .iter()
        .map(|r| {
            (
                r["meter"].as_str().expect("meter").to_owned(),
                r["periodStart"].as_i64().expect("ps"),
                r["quantity"].as_str().expect("q").to_owned(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("vm.grant.slot.hours".to_owned(), T0, "1.000000".to_owned()),
            ("vm.grant.usage.hours".to_owned(), T0, "1.000000".to_owned()),
            ("vm.reserved.hours".to_owned(), T0, "1.000000".to_owned()),
        ]
    );
    for r in &recs {
        assert_eq!(r["periodEnd"], T0 + HOUR);
        assert_eq!(r["recordedAt"], T0 + HOUR);
    }
    assert_eq!(get_grant(&s, &g).await["meteredThrough"], T0 + HOUR);
    s.set_clock(T0 + 2 * HOUR - 1).await;
    worker::once(&s, &[]).await;
    assert_eq!(usage_everyone(&s).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_list_filters_pages_and_all_is_root_only() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let beta = s.tenant("beta").await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    let b = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;

    let all = usage_all(&s, &t, "acme", json!({})).await;
    assert_eq!(all.len(), 9, "{all:?}");
    assert!(all.iter().all(|r| r["tenantId"] == "acme"));
    let ids = |rs: &[Value]| -> Vec<String> {
        rs.iter()
            .map(|r| r["usageId"].as_str().expect("usageId").to_owned())
            .collect()
    };
    let subset = |f: &dyn Fn(&Value) -> bool| -> Vec<String> {
        ids(&all.iter().filter(|r| f(r)).cloned().collect::<Vec<_>>())
    };
    for w in all.windows(2) {
        assert!(w[0]["recordedAt"].as_i64() <= w[1]["recordedAt"].as_i64());
    }
    // Filters, each keeping the log order.
    for meter in [
        "vm.grant.slot.hours",
        "vm.grant.usage.hours",
        "vm.reserved.hours",
    ] {
        let got = usage_all(&s, &t, "acme", json!({ "meter": meter })).await;
        assert_eq!(ids(&got), subset(&|r| r["meter"] == meter));
        assert_eq!(got.len(), 3);
    }
    assert!(usage(&s, &t, "acme", "vm.ondemand.hours").await.is_empty());
    let by_grant = usage_all(&s, &t, "acme", json!({ "grantId": g })).await;
    assert_eq!(by_grant.len(), 6);
    assert_eq!(ids(&by_grant), subset(&|r| r["grantId"] == g.as_str()));
    let by_b = usage_all(&s, &t, "acme", json!({ "instanceId": b })).await;
    assert_eq!(ids(&by_b), subset(&|r| r["instanceId"] == b.as_str()));
    assert_eq!(
        q(&by_b),
        at(&[(0, "1.000000"), (1, "1.000000"), (2, "1.000000")])
    );
    let from = usage_all(&s, &t, "acme", json!({ "from": T0 + HOUR })).await;
    assert_eq!(
        ids(&from),
        subset(&|r| r["periodStart"].as_i64() >= Some(T0 + HOUR))
    );
    assert_eq!(from.len(), 6);
    let to = usage_all(&s, &t, "acme", json!({ "to": T0 + 2 * HOUR })).await;
    assert_eq!(
        ids(&to),
        subset(&|r| r["periodEnd"].as_i64() <= Some(T0 + 2 * HOUR))
    );
    assert_eq!(to.len(), 6);
    let window = usage_all(
        &s,
        &t,
        "acme",
        json!({ "from": T0 + HOUR, "to": T0 + 2 * HOUR, "instanceId": a }),
    )
    .await;
    assert_eq!(q(&window), at(&[(1, "1.000000")]));

    // Paging with a cursor: pages of 2, then polling from the end.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut body = json!({ "tenantId": "acme", "limit": 2 });
        if let Some(c) = &after {
            body["after"] = json!(c);
        }
        let page = usage_page(&s, &t, body).await;
        let items = page["items"].as_array().expect("items").clone();
        pages += 1;
        let more = page["hasMore"].as_bool().expect("hasMore");
        assert_eq!(items.len(), if more { 2 } else { 1 });
        paged.extend(items);
        after = Some(page["nextCursor"].as_str().expect("cursor").to_owned());
        if !more {
            break;
        }
    }
    assert_eq!(pages, 5);
    assert_eq!(ids(&paged), ids(&all));
    let end = after.expect("cursor");
    let poll = usage_page(&s, &t, json!({ "tenantId": "acme", "after": end })).await;
    assert_eq!(poll["items"], json!([]));
    assert_eq!(poll["nextCursor"], end.as_str());
    assert_eq!(poll["hasMore"], false);
    // Paging with a filter.
    let first = usage_page(
        &s,
        &t,
        json!({ "tenantId": "acme", "limit": 1, "meter": "vm.reserved.hours" }),
    )
    .await;
    assert_eq!(first["hasMore"], true);
    let rest = usage_page(
        &s,
        &t,
        json!({
            "tenantId": "acme",
            "limit": 1000,
            "meter": "vm.reserved.hours",
            "after": first["nextCursor"],
        }),
    )
    .await;
    assert_eq!(rest["items"].as_array().expect("items").len(), 2);
    assert_eq!(rest["hasMore"], false);
    // New records show up after the cursor a consumer kept.
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[]).await;
    let poll = usage_page(&s, &t, json!({ "tenantId": "acme", "after": end })).await;
    let new = poll["items"].as_array().expect("items").clone();
    assert_eq!(new.len(), 2, "{new:?}");
    assert!(new.iter().all(|r| r["meter"] == "vm.reserved.hours"));
    assert_eq!(poll["hasMore"], false);
    assert_ne!(poll["nextCursor"], end.as_str());

    // `all` is root only.
    let denied = s
        .call(&t, "usage/list", json!({ "tenantId": "acme", "all": true }))
        .await;
    denied.err(403, "ACCESS_DENIED");
    let root_all = usage_all(&s, ROOT_TOKEN, "root", json!({ "all": true })).await;
    assert_eq!(root_all.len(), 11);
    assert!(root_all.iter().all(|r| r["tenantId"] == "acme"));
    assert!(
        usage_all(&s, ROOT_TOKEN, "root", json!({}))
            .await
            .is_empty()
    );
    assert!(usage_all(&s, &beta, "beta", json!({})).await.is_empty());
    let bad = s
        .call(
            &t,
            "usage/list",
            json!({ "tenantId": "acme", "after": "nonsense" }),
        )
        .await;
    bad.err(400, "INVALID_INPUT");
}
