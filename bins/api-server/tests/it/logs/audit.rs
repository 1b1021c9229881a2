//! The audit trail (contract 3.11): every mutation call that authenticated
//! writes one record, whatever its answer; reads and unauthenticated calls
//! write none; no record holds a secret; `audit.list` pages oldest first,
//! a tenant's own records, every tenant's for root with `all`.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::bodies::{KeyBody, QuotaBody};
use crate::support::calls::{create_project, put_secret, revoke_key};
use crate::support::clock::{MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::{account_body, create_account, create_pool};
use crate::support::server::{Answer, ROOT, ROOT_TOKEN, Server};

/// One stored record, as the table holds it.
#[derive(Debug, Clone, QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    audit_id: String,
    #[diesel(sql_type = BigInt)]
    at: i64,
    #[diesel(sql_type = Text)]
    tenant_id: String,
    #[diesel(sql_type = Text)]
    key_id: String,
    #[diesel(sql_type = Text)]
    method: String,
    #[diesel(sql_type = Text)]
    object_ids: String,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = Nullable<Text>)]
    code: Option<String>,
    #[diesel(sql_type = Text)]
    request_id: String,
}

impl Row {
    fn ids(&self) -> Vec<String> {
        serde_json::from_str(&self.object_ids).expect("objectIds is an array of strings")
    }
}

/// Every record in the database, in `(at, id)` order.
async fn rows(s: &Server) -> Vec<Row> {
    let mut conn = db(s).await;
    diesel::sql_query(
        "SELECT audit_id, at, tenant_id, key_id, method, object_ids::text AS object_ids, \
           outcome, code, request_id FROM audit_records ORDER BY at, audit_id",
    )
    .load(&mut conn)
    .await
    .expect("audit rows")
}

#[derive(QueryableByName)]
struct Text1 {
    #[diesel(sql_type = Text)]
    t: String,
}

/// Every record as the text of its whole row.
async fn rows_as_text(s: &Server) -> Vec<String> {
    let mut conn = db(s).await;
    let rows: Vec<Text1> = diesel::sql_query("SELECT t::text AS t FROM audit_records t")
        .load(&mut conn)
        .await
        .expect("audit rows");
    rows.into_iter().map(|r| r.t).collect()
}

/// The records of one request.
fn of_request<'a>(rows: &'a [Row], a: &Answer) -> Vec<&'a Row> {
    let rid = a.request_id.as_deref().expect("x-request-id");
    rows.iter().filter(|r| r.request_id == rid).collect()
}

/// The outcome and code a record of answer `a` must carry.
fn expected_outcome(a: &Answer) -> (&'static str, Option<String>) {
    match a.status {
        200 => ("ok", None),
        403 => ("denied", Some("ACCESS_DENIED".to_owned())),
        _ => ("failed", Some(a.code().to_owned())),
    }
}

/// A new admin key of `tenant` made with `token`: `(secret, keyId)`.
async fn admin_key(s: &Server, token: &str, tenant: &str) -> (String, String) {
    let v = s
        .call(
            token,
            "apiKeys/create",
            KeyBody::new(tenant, "audited admin", "admin").json(),
        )
        .await
        .ok();
    (
        v["secret"].as_str().expect("secret").to_owned(),
        v["apiKey"]["keyId"].as_str().expect("keyId").to_owned(),
    )
}

/// The served methods: `(name, kind, path, example)`, from
/// `GET /api/compute/methods` and the OpenAPI document.
async fn served(s: &Server) -> Vec<(String, String, String, Value)> {
    let (_, text) = s.get_text("/api/compute/methods").await;
    let list: Value = serde_json::from_str(&text).expect("methods");
    let (_, text) = s.get_text("/api/openapi.json").await;
    let doc: Value = serde_json::from_str(&text).expect("openapi");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|m| {
            let (module, method) = (m["module"].as_str().expect("m"), m["method"].as_str());
            let path = format!("{module}/{}", method.expect("method"));
            let example = doc["paths"][format!("/api/compute/{path}")]["post"]["requestBody"]
                ["content"]["application/json"]["example"]
                .clone();
            (
                m["name"].as_str().expect("name").to_owned(),
                m["kind"].as_str().expect("kind").to_owned(),
                path,
                example,
            )
        })
        .collect()
}

/// Bodies that succeed for some mutations, where a fixture makes that easy;
/// every other mutation is called with its OpenAPI example, whose ids name
/// nothing here (a refusal, recorded as such).
fn fixture_body(name: &str, account: &str, pool: &str, n: usize) -> Option<Value> {
    Some(match name {
        "tenants.create" => json!({ "name": format!("audited-{n}") }),
        "tenants.delete" => json!({ "targetTenantId": "victim" }),
        "projects.create" => json!({ "name": format!("audited {n}") }),
        "apiKeys.create" => json!({ "name": format!("key {n}"), "role": "viewer" }),
        "pools.offer" => {
            json!({ "poolId": pool, "offerTenantId": "acme", "quotas": { "instances": 3 } })
        }
        "quotas.set" => QuotaBody::new(pool, "gpus", 7).json(),
        "clock.set" => json!({ "now": T0 + 10 * MIN }),
        "providerAccounts.create" => {
            let mut b = account_body(ROOT, &format!("audited {n}"), &format!("audit-acct-{n}"));
            b.as_object_mut().expect("object").remove("tenantId");
            b
        }
        "pools.create" => {
            let mut b = crate::support::fixtures::pool_body(
                account,
                &format!("audited {n}"),
                &format!("audit-pool-{n}"),
            );
            b.as_object_mut().expect("object").remove("tenantId");
            b
        }
        _ => return None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn every_mutation_writes_one_record_and_reads_write_none() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    s.tenant("acme").await;
    s.tenant("victim").await;
    let account = create_account(&s, ROOT_TOKEN, account_body(ROOT, "base", "audit-base")).await;
    let pool = create_pool(&s, &account).await;
    let (secret, key_id) = admin_key(&s, ROOT_TOKEN, ROOT).await;
    let methods = served(&s).await;
    let mutations: Vec<_> = methods.iter().filter(|m| m.1 == "mutation").collect();
    assert!(
        mutations.len() >= 20,
        "{} mutations served",
        mutations.len()
    );

    let (mut succeeded, mut refused) = (0, 0);
    for (n, (name, _, path, example)) in mutations.iter().enumerate() {
        let mut body = fixture_body(name, &account, &pool, n).unwrap_or_else(|| example.clone());
        body["tenantId"] = json!(ROOT);
        let before = rows(&s).await;
        let a = s.call(&secret, path, body.clone()).await;
        assert_ne!(a.status, 401, "{name}: {}", a.body);
        assert!(a.status != 500, "{name}: {}", a.body);
        let after = rows(&s).await;
        assert_eq!(after.len(), before.len() + 1, "{name} wrote one record");
        let mine = of_request(&after, &a);
        assert_eq!(mine.len(), 1, "{name}: one record of its request");
        let r = mine[0];
        let (outcome, code) = expected_outcome(&a);
        assert_eq!(
            (&*r.method, &*r.tenant_id, &*r.key_id, &*r.outcome, &r.code),
            (name.as_str(), ROOT, key_id.as_str(), outcome, &code),
            "{name}: {}",
            a.body
        );
        assert!(
            r.audit_id.starts_with("aud_") && r.audit_id.len() == 30,
            "{r:?}"
        );
        assert!(r.at >= T0, "{r:?}");
        // The ids the request named are there.
        let ids = r.ids();
        for (field, value) in body.as_object().expect("object") {
            if field.ends_with("Id") && field != "tenantId" && a.status != 400 {
                let v = value.as_str().expect("id");
                assert!(ids.iter().any(|i| i == v), "{name}: {field} in {ids:?}");
            }
        }
        if a.status == 200 {
            succeeded += 1;
        } else {
            refused += 1;
        }
    }
    assert!(succeeded >= 8, "{succeeded} mutations succeeded");
    assert!(refused >= 8, "{refused} mutations refused");

    // Created objects are named: the new tenant, key, account and pool.
    let all = rows(&s).await;
    let created = |method: &str| {
        all.iter()
            .find(|r| r.method == method && r.outcome == "ok" && r.key_id == key_id)
            .unwrap_or_else(|| panic!("{method} succeeded"))
            .ids()
    };
    assert!(
        created("tenants.create")
            .iter()
            .any(|i| i.starts_with("audited-"))
    );
    assert!(
        created("apiKeys.create")
            .iter()
            .any(|i| i.starts_with("key_"))
    );
    assert!(
        created("providerAccounts.create")
            .iter()
            .any(|i| i.starts_with("pacct_"))
    );
    assert!(
        created("pools.create")
            .iter()
            .any(|i| i.starts_with("pool_"))
    );

    // Reads, allowed or not, write nothing.
    let before = rows(&s).await.len();
    for (name, kind, path, example) in &methods {
        if kind != "read" {
            continue;
        }
        let mut body = example.clone();
        body["tenantId"] = json!(ROOT);
        let a = s.call(&secret, path, body).await;
        assert!(a.status != 401 && a.status != 500, "{name}: {}", a.body);
    }
    assert_eq!(rows(&s).await.len(), before, "reads wrote audit records");
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_replayed_failed_and_unauthenticated_calls() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let acme = s.tenant("acme").await;
    let other = s.tenant("other").await;
    let (viewer, viewer_id) = {
        let v = s
            .call(
                &acme,
                "apiKeys/create",
                KeyBody::new("acme", "viewer", "viewer").json(),
            )
            .await
            .ok();
        (
            v["secret"].as_str().expect("secret").to_owned(),
            v["apiKey"]["keyId"].as_str().expect("id").to_owned(),
        )
    };

    // 403: recorded as denied, with its code, in the key's tenant.
    let a = create_project(&s, &viewer, "acme", "web").await;
    a.err(403, "ACCESS_DENIED");
    let all = rows(&s).await;
    let r = of_request(&all, &a)[0].clone();
    assert_eq!(
        (
            &*r.tenant_id,
            &*r.key_id,
            &*r.method,
            &*r.outcome,
            r.code.as_deref()
        ),
        (
            "acme",
            viewer_id.as_str(),
            "projects.create",
            "denied",
            Some("ACCESS_DENIED")
        )
    );

    // Another tenant's key acting as acme: recorded in its own tenant, the
    // tenant it named among the ids; acme's trail does not show it.
    let a = create_project(&s, &other, "acme", "intruder").await;
    a.err(403, "ACCESS_DENIED");
    let all = rows(&s).await;
    let r = of_request(&all, &a)[0].clone();
    assert_eq!((&*r.tenant_id, &*r.outcome), ("other", "denied"));
    assert_eq!(r.ids(), ["acme"]);
    let seen = s
        .list_all(&acme, "audit/list", json!({ "tenantId": "acme" }))
        .await;
    assert!(
        seen.iter()
            .all(|i| i["tenantId"] == "acme" && i["requestId"] != json!(r.request_id))
    );

    // A replayed idempotent create, a conflicting one, and the original.
    let body = account_body("acme", "replayed", "audit-replay");
    let first = s.call(&acme, "providerAccounts/create", body.clone()).await;
    let account = first.body["account"]["accountId"]
        .as_str()
        .expect("id")
        .to_owned();
    let again = s.call(&acme, "providerAccounts/create", body.clone()).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["account"]["accountId"], json!(account));
    let mut other_body = body.clone();
    other_body["name"] = json!("different");
    let conflict = s.call(&acme, "providerAccounts/create", other_body).await;
    conflict.err(409, "CONFLICT");
    let all = rows(&s).await;
    let outcome = |a: &Answer| {
        let r = of_request(&all, a)[0];
        (r.outcome.clone(), r.code.clone(), r.ids())
    };
    assert_eq!(outcome(&first), ("ok".into(), None, vec![account.clone()]));
    assert_eq!(
        outcome(&again),
        ("replayed".into(), None, vec![account.clone()])
    );
    assert_eq!(
        outcome(&conflict),
        ("failed".into(), Some("CONFLICT".into()), vec![])
    );

    // 404 and 400 after authentication: failed, with their codes.
    let missing = revoke_key(&s, &acme, "acme", "key_00000000000000000000000000").await;
    missing.err(404, "NOT_FOUND");
    let invalid = s
        .call(
            &acme,
            "projects/create",
            json!({ "tenantId": "acme", "name": "x", "bogus": 1 }),
        )
        .await;
    invalid.err(400, "INVALID_INPUT");
    let all = rows(&s).await;
    let r = of_request(&all, &missing)[0];
    assert_eq!(
        (&*r.outcome, r.code.as_deref()),
        ("failed", Some("NOT_FOUND"))
    );
    assert_eq!(r.ids(), ["key_00000000000000000000000000"]);
    let r = of_request(&all, &invalid)[0];
    assert_eq!(
        (&*r.outcome, r.code.as_deref()),
        ("failed", Some("INVALID_INPUT"))
    );
    assert!(r.ids().is_empty(), "an invalid body names nothing: {r:?}");

    // 401 (no key, an unknown key, a revoked one) writes nothing.
    let (revoked, revoked_id) = admin_key(&s, &acme, "acme").await;
    revoke_key(&s, &acme, "acme", &revoked_id).await.ok();
    let before = rows(&s).await.len();
    let body = json!({ "tenantId": "acme", "name": "nobody" }).to_string();
    s.raw(
        None,
        "POST",
        "/api/compute/projects/create",
        Some(body.clone()),
    )
    .await
    .err(401, "UNAUTHENTICATED");
    for token in [
        "bck_unknownunknownunknownunknownunknown00",
        revoked.as_str(),
    ] {
        s.raw(
            Some(token),
            "POST",
            "/api/compute/projects/create",
            Some(body.clone()),
        )
        .await
        .err(401, "UNAUTHENTICATED");
    }
    assert_eq!(rows(&s).await.len(), before, "a 401 wrote a record");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_record_holds_a_secret_or_a_body() {
    let s = Server::start_with_env("BC_SECRETS_KEY", SECRETS_KEY).await;
    let created = s
        .root("tenants/create", json!({ "name": "acme" }))
        .await
        .ok();
    let acme = created["adminKey"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let key = s
        .call(
            &acme,
            "apiKeys/create",
            KeyBody::new("acme", "nameofthekey", "member").json(),
        )
        .await
        .ok();
    let member = key["secret"].as_str().expect("secret").to_owned();
    let value = "ya29.averysecrettokenvalue0123456789";
    put_secret(&s, &acme, "acme", "gce-token", value).await.ok();
    // A refused put of another value, and a call by the member.
    put_secret(&s, &acme, "acme", "Bad Name", "ya29.refusedsecretvalue42")
        .await
        .err(400, "INVALID_INPUT");
    put_secret(&s, &member, "acme", "other", "ya29.deniedsecretvalue42")
        .await
        .err(403, "ACCESS_DENIED");
    let texts = rows_as_text(&s).await;
    assert!(texts.len() >= 5, "{texts:?}");
    for forbidden in [
        ROOT_TOKEN,
        acme.as_str(),
        member.as_str(),
        value,
        "ya29.refusedsecretvalue42",
        "ya29.deniedsecretvalue42",
        "nameofthekey",
        "bck_",
        "ya29",
    ] {
        for t in &texts {
            assert!(!t.contains(forbidden), "{forbidden:?} in {t}");
        }
    }
}

/// The records `token` lists in `tenant` with `filter`, page by page with
/// `limit`, checking each page's shape.
async fn pages(s: &Server, token: &str, tenant: &str, filter: Value, limit: i64) -> Vec<Value> {
    let mut body = filter;
    body["tenantId"] = json!(tenant);
    body["limit"] = json!(limit);
    let mut out = Vec::new();
    loop {
        let page = s.call(token, "audit/list", body.clone()).await.ok();
        let items = page["items"].as_array().expect("items").clone();
        assert!(items.len() <= usize::try_from(limit).expect("limit"));
        out.extend(items);
        body["after"] = page["nextCursor"].clone();
        if page["hasMore"] != json!(true) {
            // Polling from the last cursor finds nothing new.
            let again = s.call(token, "audit/list", body.clone()).await.ok();
            assert_eq!(again["items"], json!([]));
            assert_eq!(again["nextCursor"], body["after"]);
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_list_pages_filters_and_keeps_tenants_apart() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let acme = s.tenant("acme").await;
    let globex = s.tenant("globex").await;
    let mut acme_requests = Vec::new();
    for i in 0..7 {
        s.set_clock(T0 + (i + 1) * MIN).await;
        let a = create_project(&s, &acme, "acme", &format!("p{i}")).await;
        assert_eq!(a.status, 200, "{}", a.body);
        acme_requests.push(a.request_id.expect("x-request-id"));
        create_project(&s, &globex, "globex", &format!("g{i}"))
            .await
            .ok();
    }
    // A refused key creation by acme, at the end.
    revoke_key(&s, &acme, "acme", "key_00000000000000000000000000")
        .await
        .err(404, "NOT_FOUND");

    // Oldest first; pages of 2 give what one page of 1000 gives.
    let whole = pages(&s, &acme, "acme", json!({}), 1000).await;
    let paged = pages(&s, &acme, "acme", json!({}), 2).await;
    assert_eq!(paged, whole);
    assert_eq!(whole.len(), 8, "{whole:?}");
    assert!(whole.iter().all(|r| r["tenantId"] == "acme"));
    let ats: Vec<i64> = whole
        .iter()
        .map(|r| r["at"].as_i64().expect("at"))
        .collect();
    assert!(ats.windows(2).all(|w| w[0] <= w[1]), "{ats:?}");
    let rids: Vec<&str> = whole[..7]
        .iter()
        .map(|r| r["requestId"].as_str().expect("rid"))
        .collect();
    assert_eq!(rids, acme_requests);
    let last = &whole[7];
    assert_eq!(
        (&last["method"], &last["outcome"], &last["code"]),
        (
            &json!("apiKeys.revoke"),
            &json!("failed"),
            &json!("NOT_FOUND")
        )
    );
    assert!(whole[0].get("code").is_none(), "{}", whole[0]);
    assert_eq!(
        whole[0]["keyId"].as_str().map(|k| k.starts_with("key_")),
        Some(true)
    );

    // from (inclusive) and to (exclusive), and the method filter.
    let window = pages(
        &s,
        &acme,
        "acme",
        json!({ "from": T0 + 2 * MIN, "to": T0 + 5 * MIN }),
        2,
    )
    .await;
    let ats: Vec<i64> = window
        .iter()
        .map(|r| r["at"].as_i64().expect("at"))
        .collect();
    assert_eq!(ats, [T0 + 2 * MIN, T0 + 3 * MIN, T0 + 4 * MIN]);
    let revokes = pages(&s, &acme, "acme", json!({ "method": "apiKeys.revoke" }), 10).await;
    assert_eq!(revokes.len(), 1);
    let none = pages(&s, &acme, "acme", json!({ "method": "tenants.create" }), 10).await;
    assert!(none.is_empty());

    // A new record shows up behind the cursor a caught-up reader holds.
    let mut body = json!({ "tenantId": "acme", "limit": 1000 });
    let page = s.call(&acme, "audit/list", body.clone()).await.ok();
    body["after"] = page["nextCursor"].clone();
    s.set_clock(T0 + 30 * MIN).await;
    create_project(&s, &acme, "acme", "late").await.ok();
    let next = s.call(&acme, "audit/list", body).await.ok();
    assert_eq!(next["items"].as_array().map(Vec::len), Some(1), "{next}");
    assert_eq!(next["hasMore"], json!(false));

    // all: root only; root sees every tenant's records (its own included).
    s.call(
        &acme,
        "audit/list",
        json!({ "tenantId": "acme", "all": true }),
    )
    .await
    .err(403, "ACCESS_DENIED");
    let everyone = pages(&s, ROOT_TOKEN, ROOT, json!({ "all": true }), 5).await;
    for t in ["acme", "globex", ROOT] {
        assert!(everyone.iter().any(|r| r["tenantId"] == t), "{t}");
    }
    let ats: Vec<i64> = everyone
        .iter()
        .map(|r| r["at"].as_i64().expect("at"))
        .collect();
    assert!(ats.windows(2).all(|w| w[0] <= w[1]), "{ats:?}");
    let own = pages(&s, ROOT_TOKEN, ROOT, json!({}), 1000).await;
    assert!(!own.is_empty() && own.iter().all(|r| r["tenantId"] == ROOT));
    let globex_own = pages(&s, &globex, "globex", json!({}), 1000).await;
    assert_eq!(globex_own.len(), 7);

    // A viewer (no compute:iam:manage) may not read the trail; a cursor
    // that is not one is refused.
    let viewer = s.key(&acme, "acme", "viewer", None).await;
    s.call(&viewer, "audit/list", json!({ "tenantId": "acme" }))
        .await
        .err(403, "ACCESS_DENIED");
    s.call(
        &acme,
        "audit/list",
        json!({ "tenantId": "acme", "after": "c0000000000000" }),
    )
    .await
    .err(400, "INVALID_INPUT");
}
