//! The paged lists of the operator views (contract 1.6, 3.6 and 3.7, r2):
//! `reservationGrants.list` and `instances.list` with their filters, newest
//! first, keyset cursors, limits, and `all` for root only.

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    end_grant, grant_id, grant_ids, id, instance_op_ok, items, list_grants, list_instances,
    no_such, platform_at_t0, project, second_account, tenant_with_pool,
};
use crate::support::server::{Answer, ROOT, ROOT_TOKEN, Server};

/// A list call with `token` acting in `tenant`; `body` holds the rest.
async fn list(s: &Server, token: &str, tenant: &str, path: &str, mut body: Value) -> Answer {
    body["tenantId"] = json!(tenant);
    s.call(token, path, body).await
}

/// The ids of one page (grants or instances), with `hasMore` and
/// `nextCursor`.
fn page_of(body: &Value, key: &str) -> (Vec<String>, bool, String) {
    let ids = items(body)
        .iter()
        .map(|v| v[key].as_str().expect("id").to_owned())
        .collect();
    (
        ids,
        body["hasMore"].as_bool().expect("hasMore"),
        body["nextCursor"].as_str().expect("nextCursor").to_owned(),
    )
}

/// The grant ids `reservationGrants.list` answers to `body`.
async fn grants_of(s: &Server, token: &str, tenant: &str, body: Value) -> Vec<String> {
    let v = list(s, token, tenant, "reservationGrants/list", body)
        .await
        .ok();
    assert_eq!(v["hasMore"], false, "one page: {v}");
    grant_ids(&items(&v))
}

/// The instance ids `instances.list` answers to `body`.
async fn instances_of(s: &Server, token: &str, tenant: &str, body: Value) -> Vec<String> {
    let v = list(s, token, tenant, "instances/list", body).await.ok();
    assert_eq!(v["hasMore"], false, "one page: {v}");
    items(&v).iter().map(id).collect()
}

/// Pages through `path` with `limit`, returning each page's ids and
/// `hasMore`; checks that each cursor is the one the next page starts
/// after and that reading on from the last one finds nothing.
async fn pages(
    s: &Server,
    token: &str,
    path: &str,
    key: &str,
    mut body: Value,
) -> Vec<(Vec<String>, bool)> {
    let mut out = Vec::new();
    loop {
        let v = s.call(token, path, body.clone()).await.ok();
        let (ids, more, cursor) = page_of(&v, key);
        assert!(cursor.starts_with('k') && cursor.len() == 40, "{cursor}");
        out.push((ids, more));
        body["after"] = json!(cursor);
        if !more {
            // Past the end: nothing, and the same cursor back.
            let end = s.call(token, path, body.clone()).await.ok();
            assert_eq!(page_of(&end, key), (vec![], false, cursor));
            return out;
        }
    }
}

fn strs(ids: &[&String]) -> Vec<String> {
    ids.iter().map(|s| (*s).clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_list_filters_by_reservation_account_state_and_instant_newest_first() {
    let (s, p) = platform_at_t0(10).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let (_fake_b, account_b, res_b) = second_account(&s, &p.pool, 10).await;
    let t = &p.tenant_token;
    // Created a minute apart, in this order; states at N = T0 + 3h:
    s.set_clock(T0 + MIN).await;
    let ended = GrantBuilder::new(&p)
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 2 * MIN).await;
    let active = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 2 * HOUR, T0 + 5 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * MIN).await;
    let scheduled = GrantBuilder::on(&account_b, &res_b)
        .grantee("acme")
        .term(T0 + 4 * HOUR, T0 + 6 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 4 * MIN).await;
    let cancelled = GrantBuilder::new(&p)
        .term(T0 + 4 * HOUR, T0 + 7 * HOUR)
        .create(&s)
        .await;
    assert_eq!(
        end_grant(&s, &p.account, &cancelled).await.ok()["grant"]["state"],
        "cancelled"
    );
    s.set_clock(T0 + 5 * MIN).await;
    let theirs = GrantBuilder::new(&p)
        .grantee("globex")
        .term(T0 + 2 * HOUR, T0 + 4 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 6 * MIN).await;
    let roots = GrantBuilder::on(&account_b, &res_b)
        .grantee(ROOT)
        .term(T0 + HOUR, T0 + 3 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * HOUR).await;

    // The plain call: the tenant's grants, newest first, one page.
    let plain = list(&s, t, "acme", "reservationGrants/list", json!({}))
        .await
        .ok();
    let mine = vec![
        cancelled.clone(),
        scheduled.clone(),
        active.clone(),
        ended.clone(),
    ];
    assert_eq!(grant_ids(&items(&plain)), mine);
    assert_eq!(plain["hasMore"], false);
    let states: Vec<Value> = items(&plain).iter().map(|g| g["state"].clone()).collect();
    assert_eq!(states, ["cancelled", "scheduled", "active", "ended"]);
    // The call without filters answers what it answered before paging.
    let old = items(&list_grants(&s, t, "acme", None).await.ok());
    assert_eq!(grant_ids(&old), mine);

    // States at now, any subset.
    let of = |body: Value| grants_of(&s, t, "acme", body);
    assert_eq!(
        of(json!({ "states": ["active"] })).await,
        vec![active.clone()]
    );
    assert_eq!(
        of(json!({ "states": ["ended"] })).await,
        vec![ended.clone()]
    );
    assert_eq!(
        of(json!({ "states": ["scheduled", "cancelled"] })).await,
        [cancelled.clone(), scheduled.clone()]
    );
    assert_eq!(
        of(json!({ "states": ["scheduled", "active", "ended", "cancelled"] })).await,
        mine
    );
    // Live at an instant: non-cancelled, startsAt <= t < endsAt.
    assert_eq!(
        of(json!({ "activeAt": T0 + 4 * HOUR + 30 * MIN })).await,
        [scheduled.clone(), active.clone()]
    );
    assert_eq!(
        of(json!({ "activeAt": T0 + 2 * HOUR })).await,
        vec![active.clone()]
    );
    assert_eq!(
        of(json!({ "activeAt": T0 + 2 * HOUR - 1 })).await,
        vec![ended.clone()]
    );
    assert!(of(json!({ "activeAt": T0 })).await.is_empty());
    // One reservation, one account, and filters together.
    assert_eq!(
        of(json!({ "reservationId": res_b })).await,
        vec![scheduled.clone()]
    );
    assert_eq!(
        of(json!({ "accountId": account_b })).await,
        vec![scheduled.clone()]
    );
    assert_eq!(
        of(json!({ "accountId": p.account })).await,
        [cancelled.clone(), active.clone(), ended.clone()]
    );
    assert_eq!(
        of(json!({ "reservationId": p.reservation, "states": ["active", "ended"] })).await,
        [active.clone(), ended.clone()]
    );
    assert!(
        of(json!({ "reservationId": res_b, "states": ["ended"] }))
            .await
            .is_empty()
    );
    // Another tenant's grants never show in a plain list, whatever the filter.
    assert_eq!(
        grants_of(
            &s,
            &globex,
            "globex",
            json!({ "reservationId": p.reservation })
        )
        .await,
        vec![theirs.clone()]
    );

    // Root's all: every tenant's, filters included.
    let everyone = vec![
        roots.clone(),
        theirs.clone(),
        cancelled.clone(),
        scheduled.clone(),
        active.clone(),
        ended.clone(),
    ];
    let root = |body: Value| grants_of(&s, ROOT_TOKEN, ROOT, body);
    assert_eq!(root(json!({ "all": true })).await, everyone);
    assert_eq!(
        root(json!({ "all": true, "states": ["ended"] })).await,
        [roots.clone(), ended.clone()]
    );
    assert_eq!(
        root(json!({ "all": true, "reservationId": res_b })).await,
        [roots.clone(), scheduled.clone()]
    );
    assert_eq!(
        root(json!({ "all": true, "activeAt": T0 + 2 * HOUR + 30 * MIN })).await,
        [roots.clone(), theirs.clone(), active.clone()]
    );
    // Root's plain list holds root's own grants only.
    assert_eq!(root(json!({})).await, vec![roots.clone()]);
    // all is root's alone, whatever else is asked.
    for body in [
        json!({ "all": true }),
        json!({ "all": true, "states": ["active"] }),
        json!({ "all": true, "reservationId": p.reservation, "limit": 1 }),
    ] {
        list(&s, t, "acme", "reservationGrants/list", body)
            .await
            .err(403, "ACCESS_DENIED");
    }
    let viewer = s.key(t, "acme", "viewer", None).await;
    list(
        &s,
        &viewer,
        "acme",
        "reservationGrants/list",
        json!({ "all": true }),
    )
    .await
    .err(403, "ACCESS_DENIED");
    assert_eq!(grants_of(&s, &viewer, "acme", json!({})).await, mine);
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_list_pages_with_opaque_cursors_and_bounded_limits() {
    let (s, p) = platform_at_t0(10).await;
    let t = &p.tenant_token;
    let mut made = Vec::new();
    // Five grants; two of them at the same instant (ordered by id).
    for (i, at) in [T0, T0 + MIN, T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]
        .into_iter()
        .enumerate()
    {
        s.set_clock(at).await;
        let tenant = if i == 2 { ROOT } else { "acme" };
        made.push((
            tenant,
            GrantBuilder::new(&p)
                .grantee(tenant)
                .term(at + HOUR, at + 2 * HOUR)
                .create(&s)
                .await,
        ));
    }
    let newest: Vec<String> = made.iter().rev().map(|(_, g)| g.clone()).collect();
    let acme: Vec<&String> = made
        .iter()
        .rev()
        .filter(|(t, _)| *t == "acme")
        .map(|(_, g)| g)
        .collect();

    // limit 2 over root's all: 2, 2, 1, each cursor continuing the last.
    let got = pages(
        &s,
        ROOT_TOKEN,
        "reservationGrants/list",
        "grantId",
        json!({ "tenantId": ROOT, "all": true, "limit": 2 }),
    )
    .await;
    assert_eq!(
        got,
        [
            (newest[0..2].to_vec(), true),
            (newest[2..4].to_vec(), true),
            (newest[4..5].to_vec(), false),
        ]
    );
    // Filters hold across pages: acme's, one at a time.
    let got = pages(
        &s,
        t,
        "reservationGrants/list",
        "grantId",
        json!({ "tenantId": "acme", "limit": 1, "states": ["scheduled"] }),
    )
    .await;
    let expected: Vec<(Vec<String>, bool)> = acme
        .iter()
        .enumerate()
        .map(|(k, g)| (vec![(*g).clone()], k + 1 < acme.len()))
        .collect();
    assert_eq!(got, expected);
    // The default limit is 1000, and 1 and 1000 are allowed.
    let one = list(
        &s,
        t,
        "acme",
        "reservationGrants/list",
        json!({ "limit": 1 }),
    )
    .await
    .ok();
    assert_eq!(page_of(&one, "grantId").0, strs(&acme[..1]));
    assert_eq!(one["hasMore"], true);
    let most = list(
        &s,
        t,
        "acme",
        "reservationGrants/list",
        json!({ "limit": 1000 }),
    )
    .await
    .ok();
    assert_eq!(page_of(&most, "grantId").0, strs(&acme));
    for limit in [json!(0), json!(1001), json!(-1), json!(2.5), json!("10")] {
        let bad = list(
            &s,
            t,
            "acme",
            "reservationGrants/list",
            json!({ "limit": limit }),
        )
        .await;
        let details = bad.err(400, "INVALID_INPUT");
        assert_eq!(details["field"], "limit", "{limit}");
    }
    // Cursors are opaque, and one that does not decode is refused on after.
    let events_cursor = s
        .call(t, "events/list", json!({ "tenantId": "acme" }))
        .await
        .ok()["nextCursor"]
        .clone();
    for after in [
        json!("garbage"),
        json!(""),
        events_cursor,
        json!(format!("k{}u{}", "0".repeat(13), "0".repeat(25))),
        json!(42),
    ] {
        let bad = list(
            &s,
            t,
            "acme",
            "reservationGrants/list",
            json!({ "after": after }),
        )
        .await;
        assert_eq!(bad.err(400, "INVALID_INPUT")["field"], "after", "{after}");
    }
    // States must be known ones, and at least one.
    for states in [
        json!(["running"]),
        json!([]),
        json!("active"),
        json!(["Active"]),
    ] {
        let bad = list(
            &s,
            t,
            "acme",
            "reservationGrants/list",
            json!({ "states": states }),
        )
        .await;
        let field = bad.err(400, "INVALID_INPUT")["field"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(field.starts_with("states"), "{states}: {field}");
    }
    let bad = list(
        &s,
        t,
        "acme",
        "reservationGrants/list",
        json!({ "activeAt": -1 }),
    )
    .await;
    assert_eq!(bad.err(400, "INVALID_INPUT")["field"], "activeAt");
    // A tenant without grants: an empty page with a cursor to come back to.
    let initech = s.tenant("initech").await;
    let empty = list(&s, &initech, "initech", "reservationGrants/list", json!({}))
        .await
        .ok();
    let (ids, more, cursor) = page_of(&empty, "grantId");
    assert!(ids.is_empty() && !more);
    let again = list(
        &s,
        &initech,
        "initech",
        "reservationGrants/list",
        json!({ "after": cursor }),
    )
    .await
    .ok();
    assert_eq!(page_of(&again, "grantId"), (vec![], false, cursor));
    // An ended grant stays listed, with its state.
    end_grant(&s, &p.account, &newest[0]).await.ok();
    let after_end = items(&list_grants(&s, t, "acme", None).await.ok());
    assert_eq!(grant_id(&after_end[0]), newest[0]);
    assert_eq!(after_end[0]["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_list_filters_pages_and_lists_everyone_for_root_only() {
    let (s, p) = platform_at_t0(3).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let web = project(&s, t, "acme", "web").await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // a web instance in the grant, two on ordinary slots, one of which is
    // stopped (its slot released) and one deleted; globex runs one.
    s.set_clock(T0 + MIN).await;
    let in_grant = InstanceBuilder::new(&p)
        .key("i1")
        .project(&web)
        .create(&s)
        .await;
    s.set_clock(T0 + 2 * MIN).await;
    let deleted = InstanceBuilder::new(&p).key("i2").create(&s).await;
    s.set_clock(T0 + 3 * MIN).await;
    let stopped = InstanceBuilder::new(&p).key("i3").create(&s).await;
    instance_op_ok(&s, t, "acme", "stop", &id(&stopped)).await;
    s.set_clock(T0 + 4 * MIN).await;
    let theirs = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("i5")
        .create(&s)
        .await;
    instance_op_ok(&s, t, "acme", "delete", &id(&deleted)).await;
    let (i1, i2, i3, i5) = (id(&in_grant), id(&deleted), id(&stopped), id(&theirs));
    assert_eq!(in_grant["placement"]["grantId"], g);
    assert_eq!(theirs["placement"]["kind"], "reservation");

    let of = |body: Value| instances_of(&s, t, "acme", body);
    let mine = vec![i3.clone(), i2.clone(), i1.clone()];
    assert_eq!(of(json!({})).await, mine);
    let old: Vec<String> = list_instances(&s, t, "acme", None)
        .await
        .iter()
        .map(id)
        .collect();
    assert_eq!(old, mine, "the call without filters answers as before");
    assert_eq!(of(json!({ "states": ["running"] })).await, vec![i1.clone()]);
    assert_eq!(of(json!({ "states": ["stopped"] })).await, vec![i3.clone()]);
    assert_eq!(of(json!({ "states": ["deleted"] })).await, vec![i2.clone()]);
    assert_eq!(
        of(json!({ "states": ["running", "stopped"] })).await,
        [i3.clone(), i1.clone()]
    );
    assert_eq!(of(json!({ "projectId": web })).await, vec![i1.clone()]);
    assert_eq!(of(json!({ "poolId": p.pool })).await, mine);
    assert!(of(json!({ "poolId": no_such("pool") })).await.is_empty());
    // On the reservation now: in its grant or on an ordinary slot.
    assert_eq!(
        of(json!({ "reservationId": p.reservation })).await,
        vec![i1.clone()]
    );
    assert_eq!(of(json!({ "grantId": g })).await, vec![i1.clone()]);
    assert!(
        of(json!({ "grantId": g, "states": ["stopped"] }))
            .await
            .is_empty()
    );

    // Root's all: every tenant's, filtered too; its plain list is its own.
    let root = |body: Value| instances_of(&s, ROOT_TOKEN, ROOT, body);
    let everyone = vec![i5.clone(), i3.clone(), i2.clone(), i1.clone()];
    assert_eq!(root(json!({ "all": true })).await, everyone);
    assert_eq!(
        root(json!({ "all": true, "reservationId": p.reservation })).await,
        [i5.clone(), i1.clone()]
    );
    assert_eq!(
        root(json!({ "all": true, "states": ["running"] })).await,
        [i5.clone(), i1.clone()]
    );
    assert!(root(json!({})).await.is_empty());
    for (token, tenant) in [(t.as_str(), "acme"), (globex.as_str(), "globex")] {
        list(&s, token, tenant, "instances/list", json!({ "all": true }))
            .await
            .err(403, "ACCESS_DENIED");
    }
    assert_eq!(
        instances_of(
            &s,
            &globex,
            "globex",
            json!({ "reservationId": p.reservation })
        )
        .await,
        vec![i5.clone()]
    );

    // Paging: one at a time through root's all, and the limits.
    let got = pages(
        &s,
        ROOT_TOKEN,
        "instances/list",
        "instanceId",
        json!({ "tenantId": ROOT, "all": true, "limit": 1 }),
    )
    .await;
    let expected: Vec<(Vec<String>, bool)> = everyone
        .iter()
        .enumerate()
        .map(|(k, i)| (vec![i.clone()], k + 1 < everyone.len()))
        .collect();
    assert_eq!(got, expected);
    let got = pages(
        &s,
        t,
        "instances/list",
        "instanceId",
        json!({ "tenantId": "acme", "limit": 2, "states": ["running", "deleted", "stopped"] }),
    )
    .await;
    assert_eq!(
        got,
        [
            (vec![i3.clone(), i2.clone()], true),
            (vec![i1.clone()], false)
        ]
    );
    for limit in [json!(0), json!(1001)] {
        let bad = list(&s, t, "acme", "instances/list", json!({ "limit": limit })).await;
        assert_eq!(bad.err(400, "INVALID_INPUT")["field"], "limit");
    }
    for after in [json!("k"), json!("garbage")] {
        let bad = list(&s, t, "acme", "instances/list", json!({ "after": after })).await;
        assert_eq!(bad.err(400, "INVALID_INPUT")["field"], "after");
    }
    let bad = list(
        &s,
        t,
        "acme",
        "instances/list",
        json!({ "states": ["active"] }),
    )
    .await;
    assert_eq!(bad.err(400, "INVALID_INPUT")["field"], "states[0]");
}
