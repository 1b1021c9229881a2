//! PostgreSQL over TLS (contract 8.1): the api-server, the worker and
//! migrations reach a private PostgreSQL that accepts TLS only (`hostssl`),
//! with libpq's `sslmode` and `sslrootcert` in `DATABASE_URL`.
//!
//! The test starts its own cluster with a CA and server certificate made
//! here; it does not use the shared test server.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Output, Stdio};
use std::time::{Duration, Instant};

use diesel::sql_types::{Bool, Text};
use diesel_async::RunQueryDsl;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use serde_json::json;
use storage::test_db::TestDatabase;
use tokio::process::Command;

use crate::support::server::{self, Options, Server};
use crate::support::worker;

/// A CA made for the test: its certificate and key.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(vec![]).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca { cert, key }
    }

    /// A server certificate for `names` signed by this CA: (cert, key) PEM.
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("server params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("server"),
        );
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("server certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// A PostgreSQL server binary: `/usr/lib/postgresql/15/bin` first, then any
/// other installed version, then `PATH`.
fn pg_bin(name: &str) -> PathBuf {
    let mut dirs = vec![PathBuf::from("/usr/lib/postgresql/15/bin")];
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut others: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .collect();
        others.sort();
        dirs.extend(others.into_iter().rev());
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("PostgreSQL's {name} not found (apt-get install postgresql)"))
}

fn is_root() -> bool {
    StdCommand::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program` run as the cluster's owner: `postgres` when the test runs as
/// root (PostgreSQL refuses to run as root), else the test's own user.
fn as_owner(root: bool, program: &Path) -> StdCommand {
    if root {
        let mut cmd = StdCommand::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        StdCommand::new(program)
    }
}

#[track_caller]
fn run(mut cmd: StdCommand, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private PostgreSQL cluster with `ssl=on` whose `pg_hba.conf` accepts
/// TLS connections only (password, SCRAM); stopped and removed on drop.
struct TlsCluster {
    dir: PathBuf,
    data: PathBuf,
    root: bool,
    port: u16,
    password: String,
    /// The CA that signed the server's certificate (PEM file).
    ca_file: PathBuf,
    /// A CA the server's certificate has nothing to do with (PEM file).
    other_ca_file: PathBuf,
}

impl TlsCluster {
    fn start() -> TlsCluster {
        let root = is_root();
        let dir = std::env::temp_dir().join(format!(
            "bc-db-tls-{}-{}",
            std::process::id(),
            server::rand_suffix()
        ));
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let password = format!("pw{}", server::rand_suffix());
        let mut cluster = TlsCluster {
            dir: dir.clone(),
            data: data.clone(),
            root,
            port: 0,
            password: password.clone(),
            ca_file: dir.join("ca.pem"),
            other_ca_file: dir.join("other-ca.pem"),
        };
        // From here on the guard cleans up whatever was made.
        let ca = Ca::new("bc test database CA");
        let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"]);
        std::fs::write(&cluster.ca_file, ca.cert.pem()).expect("ca.pem");
        std::fs::write(&cluster.other_ca_file, Ca::new("unrelated CA").cert.pem())
            .expect("other-ca.pem");
        std::fs::write(dir.join("server.crt"), cert).expect("server.crt");
        std::fs::write(dir.join("server.key"), key).expect("server.key");
        std::fs::write(dir.join("pwfile"), &password).expect("pwfile");
        use std::os::unix::fs::PermissionsExt;
        for f in ["server.key", "pwfile"] {
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600))
                .expect("chmod 0600");
        }
        if root {
            let mut chown = StdCommand::new("chown");
            chown.args(["-R", "postgres:postgres"]).arg(&dir);
            run(chown, "chown the cluster directory to postgres");
        }
        let mut initdb = as_owner(root, &pg_bin("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", dir.join("pwfile").display()))
            .args([
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]);
        run(initdb, "initdb");
        // TLS or nothing: no `host` line, so plaintext finds no entry.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 scram-sha-256\n\
             hostssl all all ::1/128 scram-sha-256\n",
        )
        .expect("pg_hba.conf");
        let port = worker::free_port();
        cluster.port = port;
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {port}\n\
             unix_socket_directories = '{dir}'\nssl = on\n\
             ssl_cert_file = '{dir}/server.crt'\nssl_key_file = '{dir}/server.key'\n\
             fsync = off\nsynchronous_commit = off\nmax_connections = 60\n",
            dir = dir.display()
        );
        let mut existing = std::fs::read_to_string(data.join("postgresql.conf")).expect("conf");
        existing.push_str(&conf);
        std::fs::write(data.join("postgresql.conf"), existing).expect("postgresql.conf");
        let mut start = as_owner(root, &pg_bin("pg_ctl"));
        start
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("postgres.log"))
            .args(["-w", "-t", "60", "start"]);
        let out = start.output().expect("pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
        );
        cluster
    }

    /// `postgres://postgres:PASSWORD@HOST:PORT/postgres?QUERY`.
    fn url(&self, host: &str, query: &str) -> String {
        format!(
            "postgres://postgres:{}@{host}:{}/postgres?{query}",
            self.password, self.port
        )
    }

    /// `sslrootcert=...` for a CA file.
    fn root(path: &Path) -> String {
        format!("sslrootcert={}", path.display())
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            let mut stop = as_owner(self.root, &pg_bin("pg_ctl"));
            stop.arg("-D")
                .arg(&self.data)
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _ = stop.status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `cmd` to its end (at most 60 s) with its output captured.
async fn output(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the process ends within 60 s")
        .expect("run the process")
}

/// `reconciler-worker --once` on `url`.
async fn worker_once(url: &str) -> (bool, String) {
    let mut cmd = worker::command_for(url);
    cmd.arg("--once");
    let out = output(cmd).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The TLS version of a session opened by `storage::db::establish` (`None`
/// for plaintext), as the server sees it.
async fn session(url: &str) -> Result<Option<String>, String> {
    #[derive(diesel::QueryableByName)]
    struct Session {
        #[diesel(sql_type = Bool)]
        ssl: bool,
        #[diesel(sql_type = Text)]
        version: String,
    }
    let mut conn = storage::db::establish(url)
        .await
        .map_err(|e| e.to_string())?;
    let s: Session = diesel::sql_query(
        "SELECT ssl, coalesce(version, '') AS version FROM pg_stat_ssl \
         WHERE pid = pg_backend_pid()",
    )
    .get_result(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    Ok(s.ssl.then_some(s.version))
}

/// As [`session`], asserting the session runs over TLS; its version.
async fn session_tls(url: &str) -> Result<String, String> {
    let version = session(url).await?;
    Ok(version.expect("the session must run over TLS"))
}

#[track_caller]
fn assert_refused(what: &str, result: Result<String, String>, expected: &str, password: &str) {
    let e = result.expect_err(what);
    eprintln!("{what}: refused: {e}");
    assert!(e.contains(expected), "{what}: {e}");
    assert!(!e.contains(password), "{what} shows the password: {e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binaries_and_migrations_reach_a_postgresql_that_accepts_only_tls() {
    let started = Instant::now();
    let pg = TlsCluster::start();
    let pw = pg.password.clone();
    let ca = TlsCluster::root(&pg.ca_file);
    let other_ca = TlsCluster::root(&pg.other_ca_file);
    let full = pg.url("localhost", &format!("sslmode=verify-full&{ca}"));
    eprintln!("TLS cluster up in {:?}", started.elapsed());

    // (a) The api-server migrates over verify-full, is ready and serves.
    let s = Server::start_on(TestDatabase::existing(&full), Options::default()).await;
    assert_eq!(s.get_text("/readyz").await.0, 200);
    s.root("tenants/create", json!({ "name": "acme" }))
        .await
        .ok();
    let tenants = s.root("tenants/list", json!({})).await.ok();
    let names: Vec<&str> = tenants["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|t| t["tenantId"].as_str())
        .collect();
    assert!(names.contains(&"acme"), "{tenants}");

    // (b) The worker runs a pass over the same URL.
    let (ok, err) = worker_once(&full).await;
    assert!(ok, "worker over verify-full: {err}");
    let status = s.stop().await;
    assert!(status.success(), "{status:?}");

    // (c) A CA that did not sign the server's certificate is refused, by
    // the server (which never becomes ready) and by the worker.
    let wrong = pg.url("localhost", &format!("sslmode=verify-full&{other_ca}"));
    let out = output(server::command(&wrong, &Options::default())).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("api-server with a wrong CA: {stderr}");
    assert!(
        !out.status.success(),
        "api-server with a wrong CA: {stderr}"
    );
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(stderr.contains("certificate was not trusted"), "{stderr}");
    assert!(!stderr.contains(&pw), "the password is logged: {stderr}");
    let (ok, err) = worker_once(&wrong).await;
    eprintln!("worker with a wrong CA: {err}");
    assert!(!ok, "worker with a wrong CA succeeded: {err}");
    assert!(err.contains("certificate was not trusted"), "{err}");
    assert!(!err.contains(&pw), "the password is logged: {err}");

    // (d) Plaintext is refused by the hostssl-only server.
    let (ok, err) = worker_once(&pg.url("localhost", "sslmode=disable")).await;
    eprintln!("worker over plaintext: {err}");
    assert!(!ok, "worker over plaintext succeeded: {err}");
    assert!(err.contains("no encryption"), "{err}");
    assert!(err.contains("the server requires TLS"), "{err}");
    assert!(!err.contains(&pw), "the password is logged: {err}");

    // (e) verify-full checks names: 127.0.0.1 is in the certificate, a
    // name reached through hostaddr is not; verify-ca checks the chain only.
    let version = session_tls(&pg.url("127.0.0.1", &format!("sslmode=verify-full&{ca}")))
        .await
        .expect("verify-full to 127.0.0.1 (an IP SAN)");
    assert!(version.starts_with("TLSv1."), "{version}");
    let unnamed = |mode: &str, root: &str| {
        pg.url(
            "db.not-in-the-cert.invalid",
            &format!("hostaddr=127.0.0.1&sslmode={mode}&{root}"),
        )
    };
    session_tls(&unnamed("verify-ca", &ca))
        .await
        .expect("verify-ca ignores the name");
    assert_refused(
        "verify-full to a name not in the certificate",
        session_tls(&unnamed("verify-full", &ca)).await,
        "does not name the host",
        &pw,
    );
    assert_refused(
        "verify-ca with an unrelated CA",
        session_tls(&unnamed("verify-ca", &other_ca)).await,
        "certificate was not trusted",
        &pw,
    );
    let (ok, err) = worker_once(&unnamed("verify-ca", &ca)).await;
    assert!(ok, "worker over verify-ca: {err}");

    // libpq's weaker modes: require checks nothing unless given roots (then
    // it is verify-ca); prefer, the default, takes TLS when offered.
    session_tls(&unnamed("require", "application_name=bc"))
        .await
        .expect("require without roots checks no certificate");
    assert_refused(
        "require with an unrelated CA",
        session_tls(&unnamed("require", &other_ca)).await,
        "certificate was not trusted",
        &pw,
    );
    session_tls(&pg.url("localhost", "application_name=bc"))
        .await
        .expect("no sslmode is prefer: TLS when the server offers it");
    assert_refused(
        "verify-full with the Mozilla roots",
        session_tls(&pg.url("localhost", "sslmode=verify-full")).await,
        "not signed by the Mozilla roots",
        &pw,
    );
    // Unix sockets are plaintext whatever the mode, as in libpq.
    let socket = |query: &str| {
        format!(
            "postgres://postgres@/postgres?host={}&port={}&{query}",
            pg.dir.display(),
            pg.port
        )
    };
    for query in ["application_name=bc", "sslmode=verify-full"] {
        let tls = session(&socket(query)).await.expect("a Unix socket");
        assert_eq!(tls, None, "{query}");
    }
    eprintln!("database TLS test done in {:?}", started.elapsed());
}

/// `sslmode=verify-ca` with no `sslrootcert` would take the public roots and
/// check no name, so any publicly issued certificate for any host would do
/// (contract 8.1): both binaries refuse to start, naming the fix, before
/// connecting (the URL points at no server at all).
#[tokio::test(flavor = "multi_thread")]
async fn verify_ca_without_its_own_roots_refuses_to_start() {
    let url = "postgres://app:s3cr3t-pw@127.0.0.1:9/app?sslmode=verify-ca";
    let out = output(server::command(url, &Options::default())).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "api-server started: {stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(
        stderr.contains("sslmode=verify-ca needs sslrootcert="),
        "{stderr}"
    );
    assert!(stderr.contains("verify-full"), "{stderr}");
    assert!(
        !stderr.contains("s3cr3t-pw"),
        "the password is logged: {stderr}"
    );
    let (ok, err) = worker_once(url).await;
    assert!(!ok, "the worker ran: {err}");
    assert!(
        err.contains("sslmode=verify-ca needs sslrootcert="),
        "{err}"
    );
    assert!(!err.contains("s3cr3t-pw"), "the password is logged: {err}");
}
