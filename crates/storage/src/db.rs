//! Connections (libpq's `sslmode` and `sslrootcert` over rustls), the pool
//! and migrations; behind a transaction pooler with
//! `BC_DB_PREPARED_STATEMENTS=off` (`pooler`).

use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncMigrationHarness, AsyncPgConnection, RunQueryDsl,
    TransactionManager,
};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

mod cached;
mod pooler;
mod tls;

pub use cached::{Cached, cached, cached_sql};
pub use pooler::{
    PreparedStatements, prepared_statements, read_only, set_prepared_statements, single_write,
    statements_outside_transactions,
};
pub use tls::{check, describe, establish, with_database};

/// The migrations of `migrations/`, embedded at build time.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// Transaction-level advisory lock key held while migrations run, so several
/// processes starting at once apply them one at a time.
const MIGRATION_LOCK: i64 = 0x6263_6d69_6772_6174; // "bcmigrat"

/// A pooled connection.
pub type Conn = Object<AsyncPgConnection>;

/// The connection pool.
pub type DbPool = Pool<AsyncPgConnection>;

/// Builds a pool of at most `max_size` connections to `url`, each opened by
/// [`establish`]. The URL's errors (a bad `sslmode`, an unreadable
/// `sslrootcert`) are reported here, before any connection is tried.
pub fn pool(url: &str, max_size: usize) -> anyhow::Result<DbPool> {
    check(url)?;
    tracing::info!(settings = %describe(url)?, "database connections");
    let mut config = ManagerConfig::<AsyncPgConnection>::default();
    config.custom_setup = Box::new(|url| Box::pin(establish_pooled(url)));
    // No round trip on a checkout (the default sends `SELECT 1` every
    // time): a connection whose session ended (a restart, a failover, a
    // terminated backend) is already known closed and is replaced, as is
    // one left in a broken transaction state. A half-open socket is found
    // by its first statement, as it would have been by the `SELECT 1`.
    config.recycling_method = RecyclingMethod::Fast;
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
    Ok(Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(std::time::Duration::from_secs(10)))
        .runtime(deadpool::Runtime::Tokio1)
        .build()?)
}

/// A pooled connection: [`establish`], and in `off` mode the check that no
/// statement leaves a transaction (`pooler::PoolerCheck`).
async fn establish_pooled(url: &str) -> diesel::ConnectionResult<AsyncPgConnection> {
    let mut conn = establish(url).await?;
    if pooler::pinned() {
        conn.set_instrumentation(pooler::PoolerCheck::new());
    }
    Ok(conn)
}

/// Applies pending migrations on a dedicated connection, in one transaction
/// under a transaction-level advisory lock (each migration's own
/// transaction is a savepoint in it): several processes starting at once
/// apply them one at a time, through a transaction pooler too, and a failed
/// migration leaves none applied. Returns the versions applied by this call.
pub async fn migrate(url: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = establish_pooled(url).await?;
    AnsiTransactionManager::begin_transaction(&mut conn).await?;
    log_session_tls(&mut conn, url).await;
    diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
        .bind::<BigInt, _>(MIGRATION_LOCK)
        .execute(&mut conn)
        .await?;
    // The harness blocks in place: this needs the multi-threaded runtime.
    let mut harness = AsyncMigrationHarness::new(conn);
    let applied: Result<Vec<String>, String> = harness
        .run_pending_migrations(MIGRATIONS)
        .map(|v| v.iter().map(ToString::to_string).collect())
        .map_err(|e| e.to_string());
    let mut conn = harness.into_inner();
    match applied {
        Ok(applied) => {
            AnsiTransactionManager::commit_transaction(&mut conn).await?;
            Ok(applied)
        }
        Err(e) => {
            let _ = AnsiTransactionManager::rollback_transaction(&mut conn).await;
            Err(anyhow::anyhow!("migrations failed: {e}"))
        }
    }
}

/// Logs whether the session runs over TLS, as the server sees it.
async fn log_session_tls(conn: &mut AsyncPgConnection, url: &str) {
    #[derive(diesel::QueryableByName)]
    struct Session {
        #[diesel(sql_type = Bool)]
        ssl: bool,
        #[diesel(sql_type = Text)]
        version: String,
    }
    let settings = describe(url).unwrap_or_default();
    match diesel::sql_query(
        "SELECT ssl, coalesce(version, '') AS version FROM pg_stat_ssl \
         WHERE pid = pg_backend_pid()",
    )
    .get_result::<Session>(conn)
    .await
    {
        Ok(s) => tracing::info!(
            tls = s.ssl,
            tls_version = %s.version,
            settings = %settings,
            "connected to the database"
        ),
        Err(e) => tracing::info!(
            settings = %settings,
            error = %e,
            "connected to the database (its TLS state is not readable)"
        ),
    }
}

/// True when the database answers and has no pending migration.
pub async fn ready(pool: &DbPool) -> bool {
    let Ok(mut conn) = pool.get().await else {
        return false;
    };
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let expected = i64::try_from(
        diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
            .map(|m| m.len())
            .unwrap_or(usize::MAX),
    )
    .unwrap_or(i64::MAX);
    let count = read_only(&mut conn, async |conn| {
        diesel::sql_query("SELECT count(*) AS n FROM __diesel_schema_migrations")
            .get_result::<Count>(conn)
            .await
    })
    .await;
    match count {
        Ok(c) => c.n >= expected,
        Err(_) => false,
    }
}

/// Makes the statements of the current transaction use generic plans
/// (`SET LOCAL plan_cache_mode = force_generic_plan`), on a shared connection
/// so that it goes in the same round trip as the transaction's first
/// statement. For `reservationGrants.create`, whose statements are all key
/// lookups (`instances.create` keeps the default plans: generic ones made a
/// one-tenant burst slower, docs/benchmarks.md): a cached statement is then
/// planned once per connection instead of on every execution, and cannot be
/// given a custom plan that a parameter's estimate makes worse (the
/// settlement read of a reservation's started grants was planned on the
/// platform-wide `grants_open_starts_idx`, reading every started grant, and
/// planning it cost more than running it).
pub async fn generic_plans(conn: &AsyncPgConnection) -> diesel::QueryResult<()> {
    use diesel_async::RunQueryDsl;
    let mut conn = conn;
    cached(diesel::sql_query(
        "SET LOCAL plan_cache_mode = force_generic_plan",
    ))
    .execute(&mut conn)
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `url` with its database name replaced by `name` (no query string).
    fn on_database(url: &str, name: &str) -> String {
        let base = url.split('?').next().unwrap_or(url);
        let scheme_end = base.find("://").map_or(0, |i| i + 3);
        let path = base[scheme_end..]
            .find('/')
            .map_or(base.len(), |i| scheme_end + i);
        format!("{}/{name}", &base[..path])
    }

    /// Several processes starting at once on a fresh database: the
    /// migrations are applied once, by one of them, and the others find
    /// nothing pending. Through the pooler of `BC_TEST_POOLER_URL` when set
    /// (the lock is transaction-level, so a transaction pooler keeps it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_migrations_apply_once() {
        let server = std::env::var("DATABASE_URL").expect("DATABASE_URL (run with `just test`)");
        let name = format!("bc_migrate_{}", &crate::ids::new_secret()[4..20]);
        let mut admin = establish(&server).await.expect("connect");
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create database");
        let through = std::env::var("BC_TEST_POOLER_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| server.clone());
        let url = on_database(&through, &name);
        let runs: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { migrate(&url).await })
            })
            .collect();
        let mut applied = Vec::new();
        for run in runs {
            applied.push(run.await.expect("join").expect("migrate").len());
        }
        let total = diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
            .expect("migrations")
            .len();
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let mut conn = establish(&on_database(&server, &name))
            .await
            .expect("connect");
        let recorded = diesel::sql_query("SELECT count(*) AS n FROM __diesel_schema_migrations")
            .get_result::<Count>(&mut conn)
            .await
            .expect("count")
            .n;
        drop(conn);
        diesel::sql_query(format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .expect("drop database");
        applied.sort_unstable();
        assert_eq!(
            applied,
            vec![0, 0, 0, total],
            "one run applies every migration"
        );
        assert_eq!(recorded, i64::try_from(total).expect("count"));
    }
}
