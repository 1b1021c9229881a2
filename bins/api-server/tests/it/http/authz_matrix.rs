//! The authorization matrix, generated from the registry the server serves:
//! every method of `GET /api/compute/methods` x every kind of caller gives the
//! allow or deny that contract 2.2-2.4 derives from the method's permission
//! and scope, and a denied or invalid request changes nothing observable.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use crate::support::bodies::{GrantBody, KeyBody};
use crate::support::fixtures::{create_account, create_pool, offer};
use crate::support::server::{Answer, ROOT, ROOT_TOKEN, Server, rand_suffix};

/// Provider accounts of the matrix point here: nothing listens, so a scan
/// fails at once with a provider error instead of reaching the internet.
const DEAD_ENDPOINT: &str = "http://127.0.0.1:9";
const MISSING_GRANT: &str = "rgrant_00000000000000000000000000";
/// A webhook id no test makes.
const MISSING_WEBHOOK: &str = "whk_00000000000000000000000000";
const MISSING_INSTANCE: &str = "inst_00000000000000000000000000";

/// Methods the contract calls "root only" (2.4): the acting tenant must be
/// the root tenant whatever the permission's scope.
const ROOT_ONLY: &[&str] = &[
    "reservationGrants.create",
    "reservationGrants.end",
    "reservationGrants.preview",
    "providerAccounts.bindReservation",
];

/// Creates a provider account (on [`DEAD_ENDPOINT`]) in `tenant`.
async fn account_in(s: &Server, token: &str, tenant: &str) -> String {
    let body = json!({
        "tenantId": tenant,
        "name": "matrix account",
        "provider": "gce",
        "config": {
            "project": "platform-prod",
            "endpoint": DEAD_ENDPOINT,
            "credentials": "none",
        },
        "idempotencyKey": format!("acct-{}", rand_suffix()),
    });
    create_account(s, token, body).await
}

/// Contract 2.2, written here independently of the server's code.
fn role_permissions(role: &str) -> &'static [&'static str] {
    const ALL: &[&str] = &[
        "compute:quotas:read",
        "compute:quotas:manage",
        "compute:providers:manage",
        "compute:providers:read",
        "compute:pools:manage",
        "compute:tenants:manage",
        "compute:instances:manage",
        "compute:grants:lend",
        "compute:usage:read",
        "compute:events:read",
        "compute:iam:manage",
        "compute:fleet:admin",
    ];
    match role {
        "admin" => ALL,
        "provider-admin" => &["compute:providers:manage", "compute:providers:read"],
        "member" => &[
            "compute:instances:manage",
            "compute:quotas:read",
            "compute:usage:read",
            "compute:events:read",
            "compute:providers:read",
        ],
        "viewer" => &[
            "compute:quotas:read",
            "compute:usage:read",
            "compute:events:read",
            "compute:providers:read",
        ],
        other => panic!("unknown role {other}"),
    }
}

/// One kind of caller.
struct Principal {
    label: &'static str,
    /// `None`: no `Authorization` header.
    token: Option<String>,
    /// Whether the key authenticates (not revoked).
    valid: bool,
    /// The key's tenant.
    tenant: &'static str,
    role: &'static str,
    /// The provider account an account-scoped key is limited to.
    account: Option<String>,
    /// The `tenantId` the request carries.
    acting: &'static str,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Expect {
    Unauthenticated,
    Denied,
    Allowed,
}

/// A served method, as `GET /api/compute/methods` describes it.
struct MethodInfo {
    name: String,
    module: String,
    method: String,
    permission: String,
    scope: String,
}

/// Contract 2.4 applied to the served permission and scope.
fn expected(m: &MethodInfo, p: &Principal, body: &Value) -> Expect {
    if !p.valid {
        return Expect::Unauthenticated;
    }
    // The matrix never names a target tenant other than the caller's own
    // except for the "another tenant's key" callers, so this is the tenant
    // pre-check for every rule (quotas.set's included).
    if p.tenant != p.acting {
        return Expect::Denied;
    }
    if m.scope == "compute-fleet" && p.tenant != ROOT {
        return Expect::Denied;
    }
    if ROOT_ONLY.contains(&m.name.as_str()) && p.acting != ROOT {
        return Expect::Denied;
    }
    if !role_permissions(p.role).contains(&m.permission.as_str()) {
        return Expect::Denied;
    }
    let asked = body.get("accountId").and_then(Value::as_str);
    match (m.scope.as_str(), &p.account) {
        ("compute-provider-account", None) => {
            if asked.is_some() {
                Expect::Allowed
            } else {
                Expect::Denied
            }
        }
        ("compute-provider-account", Some(own)) => {
            if asked == Some(own.as_str()) {
                Expect::Allowed
            } else {
                Expect::Denied
            }
        }
        (_, Some(_)) => Expect::Denied,
        (_, None) => Expect::Allowed,
    }
}

/// Fixtures the bodies refer to.
struct World {
    acme_admin: String,
    root_account: String,
    acme_account: String,
    pool: String,
    clock: i64,
    counter: AtomicU64,
}

impl World {
    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    fn admin_of(&self, tenant: &str) -> &str {
        if tenant == ROOT {
            ROOT_TOKEN
        } else {
            &self.acme_admin
        }
    }

    fn account_of(&self, tenant: &str) -> &str {
        if tenant == ROOT {
            &self.root_account
        } else {
            &self.acme_account
        }
    }
}

/// A body for `m` acting as `acting` that passes validation, and whether a
/// caller allowed to make it must succeed (the foundation's methods) or may
/// fail after authorization (later methods, whose objects are not set up
/// here: their bodies name objects that do not exist, so allowed callers get
/// 404). Creates what a body refers to (a key to revoke, a tenant to delete,
/// an account to delete) so that a wrongly allowed call would show in a
/// snapshot. `None` for a method this test does not know (see
/// [`schema_body`]).
async fn valid_body(s: &Server, w: &World, m: &MethodInfo, acting: &str) -> Option<(Value, bool)> {
    let n = w.next();
    let missing_reservation = "projects/platform-prod/zones/us-central1-a/reservations/missing";
    let (body, must_succeed) = match m.name.as_str() {
        "tenants.create" => (
            json!({ "name": format!("new-{n}"), "displayName": "New tenant" }),
            true,
        ),
        "tenants.delete" => {
            let victim = format!("victim-{n}");
            s.tenant(&victim).await;
            (json!({ "targetTenantId": victim }), true)
        }
        "tenants.list"
        | "projects.list"
        | "apiKeys.list"
        | "pools.list"
        | "providerAccounts.list"
        | "clock.get" => (json!({}), true),
        "projects.create" => (json!({ "name": format!("project {n}") }), true),
        "apiKeys.create" => (
            json!({ "name": format!("key {n}"), "role": "viewer" }),
            true,
        ),
        "apiKeys.revoke" => {
            let v = s
                .call(
                    w.admin_of(acting),
                    "apiKeys/create",
                    KeyBody::new(acting, &format!("to revoke {n}"), "viewer").json(),
                )
                .await
                .ok();
            (json!({ "keyId": v["apiKey"]["keyId"] }), true)
        }
        "pools.create" => (
            json!({
                "name": format!("pool {n}"),
                "region": "europe-west4",
                "provider": "gce",
                "accountId": w.account_of(acting),
                "flavors": [{ "name": "n2-standard-8", "vcpus": 8, "memoryGib": 32, "gpus": 0 }],
                "quotas": { "instances": 5 },
                "idempotencyKey": format!("matrix-pool-{n}"),
            }),
            true,
        ),
        "pools.offer" => (
            json!({
                "poolId": w.pool,
                "offerTenantId": "acme",
                "quotas": { "instances": 1000 + n, "vcpus": 10_000 + n },
            }),
            true,
        ),
        "pools.get" | "quotas.get" => (json!({ "poolId": w.pool }), true),
        "quotas.set" => (
            json!({ "poolId": w.pool, "resource": "gpus", "max": 500 + n }),
            true,
        ),
        "events.list" => (json!({ "limit": 10 }), true),
        "audit.list" => (json!({ "limit": 10 }), true),
        "clock.set" => (
            json!({ "now": w.clock + i64::try_from(n).expect("small") * 1000 }),
            true,
        ),
        "providerAccounts.create" => (
            json!({
                "name": format!("account {n}"),
                "provider": "gce",
                "config": {
                    "project": "matrix-project",
                    "endpoint": DEAD_ENDPOINT,
                    "credentials": "none",
                },
                "idempotencyKey": format!("matrix-acct-{n}"),
            }),
            true,
        ),
        "providerAccounts.get" => (json!({ "accountId": w.account_of(acting) }), true),
        // Later releases: bodies that validate and name what exists where
        // it matters for the decision (the provider account).
        "providerAccounts.listReservations" | "providerAccounts.scan" => {
            (json!({ "accountId": w.account_of(acting) }), false)
        }
        "providerAccounts.delete" => {
            let account = account_in(s, w.admin_of(acting), acting).await;
            (json!({ "accountId": account }), false)
        }
        "providerAccounts.bindReservation" => (
            json!({
                "accountId": w.account_of(acting),
                "reservationId": missing_reservation,
                "poolId": w.pool,
            }),
            false,
        ),
        "providerAccounts.unbindReservation" => (
            json!({ "accountId": w.account_of(acting), "reservationId": missing_reservation }),
            false,
        ),
        "reservationGrants.create" => (
            GrantBody::new(w.account_of(acting), missing_reservation, "acme", 1)
                .term(w.clock + 3_600_000, w.clock + 7_200_000)
                .key(&format!("matrix-grant-{n}"))
                .json(),
            false,
        ),
        "reservationGrants.preview" => (
            GrantBody::new(w.account_of(acting), missing_reservation, "acme", 1)
                .term(w.clock + 3_600_000, w.clock + 7_200_000)
                .json(),
            false,
        ),
        "reservationGrants.end" => (
            json!({ "accountId": w.account_of(acting), "grantId": MISSING_GRANT }),
            false,
        ),
        "reservationGrants.get" | "reservationGrants.usage" => {
            (json!({ "grantId": MISSING_GRANT }), false)
        }
        "reservationGrants.setLending" => {
            (json!({ "grantId": MISSING_GRANT, "lend": true }), false)
        }
        "reservations.timeline" => (
            json!({
                "accountId": w.account_of(acting),
                "reservationId": missing_reservation,
                "from": w.clock,
                "to": w.clock + 3_600_000,
            }),
            false,
        ),
        "reservationGrants.list" | "instances.list" => (json!({}), false),
        "instances.create" => (
            json!({
                "poolId": w.pool,
                "flavor": "n2-standard-4",
                "idempotencyKey": format!("matrix-inst-{n}"),
            }),
            false,
        ),
        "instances.get" | "instances.stop" | "instances.start" | "instances.delete" => {
            (json!({ "instanceId": MISSING_INSTANCE }), false)
        }
        // Without BC_SECRETS_KEY a create is INVALID_STATE; the others find
        // no such webhook.
        "webhooks.create" => (
            json!({ "url": "https://hooks.example.com/x", "idempotencyKey": format!("wh-{n}") }),
            false,
        ),
        "webhooks.list" => (json!({}), true),
        "webhooks.get"
        | "webhooks.update"
        | "webhooks.delete"
        | "webhooks.rotateSecret"
        | "webhooks.test"
        | "webhooks.deliveries" => (json!({ "webhookId": MISSING_WEBHOOK }), false),
        _ => return None,
    };
    let mut body = body;
    body["tenantId"] = json!(acting);
    Some((body, must_succeed))
}

/// A value satisfying a JSON schema of the OpenAPI document, for methods this
/// test has no hand-written body for (served by later releases): ids of the
/// acting tenant's fixtures where the pattern names a known prefix.
fn schema_value(w: &World, schema: &Value, acting: &str, field: &str, n: u64) -> Value {
    match schema["type"].as_str() {
        Some("string") => {
            if let Some(options) = schema["enum"].as_array() {
                return options[0].clone();
            }
            let pattern = schema["pattern"].as_str().unwrap_or("");
            let candidates = [
                acting.to_owned(),
                w.account_of(acting).to_owned(),
                w.pool.clone(),
                format!("matrix-{n}"),
                format!("{field}-{n}"),
                "prj_00000000000000000000000000".to_owned(),
                "rgrant_00000000000000000000000000".to_owned(),
                "inst_00000000000000000000000000".to_owned(),
                "key_00000000000000000000000000".to_owned(),
                "projects/p/zones/z/reservations/r".to_owned(),
                "a".to_owned(),
            ];
            let re = regex::Regex::new(pattern).expect("pattern");
            let pick = if field == "tenantId" {
                acting.to_owned()
            } else {
                candidates
                    .into_iter()
                    .find(|c| re.is_match(c))
                    .unwrap_or_else(|| format!("x{n}"))
            };
            json!(pick)
        }
        Some("integer") => schema["minimum"].clone(),
        Some("boolean") => json!(false),
        Some("array") => {
            let min = schema["minItems"].as_u64().unwrap_or(0);
            let items: Vec<Value> = (0..min)
                .map(|_| schema_value(w, &schema["items"], acting, field, n))
                .collect();
            json!(items)
        }
        Some("object") => {
            let mut out = Map::new();
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().expect("name");
                out.insert(
                    r.to_owned(),
                    schema_value(w, &schema["properties"][r], acting, r, n),
                );
            }
            Value::Object(out)
        }
        _ => Value::Null,
    }
}

fn schema_body(w: &World, openapi: &Value, m: &MethodInfo, acting: &str) -> Value {
    let path = format!("/api/compute/{}/{}", m.module, m.method);
    let schema =
        &openapi["paths"][&path]["post"]["requestBody"]["content"]["application/json"]["schema"];
    schema_value(w, schema, acting, "", w.next())
}

async fn send(s: &Server, m: &MethodInfo, p: &Principal, body: &Value) -> Answer {
    s.raw(
        p.token.as_deref(),
        "POST",
        &format!("/api/compute/{}/{}", m.module, m.method),
        Some(body.to_string()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_method_times_every_caller_is_allowed_or_denied_as_the_contract_says() {
    let s = Server::start().await;

    // Tenants, keys and the objects the bodies name.
    let acme_admin = s.tenant("acme").await;
    let other_admin = s.tenant("other").await;
    let root_account = account_in(&s, ROOT_TOKEN, ROOT).await;
    let acme_account = account_in(&s, &acme_admin, "acme").await;
    let pool = create_pool(&s, &root_account).await;
    offer(
        &s,
        &pool,
        "acme",
        json!({ "instances": 100, "vcpus": 1000, "memoryGib": 10_000 }),
    )
    .await;
    let clock = s.now().await;
    let revoked = {
        let v = s
            .root(
                "apiKeys/create",
                json!({ "name": "revoked admin", "role": "admin" }),
            )
            .await
            .ok();
        s.root("apiKeys/revoke", json!({ "keyId": v["apiKey"]["keyId"] }))
            .await
            .ok();
        v["secret"].as_str().expect("secret").to_owned()
    };
    let acme_viewer = s.key(&acme_admin, "acme", "viewer", None).await;
    let acme_member = s.key(&acme_admin, "acme", "member", None).await;
    let acme_acct_pa = s
        .key(&acme_admin, "acme", "provider-admin", Some(&acme_account))
        .await;
    let root_viewer = s.key(ROOT_TOKEN, ROOT, "viewer", None).await;
    let root_member = s.key(ROOT_TOKEN, ROOT, "member", None).await;
    let root_acct_admin = s.key(ROOT_TOKEN, ROOT, "admin", Some(&root_account)).await;

    let p = |label, token: Option<&str>, valid, tenant, role, account: Option<&str>, acting| {
        Principal {
            label,
            token: token.map(str::to_owned),
            valid,
            tenant,
            role,
            account: account.map(str::to_owned),
            acting,
        }
    };
    let principals = vec![
        p("no key", None, false, ROOT, "admin", None, ROOT),
        p(
            "revoked key",
            Some(&revoked),
            false,
            ROOT,
            "admin",
            None,
            ROOT,
        ),
        p(
            "another tenant's key (other admin acting as acme)",
            Some(&other_admin),
            true,
            "other",
            "admin",
            None,
            "acme",
        ),
        p(
            "another tenant's key (acme admin acting as root)",
            Some(&acme_admin),
            true,
            "acme",
            "admin",
            None,
            ROOT,
        ),
        p(
            "viewer",
            Some(&acme_viewer),
            true,
            "acme",
            "viewer",
            None,
            "acme",
        ),
        p(
            "member",
            Some(&acme_member),
            true,
            "acme",
            "member",
            None,
            "acme",
        ),
        p(
            "admin",
            Some(&acme_admin),
            true,
            "acme",
            "admin",
            None,
            "acme",
        ),
        p(
            "root admin",
            Some(ROOT_TOKEN),
            true,
            ROOT,
            "admin",
            None,
            ROOT,
        ),
        p(
            "account-scoped provider-admin",
            Some(&acme_acct_pa),
            true,
            "acme",
            "provider-admin",
            Some(&acme_account),
            "acme",
        ),
        p(
            "root viewer",
            Some(&root_viewer),
            true,
            ROOT,
            "viewer",
            None,
            ROOT,
        ),
        p(
            "root member",
            Some(&root_member),
            true,
            ROOT,
            "member",
            None,
            ROOT,
        ),
        p(
            "root account-scoped admin",
            Some(&root_acct_admin),
            true,
            ROOT,
            "admin",
            Some(&root_account),
            ROOT,
        ),
    ];

    let w = World {
        acme_admin: acme_admin.clone(),
        root_account,
        acme_account,
        pool,
        clock,
        counter: AtomicU64::new(1),
    };

    // The registry as served.
    let (_, text) = s.get_text("/api/compute/methods").await;
    let list: Value = serde_json::from_str(&text).expect("methods");
    let (_, text) = s.get_text("/api/openapi.json").await;
    let openapi: Value = serde_json::from_str(&text).expect("openapi");
    let methods: Vec<MethodInfo> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|m| MethodInfo {
            name: m["name"].as_str().expect("name").to_owned(),
            module: m["module"].as_str().expect("module").to_owned(),
            method: m["method"].as_str().expect("method").to_owned(),
            permission: m["permission"].as_str().expect("permission").to_owned(),
            scope: m["scope"].as_str().expect("scope").to_owned(),
        })
        .collect();
    assert!(methods.len() >= 20, "{} methods served", methods.len());

    let observed = [
        (ROOT_TOKEN, ROOT),
        (acme_admin.as_str(), "acme"),
        (other_admin.as_str(), "other"),
    ];
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &methods {
        // Bodies first: building them may create fixtures.
        let mut cases = Vec::new();
        for p in &principals {
            let (body, known) = match valid_body(&s, &w, m, p.acting).await {
                Some(b) => b,
                None => (schema_body(&w, &openapi, m, p.acting), false),
            };
            cases.push((p, body, known));
        }
        let root_body = match valid_body(&s, &w, m, ROOT).await {
            Some((b, _)) => b,
            None => schema_body(&w, &openapi, m, ROOT),
        };

        // Denied and invalid requests, between two snapshots.
        let before = snapshot(&s, &observed).await;
        for (view, v) in before.as_object().expect("views") {
            assert_eq!(v["status"], 200, "snapshot view {view}: {v}");
        }
        for (p, body, _) in &cases {
            let want = expected(m, p, body);
            if want == Expect::Allowed {
                continue;
            }
            let a = send(&s, m, p, body).await;
            match want {
                Expect::Unauthenticated => {
                    a.err(401, "UNAUTHENTICATED");
                }
                Expect::Denied => {
                    assert_eq!(
                        (a.status, a.code()),
                        (403, "ACCESS_DENIED"),
                        "{} by {}: {}",
                        m.name,
                        p.label,
                        a.body
                    );
                    assert!(a.body["error"]["details"].is_object());
                    // The denial's reason is logged, never returned.
                    assert_eq!(a.body["error"]["details"], json!({}), "{}", m.name);
                }
                Expect::Allowed => unreachable!(),
            }
            *tally
                .entry(if want == Expect::Denied {
                    "denied"
                } else {
                    "unauthenticated"
                })
                .or_default() += 1;
        }
        // Invalid requests by the most privileged caller: an unknown field,
        // a missing tenantId, a body that is not an object.
        let root_admin = principals
            .iter()
            .find(|p| p.label == "root admin")
            .expect("root admin");
        let mut unknown = root_body.clone();
        unknown["bogusField"] = json!(1);
        let a = send(&s, m, root_admin, &unknown).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("bogusField"), Some("unknown")),
            "{}",
            m.name
        );
        let mut missing = root_body.clone();
        missing.as_object_mut().expect("object").remove("tenantId");
        let a = send(&s, m, root_admin, &missing).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("tenantId"), Some("missing")),
            "{}",
            m.name
        );
        send(&s, m, root_admin, &json!([root_body.clone()]))
            .await
            .err(400, "INVALID_INPUT");
        *tally.entry("invalid").or_default() += 3;
        let after = snapshot(&s, &observed).await;
        assert_same(
            &before,
            &after,
            &format!("a denied or invalid call of {}", m.name),
        );

        // Allowed requests: never 401/403; with a known body, a success.
        for (p, body, known) in &cases {
            if expected(m, p, body) != Expect::Allowed {
                continue;
            }
            let a = send(&s, m, p, body).await;
            assert!(
                a.status != 401 && a.status != 403,
                "{} by {} must be allowed: {}",
                m.name,
                p.label,
                a.body
            );
            if *known {
                assert_eq!(a.status, 200, "{} by {}: {}", m.name, p.label, a.body);
            } else {
                assert_ne!(
                    a.status, 400,
                    "the body of {} does not validate: {}; fix it in valid_body",
                    m.name, a.body
                );
                assert!(
                    a.body["error"]["code"] != "INTERNAL",
                    "{}: {}",
                    m.name,
                    a.body
                );
            }
            *tally.entry("allowed").or_default() += 1;
        }
    }
    // The matrix exercised every outcome.
    assert!(tally["allowed"] > 30, "{tally:?}");
    assert!(tally["denied"] > 100, "{tally:?}");
    assert_eq!(tally["unauthenticated"], 2 * methods.len(), "{tally:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_role_table_is_what_the_server_decides_for_tenant_methods() {
    // A focused check of contract 2.2 on tenant-scoped reads: each role of a
    // non-root tenant, on one method per permission.
    let s = Server::start().await;
    let admin = s.tenant("acme").await;
    let cases = [
        ("quotas/get", "compute:quotas:read"),
        ("events/list", "compute:events:read"),
        ("providerAccounts/list", "compute:providers:read"),
        ("projects/list", "compute:instances:manage"),
        ("apiKeys/list", "compute:iam:manage"),
    ];
    for role in ["viewer", "member", "provider-admin", "admin"] {
        let token = if role == "admin" {
            admin.clone()
        } else {
            s.key(&admin, "acme", role, None).await
        };
        for (path, perm) in cases {
            let a = s.call(&token, path, json!({ "tenantId": "acme" })).await;
            if role_permissions(role).contains(&perm) {
                assert_eq!(a.status, 200, "{role} {path}: {}", a.body);
            } else {
                a.err(403, "ACCESS_DENIED");
            }
        }
    }
}

fn answer_value(a: &Answer) -> Value {
    json!({ "status": a.status, "body": a.body })
}

/// Everything a client can observe of the given tenants (each read with a
/// key of its own), plus the fleet-wide views of root. Two snapshots are equal
/// when nothing observable changed in between.
async fn snapshot(s: &Server, tenants: &[(&str, &str)]) -> Value {
    let mut out = serde_json::Map::new();
    for (path, body) in [
        ("tenants/list", json!({})),
        ("pools/list", json!({})),
        ("clock/get", json!({})),
    ] {
        out.insert(
            format!("root:{path}"),
            answer_value(&s.root(path, body).await),
        );
    }
    // The per-tenant lists, those of later releases included when served.
    let (_, methods) = s.get_text("/api/compute/methods").await;
    let served = |path: &str| methods.contains(&format!("\"{}\"", path.replace('/', ".")));
    let lists: Vec<&str> = [
        "apiKeys/list",
        "projects/list",
        "providerAccounts/list",
        "pools/list",
        "quotas/get",
        "instances/list",
        "reservationGrants/list",
    ]
    .into_iter()
    .filter(|p| served(p))
    .collect();
    for (token, tenant) in tenants {
        for path in lists.iter().copied() {
            let a = s.call(token, path, json!({ "tenantId": tenant })).await;
            out.insert(format!("{tenant}:{path}"), answer_value(&a));
        }
        let a = s
            .call(
                token,
                "events/list",
                json!({ "tenantId": tenant, "limit": 1000 }),
            )
            .await;
        out.insert(format!("{tenant}:events/list"), answer_value(&a));
    }
    Value::Object(out)
}

/// Asserts two snapshots are equal, naming the first differing view.
#[track_caller]
fn assert_same(before: &Value, after: &Value, what: &str) {
    if before == after {
        return;
    }
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        panic!("{what}: snapshots differ");
    };
    for (k, v) in b {
        if a.get(k) != Some(v) {
            panic!(
                "{what} changed observable state in {k}:\nbefore: {v}\nafter:  {}",
                a.get(k).unwrap_or(&Value::Null)
            );
        }
    }
    panic!("{what}: snapshots differ");
}
