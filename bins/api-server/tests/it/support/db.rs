//! Rows the API does not show (placement segments, and rows of deleted
//! tenants), read straight from the server's database, and row locks held
//! as another transaction would.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

use super::server::Server;

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
    storage::db::establish(s.db.url())
        .await
        .expect("connect to the test database")
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// How many VM steps are open.
pub async fn open_steps(s: &Server) -> i64 {
    let mut conn = db(s).await;
    let c: Count = diesel::sql_query("SELECT count(*) AS n FROM vm_steps WHERE state = 'open'")
        .get_result(&mut conn)
        .await
        .expect("count");
    c.n
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
    /// Deletion instant.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub deleted_at: Option<i64>,
}

/// Every instance row (of every tenant), by id.
pub async fn instances_in_db(s: &Server) -> Vec<InstanceRow> {
    let mut conn = db(s).await;
    diesel::sql_query(
        "SELECT instance_id, tenant_id, state, placement_kind, grant_id, reservation_id, \
         deleted_at FROM instances ORDER BY instance_id",
    )
    .load(&mut conn)
    .await
    .expect("instances")
}

/// One quota row, as stored.
#[derive(Debug, Clone, QueryableByName)]
#[expect(
    dead_code,
    reason = "the tests check `used`; the rest names the row when one fails"
)]
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

/// Holds a reservation's row lock in a transaction of its own, as another
/// replica or request settling it would, until the returned connection runs
/// `ROLLBACK` (or is dropped).
pub async fn hold_reservation(s: &Server, account: &str, reservation: &str) -> AsyncPgConnection {
    let mut holder = db(s).await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    diesel::sql_query(
        "SELECT 1 FROM reservations WHERE account_id = $1 AND reservation_id = $2 FOR UPDATE",
    )
    .bind::<Text, _>(account)
    .bind::<Text, _>(reservation)
    .execute(&mut holder)
    .await
    .expect("lock");
    holder
}

#[derive(QueryableByName)]
struct TableName {
    #[diesel(sql_type = Text)]
    name: String,
}

#[derive(QueryableByName)]
struct TableDigest {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = Text)]
    digest: String,
}

/// Every table of the server's database with its row count and a digest of
/// its rows: two reads are equal exactly when nothing was written between
/// them.
pub async fn contents(s: &Server) -> std::collections::BTreeMap<String, (i64, String)> {
    let mut conn = db(s).await;
    let tables: Vec<TableName> = diesel::sql_query(
        "SELECT table_name::text AS name FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .load(&mut conn)
    .await
    .expect("tables");
    let mut out = std::collections::BTreeMap::new();
    for t in tables {
        let d: TableDigest = diesel::sql_query(format!(
            "SELECT count(*) AS rows, \
               coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') AS digest \
             FROM \"{}\" t",
            t.name
        ))
        .get_result(&mut conn)
        .await
        .expect("digest");
        out.insert(t.name, (d.rows, d.digest));
    }
    out
}

/// The root tenant's id, typed as storage's operations take it.
pub fn root_id() -> storage::ids::TenantId {
    storage::ids::TenantId::parse("root").expect("a tenant id")
}

/// The server's installation id (contract 3.12 r4): the `bc-installation`
/// label of the VMs it makes.
pub async fn installation(s: &Server) -> String {
    let mut conn = db(s).await;
    storage::ops::installation::id(&mut conn)
        .await
        .expect("the installation id")
}

#[derive(QueryableByName)]
struct InstallationId {
    #[diesel(sql_type = Text)]
    id: String,
}

/// Gives the server's database an installation id of its own, as the
/// migration makes one for every new database (the test databases are
/// copies of one template, so they share the template's); answers it.
pub async fn new_installation(s: &Server) -> String {
    let mut conn = db(s).await;
    let row: InstallationId = diesel::sql_query(
        "UPDATE installation SET id = replace(gen_random_uuid()::text, '-', '') RETURNING id",
    )
    .get_result(&mut conn)
    .await
    .expect("a new installation id");
    row.id
}
