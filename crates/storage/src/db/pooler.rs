//! Running behind a transaction-pooling PgBouncer
//! (`BC_DB_PREPARED_STATEMENTS=off`; `docs/decisions.md`, "PgBouncer
//! (transaction pooling)").
//!
//! diesel-async prepares a named statement for every query (Parse, Describe,
//! Sync) and then binds and executes it (Bind, Execute, Sync). A pooler in
//! transaction mode hands the server connection back at every idle
//! `ReadyForQuery`, so a statement prepared outside a transaction may be
//! executed on another server than it was prepared on, and a cached
//! statement is missing on the next one. With the setting `off`, the
//! statement cache is disabled (each statement is closed before the next
//! one) and no statement is sent outside an explicit transaction: the reads
//! and the single-statement writes that run outside one are wrapped by
//! [`read_only`] and [`single_write`], which do nothing more in the default
//! mode. [`PoolerCheck`] finds a statement sent outside a transaction.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use diesel::connection::{Instrumentation, InstrumentationEvent};
use diesel::{ConnectionError, ConnectionResult};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncPgConnection, TransactionManager,
};

use super::tls::with_causes;

/// `BC_DB_PREPARED_STATEMENTS`: whether statements may be cached on the
/// connection and sent outside a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreparedStatements {
    /// `on` (default): a direct PostgreSQL, or a pooler in session mode.
    #[default]
    On,
    /// `off`: a pooler in transaction mode (PgBouncer before 1.21).
    Off,
}

impl PreparedStatements {
    /// Reads `BC_DB_PREPARED_STATEMENTS` (`on` or `off`; unset or empty is
    /// `on`).
    pub fn from_env() -> anyhow::Result<PreparedStatements> {
        match std::env::var("BC_DB_PREPARED_STATEMENTS") {
            Ok(v) => PreparedStatements::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(PreparedStatements::On),
            Err(std::env::VarError::NotUnicode(_)) => {
                anyhow::bail!("BC_DB_PREPARED_STATEMENTS must be on or off")
            }
        }
    }

    /// Parses `on` or `off` (empty is `on`).
    pub fn parse(value: &str) -> anyhow::Result<PreparedStatements> {
        match value {
            "" | "on" => Ok(PreparedStatements::On),
            "off" => Ok(PreparedStatements::Off),
            other => anyhow::bail!(
                "BC_DB_PREPARED_STATEMENTS must be on or off, not {other:?} (off behind a \
                 pooler in transaction mode)"
            ),
        }
    }
}

static MODE: OnceLock<PreparedStatements> = OnceLock::new();

/// Sets the process's mode, before the first connection (the binaries, from
/// their configuration). Without it, the first use reads the environment
/// (`on` when it cannot be read).
pub fn set_prepared_statements(mode: PreparedStatements) {
    if MODE.set(mode).is_err() && mode != prepared_statements() {
        tracing::warn!(?mode, "BC_DB_PREPARED_STATEMENTS was already set otherwise");
    }
}

/// The process's mode.
pub fn prepared_statements() -> PreparedStatements {
    *MODE.get_or_init(|| PreparedStatements::from_env().unwrap_or_default())
}

/// True when statements must not leave a transaction (the mode is `off`).
pub(crate) fn pinned() -> bool {
    prepared_statements() == PreparedStatements::Off
}

/// Runs `f` in a read-only transaction when the mode is `off` and `conn` is
/// not in one already; otherwise runs it as it is (no extra round trip).
pub async fn read_only<R, E>(
    conn: &mut AsyncPgConnection,
    f: impl AsyncFnOnce(&mut AsyncPgConnection) -> Result<R, E>,
) -> Result<R, E>
where
    E: From<diesel::result::Error>,
{
    wrapped(conn, "BEGIN READ ONLY", f).await
}

/// [`read_only`] for a statement that writes (the audit record's insert):
/// a read-write transaction when the mode is `off`.
pub async fn single_write<R, E>(
    conn: &mut AsyncPgConnection,
    f: impl AsyncFnOnce(&mut AsyncPgConnection) -> Result<R, E>,
) -> Result<R, E>
where
    E: From<diesel::result::Error>,
{
    wrapped(conn, "BEGIN", f).await
}

async fn wrapped<R, E>(
    conn: &mut AsyncPgConnection,
    begin: &str,
    f: impl AsyncFnOnce(&mut AsyncPgConnection) -> Result<R, E>,
) -> Result<R, E>
where
    E: From<diesel::result::Error>,
{
    let in_transaction = AnsiTransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()
        .map_err(E::from)?
        .is_some();
    if !pinned() || in_transaction {
        return f(conn).await;
    }
    AnsiTransactionManager::begin_transaction_sql(conn, begin).await?;
    match f(conn).await {
        Ok(value) => {
            AnsiTransactionManager::commit_transaction(conn).await?;
            Ok(value)
        }
        Err(e) => {
            // A failed rollback leaves the transaction manager broken: the
            // pool then drops the connection.
            let _ = AnsiTransactionManager::rollback_transaction(conn).await;
            Err(e)
        }
    }
}

/// The statements sent with the simple protocol outside a transaction, on
/// purpose: the transaction manager's (the pool sends none: `db::pool`).
const SIMPLE: &[&str] = &["BEGIN", "COMMIT", "ROLLBACK"];

/// Statements found outside a transaction by [`PoolerCheck`] in this process.
static OUTSIDE: AtomicU64 = AtomicU64::new(0);

/// How many statements `PoolerCheck` found outside a transaction.
pub fn statements_outside_transactions() -> u64 {
    OUTSIDE.load(Ordering::Relaxed)
}

/// Installed on every pooled connection in `off` mode: a statement started
/// outside a transaction is logged as an error and counted; with
/// `BC_DB_CHECK_POOLER=1` (tests, CI) the process aborts, so that a test
/// run through a pooler fails on it even where the pooler happened to keep
/// the server.
#[derive(Debug, Default)]
pub(crate) struct PoolerCheck {
    depth: u32,
    strict: bool,
}

impl PoolerCheck {
    pub(crate) fn new() -> PoolerCheck {
        PoolerCheck {
            depth: 0,
            strict: std::env::var("BC_DB_CHECK_POOLER").is_ok_and(|v| v == "1"),
        }
    }
}

impl Instrumentation for PoolerCheck {
    fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
        match event {
            InstrumentationEvent::BeginTransaction { depth, .. } => self.depth = depth.get(),
            InstrumentationEvent::CommitTransaction { depth, .. }
            | InstrumentationEvent::RollbackTransaction { depth, .. } => {
                self.depth = depth.get() - 1;
            }
            InstrumentationEvent::StartQuery { query, .. } if self.depth == 0 => {
                let sql = query.to_string();
                if SIMPLE.iter().any(|s| sql.trim() == *s) {
                    return;
                }
                OUTSIDE.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    %sql,
                    "a statement was sent outside a transaction with \
                     BC_DB_PREPARED_STATEMENTS=off: behind a transaction pooler it may run on \
                     another server than it was prepared on"
                );
                if self.strict {
                    eprintln!(
                        "BC_DB_CHECK_POOLER=1: a statement outside a transaction: {sql}\n{}",
                        std::backtrace::Backtrace::force_capture()
                    );
                    std::process::abort();
                }
            }
            _ => {}
        }
    }
}

/// Makes a new connection fit for a transaction pooler when the mode is
/// `off`: no statement cache.
pub(crate) fn configure(conn: &mut AsyncPgConnection) {
    if pinned() {
        conn.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled);
    }
}

/// The diesel connection over an open session. With
/// `BC_DB_PREPARED_STATEMENTS=off`, diesel-async's set-up (`SET TIME ZONE`,
/// `SET CLIENT_ENCODING`, each a prepared statement) runs in a transaction,
/// so that a transaction pooler keeps it on one server, and the connection
/// caches no statement (`pooler`).
pub(super) async fn connected<S>(
    client: tokio_postgres::Client,
    mut connection: tokio_postgres::Connection<tokio_postgres::Socket, S>,
) -> ConnectionResult<AsyncPgConnection>
where
    S: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    if !pinned() {
        return AsyncPgConnection::try_from_client_and_connection(client, connection).await;
    }
    let setup_failed = |e: String| {
        ConnectionError::BadConnection(format!("could not set up the database session: {e}"))
    };
    // The session is driven here until BEGIN is answered; diesel-async
    // drives it from then on.
    tokio::select! {
        r = client.batch_execute("BEGIN") => r.map_err(|e| setup_failed(with_causes(&e)))?,
        r = &mut connection => {
            let e = r.err().map_or_else(|| "the server closed the session".into(), |e| {
                with_causes(&e)
            });
            return Err(setup_failed(e));
        }
    }
    let mut conn = AsyncPgConnection::try_from_client_and_connection(client, connection).await?;
    diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, "COMMIT")
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    configure(&mut conn);
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::PreparedStatements;

    #[test]
    fn the_setting_is_on_or_off() {
        assert_eq!(
            PreparedStatements::parse("").unwrap(),
            PreparedStatements::On
        );
        assert_eq!(
            PreparedStatements::parse("on").unwrap(),
            PreparedStatements::On
        );
        assert_eq!(
            PreparedStatements::parse("off").unwrap(),
            PreparedStatements::Off
        );
        let e = PreparedStatements::parse("false").unwrap_err().to_string();
        assert!(e.contains("must be on or off, not \"false\""), "{e}");
    }
}
