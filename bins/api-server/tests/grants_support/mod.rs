//! Helpers for the reservation-grant and provider-account end-to-end tests,
//! on top of the `common` harness and the `gce` fake.
#![allow(dead_code)]

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::common::{Answer, Server};
use crate::gce::{self, Gce, Platform};

/// One minute in milliseconds.
pub const MIN: i64 = 60_000;
/// One hour in milliseconds.
pub const HOUR: i64 = 3_600_000;
/// 2030-01-01T00:00:00Z.
pub const T0: i64 = 1_893_456_000_000;

/// A syntactically valid id with `prefix` that names nothing.
pub fn no_such(prefix: &str) -> String {
    format!("{prefix}_{}", "0".repeat(26))
}

/// `reservationGrants.create` as root.
pub async fn create(s: &Server, body: Value) -> Answer {
    s.root("reservationGrants/create", body).await
}

/// `reservationGrants.create` as root that must succeed; returns the grant.
pub async fn create_ok(s: &Server, body: Value) -> Value {
    create(s, body).await.ok()["grant"].clone()
}

/// The `grantId` of a grant object.
pub fn id_of(grant: &Value) -> String {
    grant["grantId"].as_str().expect("grantId").to_owned()
}

/// `reservationGrants.get` with `token` acting in `tenant`.
pub async fn get(s: &Server, token: &str, tenant: &str, grant: &str) -> Answer {
    s.call(
        token,
        "reservationGrants/get",
        json!({ "tenantId": tenant, "grantId": grant }),
    )
    .await
}

/// `reservationGrants.list` with `token` acting in `tenant`.
pub async fn list(s: &Server, token: &str, tenant: &str, all: Option<bool>) -> Answer {
    let mut body = json!({ "tenantId": tenant });
    if let Some(a) = all {
        body["all"] = json!(a);
    }
    s.call(token, "reservationGrants/list", body).await
}

/// The grants of `list` as a vector.
pub fn items(body: &Value) -> Vec<Value> {
    body["items"].as_array().expect("items").clone()
}

/// The ids of a list of grants, in order.
pub fn ids(grants: &[Value]) -> Vec<String> {
    grants.iter().map(id_of).collect()
}

/// `reservationGrants.end` as root.
pub async fn end(s: &Server, account: &str, grant: &str) -> Answer {
    s.root(
        "reservationGrants/end",
        json!({ "accountId": account, "grantId": grant }),
    )
    .await
}

/// Every event of `tenant`, paging with `nextCursor`.
pub async fn events(s: &Server, token: &str, tenant: &str) -> Vec<Value> {
    s.all_events(token, tenant).await
}

/// The `reservation-grant.*` event types of one grant, in order.
pub fn types_of(evs: &[Value], grant: &str) -> Vec<String> {
    evs.iter()
        .filter(|e| e["data"]["grantId"] == grant)
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect()
}

/// The events of one type.
pub fn of_type(evs: &[Value], ty: &str) -> Vec<Value> {
    evs.iter().filter(|e| e["type"] == ty).cloned().collect()
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

/// Offers `pool` to `tenant`.
pub async fn offer(s: &Server, pool: &str, tenant: &str) {
    s.root(
        "pools/offer",
        json!({ "poolId": pool, "offerTenantId": tenant, "quotas": { "instances": 10 } }),
    )
    .await
    .ok();
}

/// Puts a reservation into any zone of the fake, with any machine type.
pub async fn put_in(
    gce: &Gce,
    zone: &str,
    name: &str,
    count: i64,
    in_use: i64,
    machine: &str,
    status: &str,
) {
    let resp = reqwest::Client::new()
        .put(format!(
            "{}/fake/projects/{}/zones/{zone}/reservations/{name}",
            gce.url,
            gce::PROJECT
        ))
        .json(&json!({
            "count": count,
            "inUseCount": in_use,
            "machineType": machine,
            "status": status,
        }))
        .send()
        .await
        .expect("put");
    assert!(resp.status().is_success(), "fake put: {}", resp.status());
}

/// Removes a reservation from any zone of the fake.
pub async fn delete_in(gce: &Gce, zone: &str, name: &str) {
    let resp = reqwest::Client::new()
        .delete(format!(
            "{}/fake/projects/{}/zones/{zone}/reservations/{name}",
            gce.url,
            gce::PROJECT
        ))
        .send()
        .await
        .expect("delete");
    assert!(resp.status().is_success(), "fake delete: {}", resp.status());
}

/// The full id of a reservation in `zone`.
pub fn reservation_in(zone: &str, name: &str) -> String {
    format!("projects/{}/zones/{zone}/reservations/{name}", gce::PROJECT)
}

/// A second root account on a fake of its own, without a pool, holding one
/// scanned reservation `res-b` of `total` slots bound to `pool` (which is
/// built on another account). Returns the fake, the account and the
/// reservation id.
pub async fn second_account(s: &Server, pool: &str, total: i64) -> (Gce, String, String) {
    let fake = Gce::start().await;
    fake.put("res-b", total, 0, "READY").await;
    let account = gce::account(s, &fake).await;
    gce::scan(s, &account).await;
    let reservation = Gce::reservation_id("res-b");
    bind(s, &account, &reservation, pool).await.ok();
    (fake, account, reservation)
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

/// `providerAccounts.listReservations` as root.
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

/// A grant body on `p` for `tenant`.
pub fn body_for(
    p: &Platform,
    tenant: &str,
    slots: i64,
    starts: i64,
    ends: i64,
    key: &str,
) -> Value {
    let mut b = gce::grant_body(p, slots, starts, ends, key);
    b["grantTenantId"] = json!(tenant);
    b
}

/// The set of strings in a JSON array.
pub fn string_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_str().expect("string").to_owned())
        .collect()
}

/// The keys of a JSON object.
pub fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

/// A set of string literals.
pub fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}
