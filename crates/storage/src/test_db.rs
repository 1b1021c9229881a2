//! Isolated databases for tests (crates.io's `TestDatabase` pattern).
//!
//! `DATABASE_URL` names a server (any database on it). Once per server and
//! migration set, a template database is created and migrated under an
//! advisory lock; every [`TestDatabase`] is then a fresh
//! `CREATE DATABASE ... TEMPLATE` copy, dropped when the value is dropped. No
//! test shares rows with another, whatever runner or process runs it.
//!
//! `BC_TEST_POOLER_URL`, when set, names a pooler in front of that server
//! (PgBouncer, `scripts/pgbouncer.sh`): the processes a test starts connect
//! through it ([`TestDatabase::product_url`]), while the test's own set-up,
//! checks and the databases' creation and removal go to the server directly
//! (`CREATE DATABASE ... TEMPLATE` fails while a pooler keeps a session on
//! the template).

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AnsiTransactionManager, RunQueryDsl, TransactionManager};

use crate::db::{self, with_database};

/// A private database for one test.
pub struct TestDatabase {
    name: String,
    url: String,
    product_url: String,
    server_url: String,
    /// Whether dropping the value drops the database.
    owned: bool,
}

/// The server URL from `DATABASE_URL`.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "DATABASE_URL is not set: run the tests with `just test`, which starts a private \
             PostgreSQL"
        )
    })
}

/// The pooler's URL from `BC_TEST_POOLER_URL` (any database name), if set.
pub fn pooler_url() -> Option<String> {
    std::env::var("BC_TEST_POOLER_URL")
        .ok()
        .filter(|v| !v.is_empty())
}

fn template_name() -> String {
    // The build script's digest of the migrations' SQL: an edited or added
    // migration gets a new template.
    format!("bc_template_{}", env!("BC_MIGRATIONS_DIGEST"))
}

#[derive(diesel::QueryableByName)]
struct Exists {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The key of the transaction-level advisory lock under which one process
/// builds the template.
const TEMPLATE_LOCK: i64 = 7362846105;

async fn ensure_template(server: &str) -> anyhow::Result<String> {
    let template = template_name();
    // CREATE DATABASE cannot run in a transaction block: the lock is held in
    // an open transaction on a second connection while `conn` builds.
    let mut lock = db::establish(server).await?;
    AnsiTransactionManager::begin_transaction(&mut lock).await?;
    diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
        .bind::<BigInt, _>(TEMPLATE_LOCK)
        .execute(&mut lock)
        .await?;
    let exists: Exists =
        diesel::sql_query("SELECT count(*) AS n FROM pg_database WHERE datname = $1")
            .bind::<Text, _>(&template)
            .get_result(&mut lock)
            .await?;
    let result = async {
        if exists.n == 0 {
            let mut conn = db::establish(server).await?;
            let building = format!("{template}_building");
            diesel::sql_query(format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
                .execute(&mut conn)
                .await?;
            diesel::sql_query(format!("CREATE DATABASE {building}"))
                .execute(&mut conn)
                .await?;
            db::migrate(&with_database(server, &building)).await?;
            diesel::sql_query(format!("ALTER DATABASE {building} RENAME TO {template}"))
                .execute(&mut conn)
                .await?;
        }
        anyhow::Ok(())
    }
    .await;
    // Committing (or dropping the connection) releases the lock.
    AnsiTransactionManager::commit_transaction(&mut lock).await?;
    result?;
    Ok(template)
}

impl TestDatabase {
    /// A new migrated database of its own.
    #[expect(
        clippy::expect_used,
        reason = "test support: a test that cannot get its database fails"
    )]
    pub async fn new() -> TestDatabase {
        let server_url = server_url();
        let template = ensure_template(&server_url)
            .await
            .expect("test template database");
        let name = format!("bc_test_{}", crate::ids::new_secret()[4..24].to_owned());
        let mut conn = db::establish(&server_url)
            .await
            .expect("connect to the test server");
        diesel::sql_query(format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        let url = with_database(&server_url, &name);
        let product_url = pooler_url().map_or_else(|| url.clone(), |p| with_database(&p, &name));
        TestDatabase {
            name,
            url,
            product_url,
            server_url,
            owned: true,
        }
    }

    /// A database the caller manages (a server a test started itself):
    /// neither created nor dropped by this value.
    pub fn existing(url: &str) -> TestDatabase {
        TestDatabase {
            name: String::new(),
            url: url.to_owned(),
            product_url: url.to_owned(),
            server_url: url.to_owned(),
            owned: false,
        }
    }

    /// The database's URL, on the server itself: for the test's own set-up
    /// and checks.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL the processes under test connect to: through the pooler of
    /// `BC_TEST_POOLER_URL` when set, else [`TestDatabase::url`].
    pub fn product_url(&self) -> &str {
        &self.product_url
    }

    /// The database's name (empty for [`TestDatabase::existing`]).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let name = self.name.clone();
        let server = self.server_url.clone();
        // Dropping needs a connection; do it on a thread with its own runtime
        // so it works from inside or outside an async test.
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = db::establish(&server).await {
                    let _ =
                        diesel::sql_query(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                            .execute(&mut conn)
                            .await;
                }
            });
        });
        let _ = handle.join();
    }
}
