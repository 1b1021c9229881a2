//! reservationGrants.get / list / end: who sees and who ends which grant
//! (seed-reservation-grants.md "get", "list", "end", contract 2.4, 3.6).

use serde_json::json;

use crate::support::bodies::GrantBody;
use crate::support::calls::end_grant_as;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    create_grant_ok, end_grant, get_grant_as, grant_body, grant_body_for, grant_id, grant_ids,
    items, list_grants, no_such, offer, platform_at_t0, project, scan, second_account,
    tenant_own_account, types_of,
};
use crate::support::server::{ROOT_TOKEN, of_type};

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_of_another_tenant_is_not_found() {
    let (s, p) = platform_at_t0(10).await;
    let beta = s.tenant("beta").await;
    offer(&s, &p.pool, "beta", json!({ "instances": 10 })).await;
    let acme_grant = grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0, T0 + HOUR, "a")).await);
    let beta_grant =
        grant_id(&create_grant_ok(&s, grant_body_for(&p, "beta", 1, T0, T0 + HOUR, "b")).await);

    // Each tenant reads its own.
    let got = get_grant_as(&s, &p.tenant_token, "acme", &acme_grant)
        .await
        .ok();
    assert_eq!(got["grant"]["tenantId"], "acme");
    assert_eq!(got["grant"]["slots"], 2);
    get_grant_as(&s, &beta, "beta", &beta_grant).await.ok();
    // ...and not the other's, whatever the key's role.
    get_grant_as(&s, &beta, "beta", &acme_grant)
        .await
        .err(404, "NOT_FOUND");
    get_grant_as(&s, &p.tenant_token, "acme", &beta_grant)
        .await
        .err(404, "NOT_FOUND");
    let beta_viewer = s.key(&beta, "beta", "viewer", None).await;
    get_grant_as(&s, &beta_viewer, "beta", &acme_grant)
        .await
        .err(404, "NOT_FOUND");
    get_grant_as(&s, &beta_viewer, "beta", &beta_grant)
        .await
        .ok();
    // An unknown grant reads the same.
    get_grant_as(&s, &p.tenant_token, "acme", &no_such("rgrant"))
        .await
        .err(404, "NOT_FOUND");
    // Acting in another tenant is denied before any lookup.
    get_grant_as(&s, &p.tenant_token, "beta", &beta_grant)
        .await
        .err(403, "ACCESS_DENIED");
    get_grant_as(&s, &p.tenant_token, "root", &acme_grant)
        .await
        .err(403, "ACCESS_DENIED");
    // A key limited to a provider account holds nothing at tenant scope.
    let scoped = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&p.account))
        .await;
    get_grant_as(&s, &scoped, "root", &acme_grant)
        .await
        .err(403, "ACCESS_DENIED");

    // Root, acting in the root tenant, reads any grant, with any reading key.
    for token in [
        ROOT_TOKEN.to_owned(),
        s.key(ROOT_TOKEN, "root", "viewer", None).await,
    ] {
        for (id, tenant) in [(&acme_grant, "acme"), (&beta_grant, "beta")] {
            let g = get_grant_as(&s, &token, "root", id).await.ok();
            assert_eq!(g["grant"]["tenantId"], tenant);
            assert_eq!(g["grant"]["grantId"], id.as_str());
        }
    }
    get_grant_as(&s, ROOT_TOKEN, "root", &no_such("rgrant"))
        .await
        .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_shows_every_field_of_the_contract() {
    let (s, p) = platform_at_t0(10).await;
    let prj = project(&s, &p.tenant_token, "acme", "web").await;
    let b = GrantBody::on(&p, 3)
        .term(T0 + HOUR, T0 + 4 * HOUR)
        .key("a")
        .project(&prj)
        .json();
    let g = create_grant_ok(&s, b).await;
    let id = grant_id(&g);
    assert!(
        id.starts_with("rgrant_") && id.len() == "rgrant_".len() + 26,
        "{id}"
    );
    assert_eq!(
        g,
        json!({
            "grantId": id, "accountId": p.account, "reservationId": p.reservation,
            "poolId": p.pool, "tenantId": "acme", "projectId": prj, "slots": 3,
            "startsAt": T0 + HOUR, "endsAt": T0 + 4 * HOUR, "state": "scheduled",
            "createdAt": T0, "meteredThrough": T0 + HOUR, "deficitSlotHours": "0.000000",
            "lending": false, "lentSlotHours": "0.000000",
        })
    );
    s.set_clock(T0 + 2 * HOUR).await;
    let ended = end_grant(&s, &p.account, &id).await.ok()["grant"].clone();
    assert_eq!(
        ended,
        json!({
            "grantId": id, "accountId": p.account, "reservationId": p.reservation,
            "poolId": p.pool, "tenantId": "acme", "projectId": prj, "slots": 3,
            "startsAt": T0 + HOUR, "endsAt": T0 + 2 * HOUR, "state": "ended",
            "reason": "ended", "createdAt": T0, "endedAt": T0 + 2 * HOUR,
            "meteredThrough": T0 + HOUR, "deficitSlotHours": "0.000000",
            "lending": false, "lentSlotHours": "0.000000",
        })
    );
    // get, list and list-all show the same object.
    let got = get_grant_as(&s, &p.tenant_token, "acme", &id).await.ok();
    assert_eq!(got["grant"], ended);
    let listed = items(&list_grants(&s, &p.tenant_token, "acme", None).await.ok());
    assert_eq!(listed, std::slice::from_ref(&ended));
    let all = items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok());
    assert_eq!(all, [ended]);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_returns_the_acting_tenants_grants_newest_first() {
    let (s, p) = platform_at_t0(100).await;
    let beta = s.tenant("beta").await;
    offer(&s, &p.pool, "beta", json!({ "instances": 10 })).await;
    let mut created: Vec<(String, String)> = Vec::new();
    for (i, tenant) in ["acme", "beta", "acme", "root", "acme", "beta", "root"]
        .into_iter()
        .enumerate()
    {
        let at = T0 + i64::try_from(i).unwrap() * 1000;
        s.set_clock(at).await;
        let g = create_grant_ok(
            &s,
            grant_body_for(&p, tenant, 1, at + HOUR, at + 2 * HOUR, &format!("k{i}")),
        )
        .await;
        created.push((tenant.to_owned(), grant_id(&g)));
    }
    // One of acme's grants ended, one cancelled: lists show them all.
    let acme_ids: Vec<String> = created
        .iter()
        .filter(|(t, _)| t == "acme")
        .map(|(_, id)| id.clone())
        .collect();
    end_grant(&s, &p.account, &acme_ids[0]).await.ok();
    let newest_first = |tenant: Option<&str>| -> Vec<String> {
        created
            .iter()
            .rev()
            .filter(|(t, _)| tenant.is_none_or(|x| x == t))
            .map(|(_, id)| id.clone())
            .collect()
    };

    let acme = items(&list_grants(&s, &p.tenant_token, "acme", None).await.ok());
    assert_eq!(grant_ids(&acme), newest_first(Some("acme")));
    assert!(acme.iter().all(|g| g["tenantId"] == "acme"));
    let acme_viewer = s.key(&p.tenant_token, "acme", "viewer", None).await;
    let acme2 = items(
        &list_grants(&s, &acme_viewer, "acme", Some(false))
            .await
            .ok(),
    );
    assert_eq!(grant_ids(&acme2), newest_first(Some("acme")));
    let beta_list = items(&list_grants(&s, &beta, "beta", None).await.ok());
    assert_eq!(grant_ids(&beta_list), newest_first(Some("beta")));
    // Root's plain list holds the grants whose grantee is root.
    let root_plain = items(&list_grants(&s, ROOT_TOKEN, "root", None).await.ok());
    assert_eq!(grant_ids(&root_plain), newest_first(Some("root")));
    // With all, root lists every tenant's.
    let all = items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok());
    assert_eq!(grant_ids(&all), newest_first(None));
    let root_viewer = s.key(ROOT_TOKEN, "root", "viewer", None).await;
    let all2 = items(&list_grants(&s, &root_viewer, "root", Some(true)).await.ok());
    assert_eq!(grant_ids(&all2), newest_first(None));
    // Anyone else asking for all is denied.
    list_grants(&s, &p.tenant_token, "acme", Some(true))
        .await
        .err(403, "ACCESS_DENIED");
    list_grants(&s, &acme_viewer, "acme", Some(true))
        .await
        .err(403, "ACCESS_DENIED");
    list_grants(&s, &beta, "acme", None)
        .await
        .err(403, "ACCESS_DENIED");
    // A tenant without grants lists none.
    let gamma = s.tenant("gamma").await;
    assert!(items(&list_grants(&s, &gamma, "gamma", None).await.ok()).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn end_of_a_grant_on_another_account_is_not_found() {
    let (s, p) = platform_at_t0(10).await;
    let g = create_grant_ok(&s, grant_body(&p, 1, T0, T0 + 2 * HOUR, "a")).await;
    let id = grant_id(&g);
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 4).await;
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + 2 * HOUR)
        .key("b")
        .on_reservation(&account_b, &res_b)
        .json();
    let on_b = grant_id(&create_grant_ok(&s, b).await);
    let acme_account = tenant_own_account(&s, &p).await;

    s.set_clock(T0 + HOUR).await;
    end_grant(&s, &account_b, &id).await.err(404, "NOT_FOUND");
    end_grant(&s, &p.account, &on_b).await.err(404, "NOT_FOUND");
    end_grant(&s, &acme_account, &id)
        .await
        .err(404, "NOT_FOUND");
    end_grant(&s, &no_such("pacct"), &id)
        .await
        .err(404, "NOT_FOUND");
    end_grant(&s, &p.account, &no_such("rgrant"))
        .await
        .err(404, "NOT_FOUND");
    // Nothing changed.
    let still = get_grant_as(&s, ROOT_TOKEN, "root", &id).await.ok();
    assert_eq!(still["grant"]["state"], "active");
    assert_eq!(still["grant"]["endsAt"], T0 + 2 * HOUR);
    // A key scoped to account B may not end grants of A; one scoped to A may.
    let scoped_b = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&account_b))
        .await;
    end_grant_as(&s, &scoped_b, "root", &p.account, &id)
        .await
        .err(403, "ACCESS_DENIED");
    let scoped_a = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&p.account))
        .await;
    let ended = end_grant_as(&s, &scoped_a, "root", &p.account, &id)
        .await
        .ok();
    assert_eq!(ended["grant"]["state"], "ended");
    assert_eq!(ended["grant"]["endsAt"], T0 + HOUR);
    // B's grant is untouched.
    let b_now = get_grant_as(&s, ROOT_TOKEN, "root", &on_b).await.ok();
    assert_eq!(b_now["grant"]["state"], "active");
}

#[tokio::test(flavor = "multi_thread")]
async fn end_by_anyone_but_root_is_access_denied() {
    let (s, p) = platform_at_t0(10).await;
    let id = grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0, T0 + 2 * HOUR, "a")).await);
    let body = |tenant: &str| json!({ "tenantId": tenant, "accountId": p.account, "grantId": id });
    // The grantee's admin, in its own tenant or claiming root.
    s.call(&p.tenant_token, "reservationGrants/end", body("acme"))
        .await
        .err(403, "ACCESS_DENIED");
    s.call(&p.tenant_token, "reservationGrants/end", body("root"))
        .await
        .err(403, "ACCESS_DENIED");
    // Root keys without compute:providers:manage.
    for role in ["viewer", "member"] {
        let key = s.key(ROOT_TOKEN, "root", role, None).await;
        s.call(&key, "reservationGrants/end", body("root"))
            .await
            .err(403, "ACCESS_DENIED");
    }
    let g = get_grant_as(&s, &p.tenant_token, "acme", &id).await.ok();
    assert_eq!(g["grant"]["state"], "active");
    let evs = s.events(&p.tenant_token, "acme").await;
    assert!(of_type(&evs, "reservation-grant.ended").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn end_never_makes_ends_at_later() {
    let (s, p) = platform_at_t0(10).await;
    let over = grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "a")).await);
    let cancelled =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + 3 * HOUR, T0 + 4 * HOUR, "b")).await);
    end_grant(&s, &p.account, &cancelled).await.ok();

    // Well after the term: returned as it is, ended by its term.
    s.set_clock(T0 + 2 * HOUR).await;
    let r = end_grant(&s, &p.account, &over).await.ok();
    let g = &r["grant"];
    assert_eq!(g["state"], "ended");
    assert_eq!(g["reason"], "term-over");
    assert_eq!(g["endsAt"], T0 + HOUR);
    assert_eq!(g["endedAt"], T0 + HOUR);
    let again = end_grant(&s, &p.account, &over).await.ok();
    assert_eq!(&again["grant"], g);
    // A cancelled grant stays cancelled with its term and its end instant.
    let c = end_grant(&s, &p.account, &cancelled).await.ok();
    assert_eq!(c["grant"]["state"], "cancelled");
    assert_eq!(c["grant"]["reason"], "ended");
    assert_eq!(c["grant"]["startsAt"], T0 + 3 * HOUR);
    assert_eq!(c["grant"]["endsAt"], T0 + 4 * HOUR);
    assert_eq!(c["grant"]["endedAt"], T0);
    s.set_clock(T0 + 5 * HOUR).await;
    let c2 = end_grant(&s, &p.account, &cancelled).await.ok();
    assert_eq!(c2["grant"], c["grant"]);

    let evs = s.events(&p.tenant_token, "acme").await;
    let ended = of_type(&evs, "reservation-grant.ended");
    assert_eq!(ended.len(), 1, "{evs:?}");
    assert_eq!(ended[0]["data"]["reason"], "term-over");
    assert_eq!(ended[0]["data"]["endsAt"], T0 + HOUR);
    assert_eq!(of_type(&evs, "reservation-grant.cancelled").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn end_moves_ends_at_only_earlier_within_the_term() {
    let (s, p) = platform_at_t0(10).await;
    // Started 3 minutes ago: ending it now keeps [startsAt, now).
    let id = grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0 - 3 * MIN, T0 + HOUR, "a")).await);
    let r = end_grant(&s, &p.account, &id).await.ok();
    assert_eq!(r["grant"]["state"], "ended");
    assert_eq!(r["grant"]["endsAt"], T0);
    assert_eq!(r["grant"]["startsAt"], T0 - 3 * MIN);
    // One millisecond before its end: endsAt moves by a millisecond.
    let id2 = grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0, T0 + HOUR, "b")).await);
    s.set_clock(T0 + HOUR - 1).await;
    let r2 = end_grant(&s, &p.account, &id2).await.ok();
    assert_eq!(r2["grant"]["endsAt"], T0 + HOUR - 1);
    assert_eq!(r2["grant"]["reason"], "ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn ending_a_grant_at_its_start_instant_ends_it_with_an_empty_term() {
    // At `startsAt` the grant is active (its term is [startsAt, endsAt)), so
    // ending it "now" at that instant ends it: endsAt = startsAt, an empty
    // term that commits and bills nothing.
    let (s, p) = platform_at_t0(4).await;
    // Created active at once (startsAt = now), ended at that same instant.
    let id = grant_id(&create_grant_ok(&s, grant_body(&p, 4, T0, T0 + HOUR, "a")).await);
    let g = end_grant(&s, &p.account, &id).await.ok()["grant"].clone();
    assert_eq!(g["state"], "ended", "{g}");
    assert_eq!(g["reason"], "ended");
    assert_eq!(
        (g["startsAt"].clone(), g["endsAt"].clone()),
        (json!(T0), json!(T0))
    );
    assert_eq!(g["endedAt"], T0);
    assert_eq!(g["meteredThrough"], T0);
    // It holds no slot any more.
    create_grant_ok(&s, grant_body(&p, 4, T0, T0 + HOUR, "b")).await;
    // A scheduled grant ended at its start instant, after the clock reached it.
    let id3 =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + 2 * HOUR, T0 + 3 * HOUR, "c")).await);
    s.set_clock(T0 + 2 * HOUR).await;
    let g3 = end_grant(&s, &p.account, &id3).await.ok()["grant"].clone();
    assert_eq!(g3["state"], "ended", "{g3}");
    assert_eq!(g3["endsAt"], T0 + 2 * HOUR);
    assert_eq!(g3["endedAt"], T0 + 2 * HOUR);
    let again = end_grant(&s, &p.account, &id3).await.ok();
    assert_eq!(again["grant"], g3);
    let evs = s.events(&p.tenant_token, "acme").await;
    for gid in [&id, &id3] {
        assert_eq!(
            types_of(&evs, gid),
            [
                "reservation-grant.created",
                "reservation-grant.active",
                "reservation-grant.ended"
            ]
        );
    }
    // Likewise a reservation found gone at the instant a grant starts.
    let id4 =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + 5 * HOUR, T0 + 6 * HOUR, "d")).await);
    s.set_clock(T0 + 5 * HOUR).await;
    p.gce.delete("res-a").await;
    scan(&s, &p.account).await;
    let g4 = get_grant_as(&s, ROOT_TOKEN, "root", &id4).await.ok();
    assert_eq!(g4["grant"]["state"], "ended");
    assert_eq!(g4["grant"]["endsAt"], T0 + 5 * HOUR);
    assert_eq!(g4["grant"]["reason"], "reservation-gone");
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_created_at_one_instant_list_in_creation_order_newest_first() {
    let (s, p) = platform_at_t0(100).await;
    let mut created = Vec::new();
    for i in 0..12 {
        let g = create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, &format!("k{i}"))).await;
        assert_eq!(g["createdAt"], T0);
        created.push(grant_id(&g));
    }
    created.reverse();
    let acme = items(&list_grants(&s, &p.tenant_token, "acme", None).await.ok());
    assert_eq!(grant_ids(&acme), created);
    let all = items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok());
    assert_eq!(grant_ids(&all), created);
}
