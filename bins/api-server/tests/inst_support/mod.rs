//! Helpers for the instance and grant-timeline end-to-end tests (placement,
//! take-in, hand-over, quotas, tenant deletion, concurrency), on top of the
//! `common` harness and the `gce` fake. Placement segments and other rows the
//! API does not show are read straight from the server's database.
#![allow(dead_code)]

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};

use crate::common::{Answer, Server, rand_suffix};
use crate::gce::{self, Platform};

/// One minute in milliseconds.
pub const MIN: i64 = 60_000;
/// One hour in milliseconds.
pub const HOUR: i64 = 3_600_000;
/// 2030-01-01T00:00:00Z.
pub const T0: i64 = 1_893_456_000_000;

/// The default quotas a test tenant is offered the pool with.
pub fn default_quotas() -> Value {
    json!({ "instances": 10, "vcpus": 40, "memoryGib": 1000 })
}

/// `instances.create` by `token` in `tenant` on `pool` with the test flavor
/// and `key`; `extra` fields (an object) are merged into the body and
/// override the defaults.
pub async fn create(
    s: &Server,
    token: &str,
    tenant: &str,
    pool: &str,
    key: &str,
    extra: Value,
) -> Answer {
    let mut body = json!({
        "tenantId": tenant,
        "poolId": pool,
        "flavor": gce::FLAVOR,
        "idempotencyKey": key,
    });
    if let Some(fields) = extra.as_object() {
        for (k, v) in fields {
            body[k] = v.clone();
        }
    }
    s.call(token, "instances/create", body).await
}

/// `instances.create` that must succeed; returns the instance object.
pub async fn create_ok(
    s: &Server,
    token: &str,
    tenant: &str,
    pool: &str,
    key: &str,
    extra: Value,
) -> Value {
    create(s, token, tenant, pool, key, extra).await.ok()["instance"].clone()
}

/// `instances.{method}` on one instance (`stop`, `start`, `delete`, `get`).
pub async fn op(s: &Server, token: &str, tenant: &str, method: &str, id: &str) -> Answer {
    s.call(
        token,
        &format!("instances/{method}"),
        json!({ "tenantId": tenant, "instanceId": id }),
    )
    .await
}

/// `instances.{method}` that must succeed; returns the instance object.
pub async fn op_ok(s: &Server, token: &str, tenant: &str, method: &str, id: &str) -> Value {
    op(s, token, tenant, method, id).await.ok()["instance"].clone()
}

/// `instances.get` that must succeed.
pub async fn get(s: &Server, token: &str, tenant: &str, id: &str) -> Value {
    op_ok(s, token, tenant, "get", id).await
}

/// `instances.list` (optionally of one project); returns the items.
pub async fn list(s: &Server, token: &str, tenant: &str, project: Option<&str>) -> Vec<Value> {
    let mut body = json!({ "tenantId": tenant });
    if let Some(p) = project {
        body["projectId"] = json!(p);
    }
    s.call(token, "instances/list", body).await.ok()["items"]
        .as_array()
        .expect("items")
        .clone()
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
    placement(&get(s, token, tenant, id).await)
}

/// The tenant's quota rows of `pool` as `(resource, max, used)`, in the
/// order `quotas.get` returns them.
pub async fn quotas(s: &Server, token: &str, tenant: &str, pool: &str) -> Vec<(String, i64, i64)> {
    let v = s
        .call(
            token,
            "quotas/get",
            json!({ "tenantId": tenant, "poolId": pool }),
        )
        .await
        .ok();
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

/// `quotas.set` by root for `tenant`; returns the quota row.
pub async fn set_quota(s: &Server, tenant: &str, pool: &str, resource: &str, max: i64) -> Value {
    s.root(
        "quotas/set",
        json!({ "tenantId": tenant, "poolId": pool, "resource": resource, "max": max }),
    )
    .await
    .ok()["quota"]
        .clone()
}

/// Creates a project of `tenant`; returns its id.
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

/// Offers `pool` to `tenant` with `quotas`.
pub async fn offer(s: &Server, pool: &str, tenant: &str, quotas: Value) {
    s.root(
        "pools/offer",
        json!({ "poolId": pool, "offerTenantId": tenant, "quotas": quotas }),
    )
    .await
    .ok();
}

/// Creates tenant `name`, offers it `pool` with the default quotas and
/// returns its admin secret.
pub async fn tenant_with_pool(s: &Server, name: &str, pool: &str) -> String {
    let token = s.tenant(name).await;
    offer(s, pool, name, default_quotas()).await;
    token
}

/// Lets the root tenant create instances on `pool` (it has no `memoryGib`
/// row from `pools.create`).
pub async fn root_can_use(s: &Server, pool: &str) {
    set_quota(s, "root", pool, "memoryGib", 10_000).await;
    set_quota(s, "root", pool, "vcpus", 1_000).await;
    set_quota(s, "root", pool, "instances", 100).await;
}

/// `reservationGrants.create` as root on the platform's reservation for
/// `tenant` (and `project`); returns the grant object.
#[allow(clippy::too_many_arguments)]
pub async fn grant_for(
    s: &Server,
    p: &Platform,
    tenant: &str,
    project: Option<&str>,
    slots: i64,
    starts_at: i64,
    ends_at: i64,
) -> Value {
    let mut body = gce::grant_body(
        p,
        slots,
        starts_at,
        ends_at,
        &format!("g-{}", rand_suffix()),
    );
    body["grantTenantId"] = json!(tenant);
    if let Some(pr) = project {
        body["projectId"] = json!(pr);
    }
    s.root("reservationGrants/create", body).await.ok()["grant"].clone()
}

/// As [`grant_for`], returning the grant id only.
pub async fn grant_id(
    s: &Server,
    p: &Platform,
    tenant: &str,
    project: Option<&str>,
    slots: i64,
    starts_at: i64,
    ends_at: i64,
) -> String {
    let g = grant_for(s, p, tenant, project, slots, starts_at, ends_at).await;
    g["grantId"].as_str().expect("grantId").to_owned()
}

/// `reservationGrants.get` as root.
pub async fn grant_get(s: &Server, grant: &str) -> Value {
    s.root("reservationGrants/get", json!({ "grantId": grant }))
        .await
        .ok()["grant"]
        .clone()
}

/// `reservationGrants.end` as root; returns the grant.
pub async fn grant_end(s: &Server, p: &Platform, grant: &str) -> Value {
    s.root(
        "reservationGrants/end",
        json!({ "accountId": p.account, "grantId": grant }),
    )
    .await
    .ok()["grant"]
        .clone()
}

/// Makes the server settle the reservation's timeline up to its now without
/// touching any instance: creates a far-future grant for root (a decision on
/// the reservation) and cancels it again (another one).
pub async fn poke(s: &Server, p: &Platform) {
    let now = s.root("clock/get", json!({})).await.ok()["now"]
        .as_i64()
        .expect("now");
    let far = now + 10_000 * HOUR;
    let g = grant_id(s, p, "root", None, 1, far, far + HOUR).await;
    let cancelled = grant_end(s, p, &g).await;
    assert_eq!(cancelled["state"], "cancelled");
}

/// One placement segment, as stored.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Segment {
    /// Start (inclusive).
    #[diesel(sql_type = BigInt)]
    pub from_ms: i64,
    /// End (exclusive); None while open.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub to_ms: Option<i64>,
    /// `grant`, `reservation`, `ondemand` or `none`.
    #[diesel(sql_type = Text)]
    pub kind: String,
    /// Whether the instance ran.
    #[diesel(sql_type = Bool)]
    pub running: bool,
    /// The grant.
    #[diesel(sql_type = Nullable<Text>)]
    pub grant_id: Option<String>,
    /// The reservation.
    #[diesel(sql_type = Nullable<Text>)]
    pub reservation_id: Option<String>,
}

/// A segment in a grant on `reservation`.
pub fn seg_grant(
    from: i64,
    to: Option<i64>,
    running: bool,
    grant: &str,
    reservation: &str,
) -> Segment {
    Segment {
        from_ms: from,
        to_ms: to,
        kind: "grant".into(),
        running,
        grant_id: Some(grant.into()),
        reservation_id: Some(reservation.into()),
    }
}

/// A segment on an ordinary slot of `reservation`.
pub fn seg_res(from: i64, to: Option<i64>, running: bool, reservation: &str) -> Segment {
    Segment {
        from_ms: from,
        to_ms: to,
        kind: "reservation".into(),
        running,
        grant_id: None,
        reservation_id: Some(reservation.into()),
    }
}

/// A segment off any reservation (`ondemand` or `none`).
pub fn seg_off(from: i64, to: Option<i64>, kind: &str, running: bool) -> Segment {
    Segment {
        from_ms: from,
        to_ms: to,
        kind: kind.into(),
        running,
        grant_id: None,
        reservation_id: None,
    }
}

/// A connection to the server's database.
pub async fn db(s: &Server) -> AsyncPgConnection {
    AsyncPgConnection::establish(s.db.url())
        .await
        .expect("connect to the test database")
}

/// The placement segments of an instance, in time order.
pub async fn segments(s: &Server, instance: &str) -> Vec<Segment> {
    let mut conn = db(s).await;
    diesel::sql_query(
        "SELECT from_ms, to_ms, kind, running, grant_id, reservation_id \
         FROM placement_segments WHERE instance_id = $1 ORDER BY from_ms, segment_id",
    )
    .bind::<Text, _>(instance)
    .load(&mut conn)
    .await
    .expect("segments")
}

#[derive(QueryableByName)]
struct EventRow {
    #[diesel(sql_type = Text)]
    event_type: String,
    #[diesel(sql_type = Text)]
    data: String,
    #[diesel(sql_type = BigInt)]
    occurred_at: i64,
}

/// Every event of `tenant` as `(type, data, occurredAt)`, in commit order,
/// read from the database (works for a deleted tenant too).
pub async fn events_in_db(s: &Server, tenant: &str) -> Vec<(String, Value, i64)> {
    let mut conn = db(s).await;
    let rows: Vec<EventRow> = diesel::sql_query(
        "SELECT event_type, data::text AS data, occurred_at \
         FROM events WHERE tenant_id = $1 ORDER BY seq",
    )
    .bind::<Text, _>(tenant)
    .load(&mut conn)
    .await
    .expect("events");
    rows.into_iter()
        .map(|r| {
            (
                r.event_type,
                serde_json::from_str(&r.data).expect("event data is JSON"),
                r.occurred_at,
            )
        })
        .collect()
}

/// One instance row, as stored.
#[derive(Debug, Clone, QueryableByName)]
pub struct InstanceRow {
    /// Id.
    #[diesel(sql_type = Text)]
    pub instance_id: String,
    /// Owner.
    #[diesel(sql_type = Text)]
    pub tenant_id: String,
    /// State.
    #[diesel(sql_type = Text)]
    pub state: String,
    /// Placement kind.
    #[diesel(sql_type = Text)]
    pub placement_kind: String,
    /// Grant.
    #[diesel(sql_type = Nullable<Text>)]
    pub grant_id: Option<String>,
    /// Reservation.
    #[diesel(sql_type = Nullable<Text>)]
    pub reservation_id: Option<String>,
    /// Flavor.
    #[diesel(sql_type = Text)]
    pub flavor: String,
    /// Deletion instant.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub deleted_at: Option<i64>,
}

/// Every instance row (of every tenant), by id.
pub async fn instances_in_db(s: &Server) -> Vec<InstanceRow> {
    let mut conn = db(s).await;
    diesel::sql_query(
        "SELECT instance_id, tenant_id, state, placement_kind, grant_id, reservation_id, flavor, \
         deleted_at FROM instances ORDER BY instance_id",
    )
    .load(&mut conn)
    .await
    .expect("instances")
}

/// One quota row, as stored.
#[derive(Debug, Clone, QueryableByName)]
pub struct QuotaRow {
    /// Tenant.
    #[diesel(sql_type = Text)]
    pub tenant_id: String,
    /// Pool.
    #[diesel(sql_type = Text)]
    pub pool_id: String,
    /// Resource.
    #[diesel(sql_type = Text)]
    pub resource: String,
    /// Max.
    #[diesel(sql_type = BigInt)]
    pub max_value: i64,
    /// Used.
    #[diesel(sql_type = BigInt)]
    pub used: i64,
}

/// The quota rows of `tenant`, read from the database (works for a deleted
/// tenant too).
pub async fn quotas_in_db(s: &Server, tenant: &str) -> Vec<QuotaRow> {
    let mut conn = db(s).await;
    diesel::sql_query(
        "SELECT tenant_id, pool_id, resource, max_value, used FROM quotas WHERE tenant_id = $1 \
         ORDER BY pool_id, resource",
    )
    .bind::<Text, _>(tenant)
    .load(&mut conn)
    .await
    .expect("quotas")
}
