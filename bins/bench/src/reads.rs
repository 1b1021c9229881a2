//! Figure 3's decomposition: the statements a read request issues, run
//! directly (with and without the authentication and clock reads that
//! precede the handler's query), and where a 1000-item list's time goes in
//! the server (the storage call, then the JSON encoding as the server does
//! it and as it could do it). The test module `statements` checks that
//! `ReadSql` sends what `tenancy::authenticate`, the manual clock and
//! `grants::get` / `grants::list` send.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::AsyncPgConnection;
use storage::Clock;
use storage::LIST_LIMIT;
use storage::model::grant::{GrantFilter, GrantRow};
use storage::ops::tenancy;

use crate::load::Op;
use crate::setup::TENANT;

/// A read request's statements on a connection of their own.
pub struct ReadSql {
    /// Its connection.
    pub conn: AsyncPgConnection,
    /// The API key the request carries.
    pub secret: Arc<str>,
    /// Grant ids to get (round robin).
    pub ids: Arc<Vec<String>>,
    /// `list` (else `get`).
    pub list: bool,
    /// With `tenancy::authenticate` and the manual clock read first, as the
    /// API does (else the handler's query alone).
    pub full: bool,
}

impl Op for ReadSql {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let conn = &mut self.conn;
        let sql = |e: storage::StorageError| anyhow::anyhow!("{e}");
        if self.full {
            // the key and the clock, pipelined as the API sends them
            let shared: &diesel_async::AsyncPgConnection = conn;
            let (key, _now) = futures::try_join!(
                tenancy::authenticate(shared, &self.secret),
                Clock::Manual.now_shared(shared)
            )
            .map_err(sql)?;
            anyhow::ensure!(key.is_some(), "unknown key");
        }
        if self.list {
            // grants::list (its default page: the tenant's newest, one more
            // than the limit to learn whether more follow)
            let rows = GrantRow::page(conn, &of_tenant(), None, LIST_LIMIT + 1, 0)
                .await
                .map_err(sql)?;
            black_box(rows);
        } else {
            // grants::get
            let id = crate::load::round_robin(&self.ids, i)
                .ok_or_else(|| anyhow::anyhow!("no grant to read"))?;
            let row = GrantRow::find(conn, id).await.map_err(sql)?;
            anyhow::ensure!(row.is_some(), "grant {id} not found");
        }
        Ok(())
    }
}

/// The filter of a plain `reservationGrants.list` of the bench's tenant.
pub fn of_tenant() -> GrantFilter {
    GrantFilter {
        tenant_id: Some(TENANT.to_owned()),
        ..GrantFilter::default()
    }
}

/// Where one 1000-item list answer's time goes in the server, one request
/// at a time on an idle server.
#[derive(Debug, Clone)]
pub struct ListCost {
    /// `storage::ops::grants::list` (SQL, decoding, `Grant::at`).
    pub storage: Duration,
    /// `serde_json::to_value` then `Value::to_string` (how answers were built
    /// before the typed views).
    pub via_value: Duration,
    /// `serde_json::to_vec` of the typed grants.
    pub direct: Duration,
    /// Size of the answer.
    pub bytes: usize,
}

/// Measures [`ListCost`] on `conn` at the manual clock's `now`.
pub async fn list_cost(conn: &mut AsyncPgConnection, now: i64) -> anyhow::Result<ListCost> {
    const CALLS: u32 = 20;
    const ENCODES: u32 = 50;
    let mut grants = Vec::new();
    let start = Instant::now();
    for _ in 0..CALLS {
        grants = storage::ops::grants::list(conn, &of_tenant(), None, LIST_LIMIT, now)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .items;
    }
    let storage = start.elapsed() / CALLS;

    // The server's views of the grants, as `reservationGrants.list` answers.
    let grants = api_server::wire::Items::<api_server::wire::Grant>::of(grants);
    let mut bytes = 0;
    let start = Instant::now();
    for _ in 0..ENCODES {
        let v = serde_json::to_value(&grants)?;
        bytes = black_box(v.to_string()).len();
    }
    let via_value = start.elapsed() / ENCODES;

    let start = Instant::now();
    for _ in 0..ENCODES {
        let mut out = Vec::with_capacity(bytes + 64);
        serde_json::to_writer(&mut out, &grants)?;
        black_box(out);
    }
    let direct = start.elapsed() / ENCODES;
    Ok(ListCost {
        storage,
        via_value,
        direct,
        bytes,
    })
}
