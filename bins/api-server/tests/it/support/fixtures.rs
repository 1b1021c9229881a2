//! The platform the tests build through the API: provider accounts, pools
//! and their offers, quotas, projects, reservation grants and instances.

use serde_json::{Value, json};

use super::bodies::{GrantBody, QuotaBody};
use super::builders::{GrantBuilder, PlatformBuilder};
use super::calls::get_quotas;
use super::clock::{HOUR, T0};
use super::gce::{FLAVOR, Gce, PROJECT};
use super::server::{Answer, ROOT, ROOT_TOKEN, Server, rand_suffix};

/// Whether `id` is a TypeID with `prefix` (contract 1.3).
pub fn is_typeid(id: &Value, prefix: &str) -> bool {
    let Some(id) = id.as_str() else {
        return false;
    };
    let Some(rest) = id.strip_prefix(&format!("{prefix}_")) else {
        return false;
    };
    rest.len() == 26
        && rest
            .bytes()
            .all(|b| b"0123456789abcdefghjkmnpqrstvwxyz".contains(&b))
}

/// A syntactically valid id with `prefix` that names nothing.
pub fn no_such(prefix: &str) -> String {
    format!("{prefix}_{}", "0".repeat(26))
}

// Provider accounts.

/// A valid `providerAccounts.create` body (its config points nowhere).
pub fn account_body(tenant: &str, name: &str, key: &str) -> Value {
    json!({
        "tenantId": tenant,
        "name": name,
        "provider": "gce",
        "config": { "project": "acme-project-1", "credentials": "none" },
        "idempotencyKey": key,
    })
}

/// `providerAccounts.create` with `token` that must succeed; returns the id.
pub async fn create_account(s: &Server, token: &str, body: Value) -> String {
    let v = s.call(token, "providerAccounts/create", body).await.ok();
    v["account"]["accountId"]
        .as_str()
        .expect("accountId")
        .to_owned()
}

/// A provider account of `tenant` (pointing nowhere), created with `token`.
pub async fn account_in(s: &Server, token: &str, tenant: &str) -> String {
    let body = account_body(tenant, "gce account", &format!("acct-{}", rand_suffix()));
    create_account(s, token, body).await
}

/// A root account on [`PROJECT`] named `name`, on `endpoint` if any (else
/// pointing nowhere).
async fn root_account_on(s: &Server, name: &str, endpoint: Option<&str>) -> String {
    let mut body = json!({
        "tenantId": ROOT,
        "name": name,
        "provider": "gce",
        "config": { "project": PROJECT, "credentials": "none" },
        "idempotencyKey": format!("acct-{}", rand_suffix()),
    });
    if let Some(url) = endpoint {
        body["config"]["endpoint"] = json!(url);
    }
    create_account(s, ROOT_TOKEN, body).await
}

/// A root provider account pointing nowhere.
pub async fn root_account(s: &Server) -> String {
    root_account_on(s, "gce main", None).await
}

/// A root provider account whose endpoint is the fake.
pub async fn gce_account(s: &Server, gce: &Gce) -> String {
    root_account_on(s, "gce", Some(&gce.url)).await
}

/// Scans `account` as root.
pub async fn scan(s: &Server, account: &str) -> Value {
    s.root("providerAccounts/scan", json!({ "accountId": account }))
        .await
        .ok()
}

/// `providerAccounts.bindReservation` as root.
pub async fn bind(s: &Server, account: &str, reservation: &str, pool: &str) -> Answer {
    s.root(
        "providerAccounts/bindReservation",
        json!({ "accountId": account, "reservationId": reservation, "poolId": pool }),
    )
    .await
}

/// `providerAccounts.unbindReservation` as root.
pub async fn unbind(s: &Server, account: &str, reservation: &str) -> Answer {
    s.root(
        "providerAccounts/unbindReservation",
        json!({ "accountId": account, "reservationId": reservation }),
    )
    .await
}

/// `providerAccounts.listReservations` as root; returns the items.
pub async fn reservations(s: &Server, account: &str) -> Vec<Value> {
    let v = s
        .root(
            "providerAccounts/listReservations",
            json!({ "accountId": account }),
        )
        .await
        .ok();
    items(&v)
}

/// A second root account on a fake of its own, without a pool, holding one
/// scanned reservation `res-b` of `total` slots bound to `pool` (which is
/// built on another account). Returns the fake, the account and the
/// reservation id.
pub async fn second_account(s: &Server, pool: &str, total: i64) -> (Gce, String, String) {
    let fake = Gce::start().await;
    fake.put("res-b", total, 0, "READY").await;
    let account = gce_account(s, &fake).await;
    scan(s, &account).await;
    let reservation = Gce::reservation_id("res-b");
    bind(s, &account, &reservation, pool).await.ok();
    (fake, account, reservation)
}

// Pools, offers, quotas and projects.

/// A valid `pools.create` body (as root) on `account`, with two flavors.
pub fn pool_body(account: &str, name: &str, key: &str) -> Value {
    json!({
        "tenantId": ROOT,
        "name": name,
        "region": "us-central1",
        "provider": "gce",
        "accountId": account,
        "flavors": [
            { "name": "n2-standard-4", "vcpus": 4, "memoryGib": 16, "gpus": 0 },
            { "name": "a2-highgpu-1g", "vcpus": 12, "memoryGib": 85, "gpus": 1 }
        ],
        "quotas": { "instances": 10, "vcpus": 40 },
        "idempotencyKey": key,
    })
}

/// A root pool with the one flavor [`FLAVOR`] and root quotas; returns its id.
pub async fn create_pool(s: &Server, account: &str) -> String {
    let v = s
        .root(
            "pools/create",
            json!({
                "name": "gce us-central1",
                "region": "us-central1",
                "provider": "gce",
                "accountId": account,
                "flavors": [{
                    "name": FLAVOR,
                    "vcpus": 4,
                    "memoryGib": 16,
                    "gpus": 0,
                }],
                "quotas": { "instances": 100, "vcpus": 400 },
                "idempotencyKey": format!("pool-{}", rand_suffix()),
            }),
        )
        .await
        .ok();
    v["pool"]["poolId"].as_str().expect("poolId").to_owned()
}

/// A fresh server with tenant `acme` and a root pool (on an account
/// pointing nowhere) not yet offered to it: the server, acme's admin secret
/// and the pool.
pub async fn acme_and_pool() -> (Server, String, String) {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let account = root_account(&s).await;
    let pool = create_pool(&s, &account).await;
    (s, acme, pool)
}

/// The quotas a test tenant is offered a pool with by default.
pub fn default_quotas() -> Value {
    json!({ "instances": 10, "vcpus": 40, "memoryGib": 1000 })
}

/// `pools.offer` of `pool` to `tenant` with `quotas`, as root.
pub async fn offer_answer(s: &Server, pool: &str, tenant: &str, quotas: Value) -> Answer {
    s.root(
        "pools/offer",
        json!({ "poolId": pool, "offerTenantId": tenant, "quotas": quotas }),
    )
    .await
}

/// Offers `pool` to `tenant` with `quotas`; returns the pool.
pub async fn offer(s: &Server, pool: &str, tenant: &str, quotas: Value) -> Value {
    offer_answer(s, pool, tenant, quotas).await.ok()["pool"].clone()
}

/// Creates tenant `name`, offers it `pool` with the default quotas and
/// returns its admin secret.
pub async fn tenant_with_pool(s: &Server, name: &str, pool: &str) -> String {
    let token = s.tenant(name).await;
    offer(s, pool, name, default_quotas()).await;
    token
}

/// The tenant's quota rows of `pool` as `(resource, max, used)`, in the
/// order `quotas.get` returns them.
pub async fn quotas(s: &Server, token: &str, tenant: &str, pool: &str) -> Vec<(String, i64, i64)> {
    let v = get_quotas(s, token, tenant, Some(pool)).await.ok();
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| {
            (
                r["resource"].as_str().expect("resource").to_owned(),
                r["max"].as_i64().expect("max"),
                r["used"].as_i64().expect("used"),
            )
        })
        .collect()
}

/// `used` of one resource (None if the tenant has no row for it).
pub async fn used(
    s: &Server,
    token: &str,
    tenant: &str,
    pool: &str,
    resource: &str,
) -> Option<i64> {
    quotas(s, token, tenant, pool)
        .await
        .into_iter()
        .find(|(r, _, _)| r == resource)
        .map(|(_, _, u)| u)
}

/// `quotas.set` by root of `tenant`'s `max` of `resource` on `pool`.
pub async fn set_quota_answer(
    s: &Server,
    tenant: &str,
    pool: &str,
    resource: &str,
    max: i64,
) -> Answer {
    let body = QuotaBody::new(pool, resource, max).tenant(tenant).json();
    s.root("quotas/set", body).await
}

/// `quotas.set` by root for `tenant`; returns the quota row.
pub async fn set_quota(s: &Server, tenant: &str, pool: &str, resource: &str, max: i64) -> Value {
    set_quota_answer(s, tenant, pool, resource, max).await.ok()["quota"].clone()
}

/// Lets the root tenant create instances on `pool` (it has no `memoryGib`
/// row from `pools.create`).
pub async fn root_can_use(s: &Server, pool: &str) {
    set_quota(s, ROOT, pool, "memoryGib", 10_000).await;
    set_quota(s, ROOT, pool, "vcpus", 1_000).await;
    set_quota(s, ROOT, pool, "instances", 100).await;
}

/// Creates a project of `tenant` with `token`; returns its id.
pub async fn project(s: &Server, token: &str, tenant: &str, name: &str) -> String {
    let v = s
        .call(
            token,
            "projects/create",
            json!({ "tenantId": tenant, "name": name }),
        )
        .await
        .ok();
    v["project"]["projectId"]
        .as_str()
        .expect("projectId")
        .to_owned()
}

// The platform.

/// A platform set up for grants: a root account on the fake, a pool, a
/// scanned reservation bound to it, and a tenant the pool is offered to.
/// Built by [`PlatformBuilder`].
pub struct Platform {
    /// The fake.
    pub gce: Gce,
    /// Root's provider account.
    pub account: String,
    /// The pool.
    pub pool: String,
    /// The bound reservation's id.
    pub reservation: String,
    /// The tenant's name.
    pub tenant: String,
    /// The tenant's admin secret.
    pub tenant_token: String,
}

/// A fresh server with its clock at [`T0`] and a default platform
/// ([`PlatformBuilder`]) of `total` slots.
pub async fn platform_at_t0(total: i64) -> (Server, Platform) {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new().slots(total).build(&s).await;
    (s, p)
}

/// A provider account of the platform's tenant, created with its admin
/// secret (`acme gce`, on the project `acme-project`); returns its id.
pub async fn tenant_own_account(s: &Server, p: &Platform) -> String {
    let body = json!({
        "tenantId": p.tenant,
        "name": "acme gce",
        "provider": "gce",
        "config": { "project": "acme-project", "credentials": "none" },
        "idempotencyKey": "a1",
    });
    create_account(s, &p.tenant_token, body).await
}

// Reservation grants.

/// A grant request body on the platform's reservation for its tenant.
pub fn grant_body(p: &Platform, slots: i64, starts_at: i64, ends_at: i64, key: &str) -> Value {
    grant_body_for(p, &p.tenant, slots, starts_at, ends_at, key)
}

/// A grant request body on the platform's reservation for `tenant`.
pub fn grant_body_for(
    p: &Platform,
    tenant: &str,
    slots: i64,
    starts_at: i64,
    ends_at: i64,
    key: &str,
) -> Value {
    GrantBody::on(p, slots)
        .grantee(tenant)
        .term(starts_at, ends_at)
        .key(key)
        .json()
}

/// `reservationGrants.create` as root.
pub async fn create_grant(s: &Server, body: Value) -> Answer {
    s.root("reservationGrants/create", body).await
}

/// `reservationGrants.create` as root that must succeed; returns the grant.
pub async fn create_grant_ok(s: &Server, body: Value) -> Value {
    create_grant(s, body).await.ok()["grant"].clone()
}

/// The `grantId` of a grant object.
pub fn grant_id(grant: &Value) -> String {
    grant["grantId"].as_str().expect("grantId").to_owned()
}

/// The ids of a list of grants, in order.
pub fn grant_ids(grants: &[Value]) -> Vec<String> {
    grants.iter().map(grant_id).collect()
}

/// `reservationGrants.get` with `token` acting in `tenant`.
pub async fn get_grant_as(s: &Server, token: &str, tenant: &str, grant: &str) -> Answer {
    s.call(
        token,
        "reservationGrants/get",
        json!({ "tenantId": tenant, "grantId": grant }),
    )
    .await
}

/// A grant as root sees it.
pub async fn get_grant(s: &Server, grant: &str) -> Value {
    get_grant_as(s, ROOT_TOKEN, ROOT, grant).await.ok()["grant"].clone()
}

/// `reservationGrants.list` with `token` acting in `tenant`.
pub async fn list_grants(s: &Server, token: &str, tenant: &str, all: Option<bool>) -> Answer {
    let mut body = json!({ "tenantId": tenant });
    if let Some(a) = all {
        body["all"] = json!(a);
    }
    s.call(token, "reservationGrants/list", body).await
}

/// `reservationGrants.end` of a grant on `account`, as root.
pub async fn end_grant(s: &Server, account: &str, grant: &str) -> Answer {
    s.root(
        "reservationGrants/end",
        json!({ "accountId": account, "grantId": grant }),
    )
    .await
}

/// The `reservation-grant.*` event types of one grant, in order.
pub fn types_of(evs: &[Value], grant: &str) -> Vec<String> {
    evs.iter()
        .filter(|e| e["data"]["grantId"] == grant)
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect()
}

/// Makes the server settle the reservation's timeline up to its now without
/// touching any instance: creates a far-future grant for root (a decision on
/// the reservation) and cancels it again (another one).
pub async fn poke(s: &Server, p: &Platform) {
    let far = s.now().await + 10_000 * HOUR;
    let g = GrantBuilder::new(p)
        .grantee(ROOT)
        .term(far, far + HOUR)
        .create(s)
        .await;
    let cancelled = end_grant(s, &p.account, &g).await.ok();
    assert_eq!(cancelled["grant"]["state"], "cancelled");
}

// Instances.

/// `instances.{method}` on one instance (`stop`, `start`, `delete`, `get`).
pub async fn instance_op(s: &Server, token: &str, tenant: &str, method: &str, id: &str) -> Answer {
    s.call(
        token,
        &format!("instances/{method}"),
        json!({ "tenantId": tenant, "instanceId": id }),
    )
    .await
}

/// `instances.{method}` that must succeed; returns the instance object.
pub async fn instance_op_ok(
    s: &Server,
    token: &str,
    tenant: &str,
    method: &str,
    id: &str,
) -> Value {
    instance_op(s, token, tenant, method, id).await.ok()["instance"].clone()
}

/// `instances.get` that must succeed.
pub async fn get_instance(s: &Server, token: &str, tenant: &str, id: &str) -> Value {
    instance_op_ok(s, token, tenant, "get", id).await
}

/// `instances.list` (optionally of one project); returns the items.
pub async fn list_instances(
    s: &Server,
    token: &str,
    tenant: &str,
    project: Option<&str>,
) -> Vec<Value> {
    let mut body = json!({ "tenantId": tenant });
    if let Some(p) = project {
        body["projectId"] = json!(p);
    }
    items(&s.call(token, "instances/list", body).await.ok())
}

/// The `instanceId` of an instance object.
pub fn id(instance: &Value) -> String {
    instance["instanceId"]
        .as_str()
        .expect("instanceId")
        .to_owned()
}

/// `placement.kind` of an instance object.
pub fn kind(instance: &Value) -> String {
    instance["placement"]["kind"]
        .as_str()
        .expect("placement.kind")
        .to_owned()
}

/// `placement.grantId` of an instance object.
pub fn grant_of(instance: &Value) -> Option<String> {
    instance["placement"]["grantId"].as_str().map(str::to_owned)
}

/// `(placement.kind, placement.grantId)` of an instance object.
pub fn placement(instance: &Value) -> (String, Option<String>) {
    (kind(instance), grant_of(instance))
}

/// `("grant", Some(grant))`, for comparing with [`placement`].
pub fn in_grant(grant: &str) -> (String, Option<String>) {
    ("grant".to_owned(), Some(grant.to_owned()))
}

/// `(kind, None)`, for comparing with [`placement`].
pub fn plain(kind: &str) -> (String, Option<String>) {
    (kind.to_owned(), None)
}

/// The current placement of an instance as `instances.get` reports it.
pub async fn placement_of(
    s: &Server,
    token: &str,
    tenant: &str,
    id: &str,
) -> (String, Option<String>) {
    placement(&get_instance(s, token, tenant, id).await)
}

/// `field` of each of the `items` of a list answer's body, in order.
pub fn each<'a>(body: &'a Value, field: &str) -> Vec<&'a Value> {
    let items = body["items"].as_array().expect("items");
    items.iter().map(|item| &item[field]).collect()
}

/// The `items` of a list answer's body.
pub fn items(body: &Value) -> Vec<Value> {
    body["items"].as_array().expect("items").clone()
}
