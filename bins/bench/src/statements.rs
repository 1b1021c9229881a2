//! The direct SQL ceilings send what the storage layer sends. Each test sets
//! up a small benchmark world (`setup::platform`, one instance target per
//! side, through an in-process api-server on a test database), runs a
//! storage function and its replay on two connections that record every
//! statement (diesel's connection instrumentation), and compares the two
//! sequences statement by statement: SQL text, bind values left out,
//! `BEGIN` and `COMMIT` included. There is no deliberate difference: a
//! statement storage gains, loses or changes fails the test until the
//! replay (`direct.rs`, `reads.rs`) does the same.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use diesel::connection::InstrumentationEvent;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use storage::test_db::TestDatabase;

use crate::direct::{Direct, GrantCtx, InstanceCtx};
use crate::load::Op;
use crate::procs::ROOT_TOKEN;
use crate::reads::ReadSql;
use crate::setup::{self, Api, Platform, TENANT};

const ROOT: &str = "root";

/// Operations per side: the first meets an empty hot reservation (no open
/// grant, so settlement reads no instances), the second the grant the first
/// created, and an instance target with one more instance seated.
const OPS: u64 = 2;

/// The statements one connection sent, in order.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, sql: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sql);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A statement as diesel shows it (`SQL -- binds: [...]`) without its binds.
fn normalized(shown: &str) -> String {
    shown
        .split_once(" -- binds: ")
        .map_or(shown, |(sql, _)| sql)
        .trim()
        .to_owned()
}

/// A new connection to `url` whose statements go to the returned log.
async fn recorded(url: &str) -> (AsyncPgConnection, Log) {
    let mut conn = storage::db::establish(url)
        .await
        .expect("connect to the test database");
    let log = Log::default();
    let sink = log.clone();
    conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::StartQuery { query, .. } = event {
            sink.push(normalized(&query.to_string()));
        }
    });
    (conn, log)
}

/// Fails, listing both sequences, unless they are equal.
#[track_caller]
fn assert_same(what: &str, storage: &[String], replay: &[String]) {
    assert!(
        !storage.is_empty(),
        "{what}: nothing recorded on the storage side"
    );
    if storage == replay {
        return;
    }
    let n = storage.len().max(replay.len());
    let first = (0..n)
        .find(|&i| storage.get(i) != replay.get(i))
        .unwrap_or(n);
    let list = |side: &[String]| {
        side.iter()
            .enumerate()
            .map(|(i, s)| format!("  {i:>3} {s}\n"))
            .collect::<String>()
    };
    panic!(
        "{what}: the replay does not send what storage sends; first difference at statement \
         {first}:\n  storage: {:?}\n  replay:  {:?}\nstorage ({} statements):\n{}replay ({} \
         statements):\n{}",
        storage.get(first),
        replay.get(first),
        storage.len(),
        list(storage),
        replay.len(),
        list(replay),
    );
}

/// A benchmark world on a database of its own, served by an api-server in
/// this process while it lives.
struct World {
    p: Platform,
    db: TestDatabase,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl World {
    async fn new() -> World {
        let db = TestDatabase::new().await;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut config = api_server::Config::from_env().expect("api-server configuration");
        config.database_url = db.url().to_owned();
        config.listen = addr.clone();
        config.root_tenant = storage::ids::TenantId::parse(ROOT).expect("a tenant id");
        config.clock = storage::Clock::Manual;
        config.bootstrap_token = Some(ROOT_TOKEN.to_owned());
        config.pool_size = 4;
        let mut server = tokio::spawn(api_server::run(config));
        let mut waited = Duration::ZERO;
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            if server.is_finished() {
                let end = (&mut server).await;
                panic!("the api-server stopped before listening: {end:?}");
            }
            assert!(
                waited < Duration::from_secs(60),
                "the api-server is not listening"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += Duration::from_millis(20);
        }
        let mut conn = storage::db::establish(db.url())
            .await
            .expect("connect to the test database");
        let now = storage::Clock::Manual
            .now(&mut conn)
            .await
            .expect("the manual clock");
        let api = Api::new(&format!("http://{addr}"));
        let p = setup::platform(&api, now, 1)
            .await
            .expect("the benchmark's setup");
        World { p, db, server }
    }

    /// What `OPS` operations of `op` sent on a recorded connection.
    async fn run<W: Op>(&self, make: impl FnOnce(AsyncPgConnection) -> W) -> Vec<String> {
        let (conn, log) = recorded(self.db.url()).await;
        let mut op = make(conn);
        for i in 0..OPS {
            op.run(i).await.expect("operation");
        }
        log.take()
    }

    /// What `OPS` operations through the storage call and `OPS` as their
    /// replay sent, each side on its own operations (`ctx` of its tag), are
    /// the same statements.
    async fn assert_replayed<C>(&self, method: &str, ctx: impl Fn(&'static str) -> C)
    where
        Direct<C, false>: Op,
        Direct<C, true>: Op,
    {
        let storage = self.run(Direct::<C, false>::on(ctx("storage"))).await;
        let replay = self.run(Direct::<C, true>::on(ctx("sql"))).await;
        assert_same(method, &storage, &replay);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_sql_sends_what_storage_grants_create_sends() {
    let w = World::new().await;
    let ctx = |tag| GrantCtx::new(tag, &w.p, &w.p.hot[tag]);
    w.assert_replayed("reservationGrants.create", ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_sql_sends_what_storage_instances_create_sends() {
    let w = World::new().await;
    w.assert_replayed("instances.create", |tag| InstanceCtx::new(tag, &w.p))
        .await;
}

/// What the API runs for one `get` of `grant_id` (or one `list`) with
/// `token`: `tenancy::authenticate`, the manual clock, the storage call.
async fn api_read(conn: &mut AsyncPgConnection, token: &str, grant_id: &str, list: bool) {
    fn fail<T>(what: &'static str) -> impl FnOnce(storage::error::StorageError) -> T {
        move |e| panic!("{what}: {e}")
    }
    let caller = storage::ops::tenancy::authenticate(conn, token)
        .await
        .unwrap_or_else(fail("authenticate"));
    assert!(caller.is_some(), "the tenant's key authenticates");
    let now = storage::Clock::Manual
        .now(conn)
        .await
        .unwrap_or_else(fail("the manual clock"));
    if list {
        let filter = crate::reads::of_tenant();
        storage::ops::grants::list(conn, &filter, None, storage::LIST_LIMIT, now)
            .await
            .unwrap_or_else(fail("grants::list"));
    } else {
        let tenant = |t: &str| {
            storage::ids::TenantId::parse(t).unwrap_or_else(|e| panic!("a tenant id: {e}"))
        };
        let actor = storage::Actor::new(tenant(TENANT), tenant(ROOT));
        let id =
            storage::ids::GrantId::parse(grant_id).unwrap_or_else(|e| panic!("a grant id: {e}"));
        storage::ops::grants::get(conn, &actor, &id, now)
            .await
            .unwrap_or_else(fail("grants::get"));
    }
}

/// `ReadSql` with `full` against what the API runs for one `get` or `list`:
/// `tenancy::authenticate`, the manual clock, then the storage call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_sql_sends_what_the_api_reads_send() {
    let w = World::new().await;
    let grant_id = w.p.inst["sql"][0].grant_id.clone();
    for list in [false, true] {
        let (mut conn, log) = recorded(w.db.url()).await;
        api_read(&mut conn, &w.p.tenant_token, &grant_id, list).await;
        let api = log.take();
        let replay = w
            .run(|conn| ReadSql {
                conn,
                secret: w.p.tenant_token.as_str().into(),
                ids: Arc::new(vec![grant_id.clone()]),
                list,
                full: true,
            })
            .await;
        // `run` runs `OPS` requests; the API's sequence is one request's.
        let api = vec![api; OPS as usize].concat();
        let what = if list {
            "reservationGrants.list"
        } else {
            "reservationGrants.get"
        };
        assert_same(what, &api, &replay);
    }
}

/// The statements of `log` that `conn` does not keep prepared (named, in
/// `pg_prepared_statements`): each was prepared again, unnamed, on every
/// call, which costs a round trip of its own and stalls what is pipelined
/// behind it (`storage::db::cached`). Transaction control is left out.
async fn not_kept(conn: &mut AsyncPgConnection, log: &[String]) -> Vec<String> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Prepared {
        #[diesel(sql_type = diesel::sql_types::Text)]
        statement: String,
    }
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let kept: std::collections::HashSet<String> =
        diesel::sql_query("SELECT statement FROM pg_prepared_statements")
            .load::<Prepared>(conn)
            .await
            .expect("pg_prepared_statements")
            .into_iter()
            .map(|p| squash(&p.statement))
            .collect();
    let mut missing: Vec<String> = log
        .iter()
        .map(|s| squash(s))
        .filter(|s| !matches!(s.as_str(), "BEGIN" | "COMMIT" | "ROLLBACK"))
        .filter(|s| !kept.contains(s))
        .collect();
    missing.dedup();
    missing
}

/// Fails, naming `what`, when a statement of `log` (taken) is not kept
/// prepared on `conn`.
async fn assert_kept(conn: &mut AsyncPgConnection, log: &Log, what: &str) {
    let missing = not_kept(conn, &log.take()).await;
    assert!(
        missing.is_empty(),
        "{what}: prepared on every call: {missing:#?}"
    );
}

/// Every statement the two hot creates and the two reads send is kept
/// prepared on its connection after the first call, so a later call sends
/// each once (Bind, Execute) and a pipelined batch goes in one round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_paths_keep_every_statement_prepared() {
    let w = World::new().await;
    let grants = |conn| {
        let ctx = GrantCtx::new("storage", &w.p, &w.p.hot["storage"]);
        Direct::<GrantCtx, false>::on(ctx)(conn)
    };
    let instances =
        |conn| Direct::<InstanceCtx, false>::on(InstanceCtx::new("storage", &w.p))(conn);
    let (conn, log) = recorded(w.db.url()).await;
    let mut op = grants(conn);
    for i in 0..OPS {
        op.run(i).await.expect("reservationGrants.create");
    }
    let mut conn = op.conn;
    assert_kept(&mut conn, &log, "reservationGrants.create").await;
    let mut op = instances(conn);
    for i in 0..OPS {
        op.run(i).await.expect("instances.create");
    }
    let mut conn = op.conn;
    assert_kept(&mut conn, &log, "instances.create").await;
    // The reads' statements: authentication, the manual clock, get, list.
    let grant_id = w.p.inst["sql"][0].grant_id.clone();
    for _ in 0..OPS {
        for list in [false, true] {
            api_read(&mut conn, &w.p.tenant_token, &grant_id, list).await;
        }
    }
    assert_kept(&mut conn, &log, "reservationGrants.get and list").await;
}
