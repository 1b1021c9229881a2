//! The grant timeline over HTTP (seed-reservation-grants.md paragraphs 3-4,
//! contract 3.6, 5.1, 5.3): take-in at `startsAt`, hand-over to a renewal at
//! `endsAt`, root `end`, and the loss of the reservation, each at its exact
//! instant however late it is settled (checked on the placement segments).

use serde_json::Value;

use crate::support::bodies::GrantBody;
use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::{seg_grant, seg_off, seg_res, segments};
use crate::support::fixtures::{
    Platform, create_grant_ok, end_grant, get_grant, get_instance, grant_body, grant_id, id,
    in_grant, instance_op_ok, list_instances, placement, placement_of, plain, platform_at_t0, poke,
    project, root_can_use, scan, tenant_with_pool,
};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};

/// The events of `tenant` of the `reservation-grant.*` family for `grant`,
/// as `(type, reason, occurredAt)`, via `events.list`.
async fn grant_events(
    s: &Server,
    token: &str,
    tenant: &str,
    grant: &str,
) -> Vec<(String, Option<String>, i64)> {
    s.events(token, tenant)
        .await
        .iter()
        .filter(|e| e["data"]["grantId"] == grant)
        .map(|e| {
            (
                e["type"].as_str().expect("type").to_owned(),
                e["data"]["reason"].as_str().map(str::to_owned),
                e["occurredAt"].as_i64().expect("occurredAt"),
            )
        })
        .collect()
}

fn ids_sorted(instances: &[&Value]) -> Vec<String> {
    let mut v: Vec<String> = instances.iter().map(|i| id(i)).collect();
    v.sort();
    v
}

// ---------------------------------------------------------------- take-in

#[tokio::test(flavor = "multi_thread")]
async fn starting_grant_takes_in_running_ordinary_instances_oldest_first_up_to_its_slots_at_start()
{
    let (s, p) = platform_at_t0(8).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    // acme runs four instances on ordinary slots: a, b, then x and y created
    // at the same instant (ordered by instance id); globex runs one.
    s.set_clock(T0 + MIN).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    s.set_clock(T0 + 2 * MIN).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    s.set_clock(T0 + 3 * MIN).await;
    let x = InstanceBuilder::new(&p).key("x").create(&s).await;
    let y = InstanceBuilder::new(&p).key("y").create(&s).await;
    let o = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("o")
        .create(&s)
        .await;
    for i in [&a, &b, &x, &y, &o] {
        assert_eq!(placement(i), plain("reservation"));
    }
    let (first_tie, second_tie) = {
        let v = ids_sorted(&[&x, &y]);
        (v[0].clone(), v[1].clone())
    };
    let start = T0 + HOUR;
    let g = GrantBuilder::new(&p)
        .slots(3)
        .term(start, T0 + 5 * HOUR)
        .create(&s)
        .await;

    // An hour after the start, nothing has settled it yet: `get` reports the
    // stored placement.
    s.set_clock(start + HOUR).await;
    assert_eq!(
        placement_of(&s, t, "acme", &id(&a)).await,
        plain("reservation")
    );
    // Any decision on the reservation settles it, as of startsAt.
    poke(&s, &p).await;
    assert_eq!(placement_of(&s, t, "acme", &id(&a)).await, in_grant(&g));
    assert_eq!(placement_of(&s, t, "acme", &id(&b)).await, in_grant(&g));
    assert_eq!(placement_of(&s, t, "acme", &first_tie).await, in_grant(&g));
    assert_eq!(
        placement_of(&s, t, "acme", &second_tie).await,
        plain("reservation")
    );
    assert_eq!(
        placement_of(&s, &globex, "globex", &id(&o)).await,
        plain("reservation")
    );

    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_res(T0 + MIN, Some(start), true, &p.reservation),
            seg_grant(start, None, true, &g, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &first_tie).await,
        vec![
            seg_res(T0 + 3 * MIN, Some(start), true, &p.reservation),
            seg_grant(start, None, true, &g, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &second_tie).await,
        vec![seg_res(T0 + 3 * MIN, None, true, &p.reservation)]
    );
    assert_eq!(
        grant_events(&s, t, "acme", &g).await,
        vec![
            ("reservation-grant.created".into(), None, T0 + 3 * MIN),
            ("reservation-grant.active".into(), None, start),
        ]
    );
    // The grant is full: the next instance takes an ordinary slot.
    let n = InstanceBuilder::new(&p).key("n").create(&s).await;
    assert_eq!(placement(&n), plain("reservation"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_grant_takes_in_only_its_projects_instances() {
    let (s, p) = platform_at_t0(6).await;
    let t = &p.tenant_token;
    let web = project(&s, t, "acme", "web").await;
    let batch = project(&s, t, "acme", "batch").await;
    // Older instances of other projects (and of none) come first in age.
    let b = InstanceBuilder::new(&p)
        .key("b")
        .project(&batch)
        .create(&s)
        .await;
    s.set_clock(T0 + MIN).await;
    let n = InstanceBuilder::new(&p).key("n").create(&s).await;
    s.set_clock(T0 + 2 * MIN).await;
    let w = InstanceBuilder::new(&p)
        .key("w")
        .project(&web)
        .create(&s)
        .await;
    let body = GrantBody::on(&p, 2)
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .key("g")
        .project(&web)
        .json();
    let g = grant_id(&create_grant_ok(&s, body).await);

    s.set_clock(T0 + HOUR + 30 * MIN).await;
    poke(&s, &p).await;
    assert_eq!(placement_of(&s, t, "acme", &id(&w)).await, in_grant(&g));
    assert_eq!(
        placement_of(&s, t, "acme", &id(&b)).await,
        plain("reservation")
    );
    assert_eq!(
        placement_of(&s, t, "acme", &id(&n)).await,
        plain("reservation")
    );
    assert_eq!(
        segments(&s, &id(&w)).await,
        vec![
            seg_res(T0 + 2 * MIN, Some(T0 + HOUR), true, &p.reservation),
            seg_grant(T0 + HOUR, None, true, &g, &p.reservation),
        ]
    );
    // Its second slot is still free for the project.
    let w2 = InstanceBuilder::new(&p)
        .key("w2")
        .project(&web)
        .create(&s)
        .await;
    assert_eq!(placement(&w2), in_grant(&g));
}

#[tokio::test(flavor = "multi_thread")]
async fn unbilled_instances_are_never_taken_in() {
    let (s, p) = platform_at_t0(4).await;
    root_can_use(&s, &p.pool).await;
    let none = InstanceBuilder::new(&p)
        .by(ROOT, ROOT_TOKEN)
        .key("n")
        .billing("none")
        .create(&s)
        .await;
    s.set_clock(T0 + MIN).await;
    let std = InstanceBuilder::new(&p)
        .by(ROOT, ROOT_TOKEN)
        .key("s")
        .create(&s)
        .await;
    let g = GrantBuilder::new(&p)
        .grantee("root")
        .slots(2)
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + HOUR + MIN).await;
    poke(&s, &p).await;
    let get_root = async |i: &Value| get_instance(&s, ROOT_TOKEN, ROOT, &id(i)).await;
    // The older unbilled instance stays on its ordinary slot although the
    // grant has room; the billed one is taken in.
    assert_eq!(placement(&get_root(&none).await), plain("reservation"));
    assert_eq!(placement(&get_root(&std).await), in_grant(&g));
    assert_eq!(segments(&s, &id(&none)).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stopped_instances_are_not_taken_in() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    s.set_clock(T0 + MIN).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    s.set_clock(T0 + 2 * MIN).await;
    let stopped = instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    assert_eq!(placement(&stopped), plain("none"));
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .create(&s)
        .await;

    s.set_clock(T0 + HOUR + MIN).await;
    poke(&s, &p).await;
    let a_now = get_instance(&s, t, "acme", &id(&a)).await;
    assert_eq!(
        (a_now["state"].as_str(), placement(&a_now)),
        (Some("stopped"), plain("none"))
    );
    assert_eq!(placement_of(&s, t, "acme", &id(&b)).await, in_grant(&g));
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_res(T0, Some(T0 + 2 * MIN), true, &p.reservation),
            seg_off(T0 + 2 * MIN, None, "none", false),
        ]
    );
    // Started again, it goes into the grant's free slot.
    s.set_clock(T0 + HOUR + 2 * MIN).await;
    let started = instance_op_ok(&s, t, "acme", "start", &id(&a)).await;
    assert_eq!(placement(&started), in_grant(&g));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_created_at_or_after_its_start_takes_in_from_its_creation_instant() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    s.set_clock(T0 + MIN).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;

    // startsAt three minutes in the past: taken in from the creation instant,
    // history is not rewritten.
    let created = T0 + 3 * MIN;
    s.set_clock(created).await;
    let g1 = create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "g1")).await;
    assert_eq!(g1["state"], "active");
    let g1 = grant_id(&g1);
    // It is visible at once, without any other decision.
    assert_eq!(placement_of(&s, t, "acme", &id(&a)).await, in_grant(&g1));
    assert_eq!(
        placement_of(&s, t, "acme", &id(&b)).await,
        plain("reservation")
    );
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_res(T0, Some(created), true, &p.reservation),
            seg_grant(created, None, true, &g1, &p.reservation),
        ]
    );
    assert_eq!(
        grant_events(&s, t, "acme", &g1).await,
        vec![
            ("reservation-grant.created".into(), None, created),
            ("reservation-grant.active".into(), None, created),
        ]
    );

    // startsAt exactly now.
    let now = T0 + 10 * MIN;
    s.set_clock(now).await;
    let g2 = GrantBuilder::new(&p).term(now, T0 + HOUR).create(&s).await;
    assert_eq!(placement_of(&s, t, "acme", &id(&b)).await, in_grant(&g2));
    assert_eq!(
        segments(&s, &id(&b)).await,
        vec![
            seg_res(T0 + MIN, Some(now), true, &p.reservation),
            seg_grant(now, None, true, &g2, &p.reservation),
        ]
    );
}

// ------------------------------------------------------------- hand-over

/// Grant G1 of acme and the instances it holds, oldest first: `s1`
/// (stopped at T0 + 3min), `r1` and `r2` (running).
struct Ending {
    g1: String,
    s1: String,
    r1: String,
    r2: String,
}

/// A platform of `total` slots where acme holds [`Ending`]: G1 of 3 slots
/// over `[T0, T0 + 2h)`.
async fn ending(total: i64) -> (Server, Platform, Ending) {
    let (s, p) = platform_at_t0(total).await;
    let t = p.tenant_token.clone();
    let g1 = GrantBuilder::new(&p)
        .slots(3)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    let s1 = id(&InstanceBuilder::new(&p).key("s1").create(&s).await);
    s.set_clock(T0 + MIN).await;
    let r1 = id(&InstanceBuilder::new(&p).key("r1").create(&s).await);
    s.set_clock(T0 + 2 * MIN).await;
    let r2 = id(&InstanceBuilder::new(&p).key("r2").create(&s).await);
    s.set_clock(T0 + 3 * MIN).await;
    instance_op_ok(&s, &t, "acme", "stop", &s1).await;
    for i in [&s1, &r1, &r2] {
        assert_eq!(placement_of(&s, &t, "acme", i).await, in_grant(&g1));
    }
    (s, p, Ending { g1, s1, r1, r2 })
}

#[tokio::test(flavor = "multi_thread")]
async fn at_ends_at_a_renewal_takes_oldest_running_instance_rest_go_to_reservation_or_lose_slot() {
    let (s, p, Ending { g1, s1, r1, r2 }) = ending(6).await;
    let t = &p.tenant_token;
    let end = T0 + 2 * HOUR;
    // The renewal starts exactly when G1 ends, with one slot.
    let g2 = GrantBuilder::new(&p)
        .term(end, T0 + 4 * HOUR)
        .create(&s)
        .await;

    // Settled an hour after the end.
    s.set_clock(end + HOUR).await;
    poke(&s, &p).await;
    assert_eq!(placement_of(&s, t, "acme", &r1).await, in_grant(&g2));
    assert_eq!(placement_of(&s, t, "acme", &r2).await, plain("reservation"));
    let s1_now = get_instance(&s, t, "acme", &s1).await;
    assert_eq!(
        (s1_now["state"].as_str(), placement(&s1_now)),
        (Some("stopped"), plain("none"))
    );

    assert_eq!(
        segments(&s, &r1).await,
        vec![
            seg_grant(T0 + MIN, Some(end), true, &g1, &p.reservation),
            seg_grant(end, None, true, &g2, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &r2).await,
        vec![
            seg_grant(T0 + 2 * MIN, Some(end), true, &g1, &p.reservation),
            seg_res(end, None, true, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &s1).await,
        vec![
            seg_grant(T0, Some(T0 + 3 * MIN), true, &g1, &p.reservation),
            seg_grant(T0 + 3 * MIN, Some(end), false, &g1, &p.reservation),
            seg_off(end, None, "none", false),
        ]
    );
    let g1v = get_grant(&s, &g1).await;
    assert_eq!(
        (
            g1v["state"].as_str(),
            g1v["reason"].as_str(),
            g1v["endedAt"].as_i64()
        ),
        (Some("ended"), Some("term-over"), Some(end))
    );
    let g2v = get_grant(&s, &g2).await;
    assert_eq!(g2v["state"], "active");
    assert_eq!(
        grant_events(&s, t, "acme", &g1).await,
        vec![
            ("reservation-grant.created".into(), None, T0),
            ("reservation-grant.active".into(), None, T0),
            (
                "reservation-grant.ended".into(),
                Some("term-over".into()),
                end
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_takes_running_instances_before_stopped_ones_up_to_its_free_slots() {
    let (s, p, Ending { g1, s1, r1, r2 }) = ending(7).await;
    let t = &p.tenant_token;
    let end = T0 + 2 * HOUR;
    // The renewal overlaps G1 with three slots; one is taken by a new
    // instance (G1 being full), leaving two for the hand-over.
    let g2 = GrantBuilder::new(&p)
        .slots(3)
        .term(T0 + HOUR, T0 + 4 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + HOUR + MIN).await;
    let r3 = id(&InstanceBuilder::new(&p).key("r3").create(&s).await);
    assert_eq!(placement_of(&s, t, "acme", &r3).await, in_grant(&g2));

    s.set_clock(end + 5 * MIN).await;
    poke(&s, &p).await;
    // s1 is the oldest but stopped: the running ones go first.
    assert_eq!(placement_of(&s, t, "acme", &r1).await, in_grant(&g2));
    assert_eq!(placement_of(&s, t, "acme", &r2).await, in_grant(&g2));
    assert_eq!(placement_of(&s, t, "acme", &s1).await, plain("none"));
    assert_eq!(
        segments(&s, &r2).await,
        vec![
            seg_grant(T0 + 2 * MIN, Some(end), true, &g1, &p.reservation),
            seg_grant(end, None, true, &g2, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &s1).await.last(),
        Some(&seg_off(end, None, "none", false))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_room_for_all_keeps_the_stopped_instance_in_a_granted_slot() {
    let (s, p, Ending { g1, s1, r1, r2 }) = ending(6).await;
    let t = &p.tenant_token;
    let end = T0 + 2 * HOUR;
    let g2 = GrantBuilder::new(&p)
        .slots(3)
        .term(T0 + HOUR, T0 + 4 * HOUR)
        .create(&s)
        .await;
    s.set_clock(end).await;
    poke(&s, &p).await;
    for i in [&r1, &r2] {
        assert_eq!(placement_of(&s, t, "acme", i).await, in_grant(&g2));
    }
    let s1_now = get_instance(&s, t, "acme", &s1).await;
    assert_eq!(
        (s1_now["state"].as_str(), placement(&s1_now)),
        (Some("stopped"), in_grant(&g2))
    );
    assert_eq!(
        segments(&s, &s1).await,
        vec![
            seg_grant(T0, Some(T0 + 3 * MIN), true, &g1, &p.reservation),
            seg_grant(T0 + 3 * MIN, Some(end), false, &g1, &p.reservation),
            seg_grant(end, None, false, &g2, &p.reservation),
        ]
    );
    // Its slot is still held for it: started, it runs in the renewal.
    let started = instance_op_ok(&s, t, "acme", "start", &s1).await;
    assert_eq!(placement(&started), in_grant(&g2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_takes_over_only_the_instances_it_serves() {
    let (s, p) = platform_at_t0(6).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let web = project(&s, t, "acme", "web").await;
    let batch = project(&s, t, "acme", "batch").await;
    let g1 = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + HOUR)
        .create(&s)
        .await;
    let b = id(&InstanceBuilder::new(&p)
        .key("b")
        .project(&batch)
        .create(&s)
        .await);
    s.set_clock(T0 + MIN).await;
    let w = id(&InstanceBuilder::new(&p)
        .key("w")
        .project(&web)
        .create(&s)
        .await);
    // Live at G1's end: a web-only grant of acme with room for both, and a
    // grant of another tenant (never a renewal of acme's).
    let body = GrantBody::on(&p, 2)
        .term(T0 + 30 * MIN, T0 + 3 * HOUR)
        .key("gw")
        .project(&web)
        .json();
    let gw = grant_id(&create_grant_ok(&s, body).await);
    let gx = GrantBody::on(&p, 2)
        .term(T0 + 30 * MIN, T0 + 3 * HOUR)
        .key("gx")
        .grantee("globex")
        .json();
    s.root("reservationGrants/create", gx).await.ok();

    s.set_clock(T0 + 2 * HOUR).await;
    poke(&s, &p).await;
    assert_eq!(placement_of(&s, t, "acme", &w).await, in_grant(&gw));
    assert_eq!(placement_of(&s, t, "acme", &b).await, plain("reservation"));
    assert_eq!(
        segments(&s, &b).await,
        vec![
            seg_grant(T0, Some(T0 + HOUR), true, &g1, &p.reservation),
            seg_res(T0 + HOUR, None, true, &p.reservation),
        ]
    );
    assert!(list_instances(&s, &globex, "globex", None).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn root_end_hands_over_at_its_instant() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let g1 = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let g2 = GrantBuilder::new(&p)
        .term(T0 + MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // Both grants are live; G1 starts earlier, so it fills first.
    s.set_clock(T0 + 2 * MIN).await;
    let a = id(&InstanceBuilder::new(&p).key("a").create(&s).await);
    s.set_clock(T0 + 3 * MIN).await;
    let b = id(&InstanceBuilder::new(&p).key("b").create(&s).await);
    assert_eq!(placement_of(&s, t, "acme", &a).await, in_grant(&g1));
    assert_eq!(placement_of(&s, t, "acme", &b).await, in_grant(&g1));

    let at = T0 + 30 * MIN;
    s.set_clock(at).await;
    let ended = end_grant(&s, &p.account, &g1).await.ok()["grant"].clone();
    assert_eq!(
        (
            ended["state"].as_str(),
            ended["reason"].as_str(),
            ended["endsAt"].as_i64(),
            ended["endedAt"].as_i64()
        ),
        (Some("ended"), Some("ended"), Some(at), Some(at))
    );
    assert_eq!(placement_of(&s, t, "acme", &a).await, in_grant(&g2));
    assert_eq!(placement_of(&s, t, "acme", &b).await, plain("reservation"));
    assert_eq!(
        segments(&s, &a).await,
        vec![
            seg_grant(T0 + 2 * MIN, Some(at), true, &g1, &p.reservation),
            seg_grant(at, None, true, &g2, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &b).await,
        vec![
            seg_grant(T0 + 3 * MIN, Some(at), true, &g1, &p.reservation),
            seg_res(at, None, true, &p.reservation),
        ]
    );
    // Ending it again returns it unchanged and moves nothing.
    s.set_clock(at + MIN).await;
    let again = end_grant(&s, &p.account, &g1).await.ok()["grant"].clone();
    assert_eq!(again, ended);
    assert_eq!(segments(&s, &b).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_reservation_moves_its_instances_ondemand_at_the_scan_instant() {
    let (s, p) = platform_at_t0(5).await;
    let t = &p.tenant_token;
    let g1 = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let g3 = GrantBuilder::new(&p)
        .term(T0 + 20 * HOUR, T0 + 30 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).key("a").create(&s).await);
    let b = id(&InstanceBuilder::new(&p).key("b").create(&s).await);
    let c = id(&InstanceBuilder::new(&p).key("c").create(&s).await);
    let d = id(&InstanceBuilder::new(&p).key("d").create(&s).await);
    assert_eq!(placement_of(&s, t, "acme", &c).await, plain("reservation"));
    s.set_clock(T0 + MIN).await;
    instance_op_ok(&s, t, "acme", "stop", &b).await; // keeps its grant slot
    instance_op_ok(&s, t, "acme", "stop", &d).await; // releases its ordinary slot

    let gone = T0 + 10 * MIN;
    s.set_clock(gone).await;
    p.gce.delete("res-a").await;
    let items = scan(&s, &p.account).await;
    assert_eq!(items["items"][0]["status"], "gone");

    assert_eq!(placement_of(&s, t, "acme", &a).await, plain("ondemand"));
    assert_eq!(placement_of(&s, t, "acme", &b).await, plain("none"));
    assert_eq!(placement_of(&s, t, "acme", &c).await, plain("ondemand"));
    assert_eq!(placement_of(&s, t, "acme", &d).await, plain("none"));
    assert_eq!(
        segments(&s, &a).await,
        vec![
            seg_grant(T0, Some(gone), true, &g1, &p.reservation),
            seg_off(gone, None, "ondemand", true),
        ]
    );
    assert_eq!(
        segments(&s, &b).await,
        vec![
            seg_grant(T0, Some(T0 + MIN), true, &g1, &p.reservation),
            seg_grant(T0 + MIN, Some(gone), false, &g1, &p.reservation),
            seg_off(gone, None, "none", false),
        ]
    );
    assert_eq!(
        segments(&s, &c).await,
        vec![
            seg_res(T0, Some(gone), true, &p.reservation),
            seg_off(gone, None, "ondemand", true),
        ]
    );
    assert_eq!(
        segments(&s, &d).await,
        vec![
            seg_res(T0, Some(T0 + MIN), true, &p.reservation),
            seg_off(T0 + MIN, None, "none", false),
        ]
    );
    let g1v = get_grant(&s, &g1).await;
    assert_eq!(
        (
            g1v["state"].as_str(),
            g1v["reason"].as_str(),
            g1v["endsAt"].as_i64()
        ),
        (Some("ended"), Some("reservation-gone"), Some(gone))
    );
    let g3v = get_grant(&s, &g3).await;
    assert_eq!(
        (
            g3v["state"].as_str(),
            g3v["reason"].as_str(),
            g3v["endedAt"].as_i64()
        ),
        (Some("cancelled"), Some("reservation-gone"), Some(gone))
    );
    assert_eq!(
        grant_events(&s, t, "acme", &g1).await.last(),
        Some(&(
            "reservation-grant.ended".into(),
            Some("reservation-gone".into()),
            gone
        ))
    );
    assert_eq!(
        grant_events(&s, t, "acme", &g3).await.last(),
        Some(&(
            "reservation-grant.cancelled".into(),
            Some("reservation-gone".into()),
            gone
        ))
    );

    // From now on, new and restarted instances are on-demand.
    s.set_clock(gone + MIN).await;
    let e = InstanceBuilder::new(&p).key("e").create(&s).await;
    assert_eq!(placement(&e), plain("ondemand"));
    let started = instance_op_ok(&s, t, "acme", "start", &b).await;
    assert_eq!(placement(&started), plain("ondemand"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_starting_after_the_end_is_no_renewal_but_takes_in_at_its_start() {
    let (s, p, Ending { g1, s1, r1, r2 }) = ending(6).await;
    let t = &p.tenant_token;
    let end = T0 + 2 * HOUR;
    let later = end + MIN;
    let g2 = GrantBuilder::new(&p)
        .term(later, T0 + 4 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * HOUR).await;
    poke(&s, &p).await;
    // At the end: running ones to ordinary slots, the stopped one loses its
    // slot; a minute later G2 takes in the oldest running one.
    assert_eq!(
        segments(&s, &r1).await,
        vec![
            seg_grant(T0 + MIN, Some(end), true, &g1, &p.reservation),
            seg_res(end, Some(later), true, &p.reservation),
            seg_grant(later, None, true, &g2, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &r2).await,
        vec![
            seg_grant(T0 + 2 * MIN, Some(end), true, &g1, &p.reservation),
            seg_res(end, None, true, &p.reservation),
        ]
    );
    assert_eq!(placement_of(&s, t, "acme", &s1).await, plain("none"));
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_and_delete_after_an_unsettled_end_keep_the_history_exact() {
    let (s, p, Ending { g1, s1, r1, r2 }) = ending(6).await;
    let t = &p.tenant_token;
    let end = T0 + 2 * HOUR;
    // Nothing settles the end until these requests, an hour later.
    let late = end + HOUR;
    s.set_clock(late).await;
    let stopped = instance_op_ok(&s, t, "acme", "stop", &r1).await;
    // Handed over to an ordinary slot at the end, so stopping releases it.
    assert_eq!(placement(&stopped), plain("none"));
    assert_eq!(
        segments(&s, &r1).await,
        vec![
            seg_grant(T0 + MIN, Some(end), true, &g1, &p.reservation),
            seg_res(end, Some(late), true, &p.reservation),
            seg_off(late, None, "none", false),
        ]
    );
    s.set_clock(late + MIN).await;
    instance_op_ok(&s, t, "acme", "delete", &r2).await;
    assert_eq!(
        segments(&s, &r2).await,
        vec![
            seg_grant(T0 + 2 * MIN, Some(end), true, &g1, &p.reservation),
            seg_res(end, Some(late + MIN), true, &p.reservation),
        ]
    );
    let started = instance_op_ok(&s, t, "acme", "start", &s1).await;
    assert_eq!(placement(&started), plain("reservation"));
    assert_eq!(
        segments(&s, &s1).await,
        vec![
            seg_grant(T0, Some(T0 + 3 * MIN), true, &g1, &p.reservation),
            seg_grant(T0 + 3 * MIN, Some(end), false, &g1, &p.reservation),
            seg_off(end, Some(late + MIN), "none", false),
            seg_res(late + MIN, None, true, &p.reservation),
        ]
    );
}
