//! Log cursors reveal nothing beyond the reader's own items (contract 1.6):
//! a tenant's cursor stays the same while other tenants get records and
//! events, carries no platform-wide sequence number in clear, and opens for
//! its reader only.

use serde_json::{Value, json};

use crate::support::builders::GrantBuilder;
use crate::support::clock::{HOUR, T0};
use crate::support::fixtures::{platform_at_t0, tenant_with_pool};
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

async fn page(s: &Server, token: &str, path: &str, body: Value) -> Value {
    s.call(token, path, body).await.ok()
}

/// acme's log at `path` read again from the start ends at `before`, and
/// polling from `before` finds nothing and hands `before` back.
async fn unmoved(s: &Server, token: &str, path: &str, before: &str) {
    let again = page(s, token, path, json!({ "tenantId": "acme" })).await;
    assert_eq!(again["nextCursor"], before, "{again}");
    let poll = page(
        s,
        token,
        path,
        json!({ "tenantId": "acme", "after": before }),
    )
    .await;
    assert_eq!(poll["items"], json!([]));
    assert_eq!(poll["nextCursor"], before);
}

/// The platform-wide sequence number of a usage record, read directly.
async fn seq_of(s: &Server, usage_id: &str) -> i64 {
    use diesel::sql_types::{BigInt, Text};
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Seq {
        #[diesel(sql_type = BigInt)]
        seq: i64,
    }
    let mut conn = crate::support::db::db(s).await;
    let row: Seq = diesel::sql_query("SELECT seq FROM usage_records WHERE usage_id = $1")
        .bind::<Text, _>(usage_id)
        .get_result(&mut conn)
        .await
        .expect("seq");
    row.seq
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_usage_cursor_does_not_move_with_other_tenants_records() {
    let (s, p) = platform_at_t0(8).await;
    let beta = tenant_with_pool(&s, "beta", &p.pool).await;
    // acme's grant ends at T0 + 2 h; beta's goes on, so only beta gets
    // records after that.
    GrantBuilder::new(&p)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .grantee("beta")
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[]).await;

    let first = page(
        &s,
        &p.tenant_token,
        "usage/list",
        json!({ "tenantId": "acme" }),
    )
    .await;
    let items = first["items"].as_array().expect("items").clone();
    assert_eq!(items.len(), 2, "{first}");
    let before = first["nextCursor"].as_str().expect("cursor").to_owned();

    // No platform-wide position in clear: the cursor is not the last
    // record's sequence number in any base the old cursors used.
    let seq = seq_of(&s, items[1]["usageId"].as_str().expect("id")).await;
    let clear = data_encoding::BASE32HEX_NOPAD
        .encode(&seq.to_be_bytes())
        .to_ascii_lowercase();
    assert!(!before.contains(&clear), "{before} carries {seq} in clear");
    assert!(!before.contains(&seq.to_string()) || seq < 10, "{before}");

    // beta gets records; acme's position is what it was.
    s.set_clock(T0 + 6 * HOUR).await;
    worker::once(&s, &[]).await;
    let beta_records = s
        .list_all(&beta, "usage/list", json!({ "tenantId": "beta" }))
        .await;
    assert_eq!(beta_records.len(), 6);
    unmoved(&s, &p.tenant_token, "usage/list", &before).await;

    // A cursor opens for its reader only: not for beta, not for root's
    // listing of every tenant.
    let other = s
        .call(
            &beta,
            "usage/list",
            json!({ "tenantId": "beta", "after": before }),
        )
        .await;
    let d = other.err(400, "INVALID_INPUT");
    assert_eq!(d["field"], "after");
    let all = s
        .call(
            ROOT_TOKEN,
            "usage/list",
            json!({ "tenantId": "root", "all": true, "after": before }),
        )
        .await;
    all.err(400, "INVALID_INPUT");
    // Root's own listing pages with cursors of its own.
    let root_all = s
        .list_all(
            ROOT_TOKEN,
            "usage/list",
            json!({ "tenantId": "root", "all": true }),
        )
        .await;
    assert_eq!(root_all.len(), 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_event_cursor_does_not_move_with_other_tenants_events() {
    let (s, p) = platform_at_t0(8).await;
    let beta = tenant_with_pool(&s, "beta", &p.pool).await;
    GrantBuilder::new(&p)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    let first = page(
        &s,
        &p.tenant_token,
        "events/list",
        json!({ "tenantId": "acme" }),
    )
    .await;
    let before = first["nextCursor"].as_str().expect("cursor").to_owned();
    assert!(!first["items"].as_array().expect("items").is_empty());

    // beta gets grants and quota changes: events in its log only.
    for i in 0..5 {
        GrantBuilder::new(&p)
            .grantee("beta")
            .term(T0 + i * HOUR, T0 + (i + 1) * HOUR)
            .create(&s)
            .await;
    }
    assert!(s.events(&beta, "beta").await.len() >= 5);
    unmoved(&s, &p.tenant_token, "events/list", &before).await;
}
