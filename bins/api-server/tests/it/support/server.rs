//! The real `api-server` binary on an ephemeral port against a database of
//! its own, spoken to over HTTP.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use storage::test_db::TestDatabase;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bootstrap token every test server starts with.
pub const ROOT_TOKEN: &str = "bck_testrootbootstraptoken000000000000000000000000";

/// The root tenant's id (the servers run with the default).
pub const ROOT: &str = "root";

/// The provider endpoints test servers and workers allow tenants' accounts:
/// Google's, and the in-process fakes on loopback.
pub const TEST_PROVIDER_ENDPOINTS: &str = "https://compute.googleapis.com,http://127.0.0.1:*";

/// A running api-server.
pub struct Server {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// The server's database.
    pub db: TestDatabase,
    child: Child,
    client: reqwest::Client,
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// JSON body (Null if not JSON).
    pub body: Value,
    /// `x-request-id`.
    pub request_id: Option<String>,
}

impl Answer {
    /// The error code, if the body is an error envelope.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// Asserts success and returns the body.
    #[track_caller]
    pub fn ok(self) -> Value {
        assert_eq!(self.status, 200, "expected success, got {:?}", self.body);
        self.body
    }

    /// Asserts an error with `code` and HTTP `status`, returns its details.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> &Value {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "body: {}",
            self.body
        );
        assert!(
            self.body["error"]["details"].is_object(),
            "details must be an object: {}",
            self.body
        );
        assert!(self.body["error"]["message"].is_string());
        &self.body["error"]["details"]
    }
}

/// Options for starting a server.
pub struct Options {
    /// `BC_CLOCK`.
    pub clock: &'static str,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Runs the server under `ulimit -n` this many file descriptors.
    pub fd_limit: Option<u32>,
    /// Writes the server's log to this file instead of the test's stderr.
    pub log: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            clock: "manual",
            env: Vec::new(),
            fd_limit: None,
            log: None,
        }
    }
}

impl Server {
    /// Starts a server with the manual clock on a fresh database.
    pub async fn start() -> Server {
        Server::start_with(Options::default()).await
    }

    /// Starts a server with options.
    pub async fn start_with(opts: Options) -> Server {
        let db = TestDatabase::new().await;
        Server::start_on(db, opts).await
    }

    /// Starts a server with the manual clock on a fresh database, with one
    /// more environment variable.
    pub async fn start_with_env(key: &str, value: impl Into<String>) -> Server {
        Server::start_with(Options {
            env: vec![(key.to_owned(), value.into())],
            ..Options::default()
        })
        .await
    }

    /// Starts a server with the manual clock on a fresh database, with
    /// these environment variables (an empty value: the server's default).
    pub async fn start_with_vars(vars: &[(&str, &str)]) -> Server {
        Server::start_with(Options {
            env: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Options::default()
        })
        .await
    }

    /// Starts a server on an existing database.
    pub async fn start_on(db: TestDatabase, opts: Options) -> Server {
        let mut cmd = command(db.product_url(), &opts);
        let stderr = match &opts.log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::inherit(),
        };
        cmd.stdout(Stdio::piped()).stderr(stderr).kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn api-server");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("api-server did not start within 60 s")
            .expect("read stdout")
            .expect("api-server exited before listening");
        let url = line
            .strip_prefix("api-server listening on ")
            .expect("ready line")
            .to_owned();
        Server {
            url,
            db,
            child,
            client: reqwest::Client::new(),
        }
    }

    /// POSTs a JSON body to `/api/compute/{path}` with `token`.
    pub async fn call(&self, token: &str, path: &str, body: Value) -> Answer {
        self.raw(
            Some(token),
            "POST",
            &format!("/api/compute/{path}"),
            Some(body.to_string()),
        )
        .await
    }

    /// As root in the root tenant.
    pub async fn root(&self, path: &str, mut body: Value) -> Answer {
        if body.get("tenantId").is_none() {
            body["tenantId"] = json!(ROOT);
        }
        self.call(ROOT_TOKEN, path, body).await
    }

    /// A raw request.
    pub async fn raw(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Answer {
        let verb = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(verb, format!("{}{}", self.url, path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let request_id = resp
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp.text().await.expect("body");
        super::openapi::check(method, path, status, &text);
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            body,
            request_id,
        }
    }

    /// GET a path, returning status and text.
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let resp = self
            .client
            .get(format!("{}{}", self.url, path))
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        super::openapi::check("GET", path, status, &text);
        (status, text)
    }

    /// Every item of a list method from the start: POSTs `body` to `path`
    /// with `limit` 1000, paging with `nextCursor` until `hasMore` is false.
    pub async fn list_all(&self, token: &str, path: &str, mut body: Value) -> Vec<Value> {
        let mut out = Vec::new();
        body["limit"] = json!(1000);
        loop {
            let page = self.call(token, path, body.clone()).await.ok();
            out.extend(page["items"].as_array().expect("items").iter().cloned());
            body["after"] = json!(page["nextCursor"].as_str().expect("nextCursor"));
            if page["hasMore"] != json!(true) {
                return out;
            }
        }
    }

    /// Every event of `tenant`, oldest first.
    pub async fn events(&self, token: &str, tenant: &str) -> Vec<Value> {
        self.list_all(token, "events/list", json!({ "tenantId": tenant }))
            .await
    }

    /// The events of `tenant` of one type, oldest first.
    pub async fn events_of(&self, token: &str, tenant: &str, ty: &str) -> Vec<Value> {
        of_type(&self.events(token, tenant).await, ty)
    }

    /// Creates a tenant and returns its admin secret.
    pub async fn tenant(&self, name: &str) -> String {
        let body = self
            .root("tenants/create", json!({ "name": name }))
            .await
            .ok();
        body["adminKey"]["secret"]
            .as_str()
            .expect("secret")
            .to_owned()
    }

    /// Creates a key in `tenant` with `token`.
    pub async fn key(
        &self,
        token: &str,
        tenant: &str,
        role: &str,
        account: Option<&str>,
    ) -> String {
        let mut body = json!({ "tenantId": tenant, "name": format!("{role} key"), "role": role });
        if let Some(a) = account {
            body["accountId"] = json!(a);
        }
        let v = self.call(token, "apiKeys/create", body).await.ok();
        v["secret"].as_str().expect("secret").to_owned()
    }

    /// Stops the server with SIGTERM and waits for it.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("server stops within 30 s")
            .expect("wait")
    }
}

/// The api-server command the test servers run: `database_url`, an
/// ephemeral port, the bootstrap token and `opts` (stdio left to the caller).
pub fn command(database_url: &str, opts: &Options) -> Command {
    let binary = env!("CARGO_BIN_EXE_api-server");
    let mut cmd = match opts.fd_limit {
        None => Command::new(binary),
        Some(n) => {
            let mut c = Command::new("bash");
            c.args(["-c", &format!("ulimit -n {n} && exec \"$0\""), binary]);
            c
        }
    };
    cmd.env("DATABASE_URL", database_url)
        .env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_CLOCK", opts.clock)
        .env("BC_BOOTSTRAP_TOKEN", ROOT_TOKEN)
        .env("BC_DB_POOL_SIZE", "8")
        // The fakes listen on loopback: tenants' accounts may name them.
        // Tests of the endpoint policy set their own list.
        .env("BC_PROVIDER_ENDPOINTS", TEST_PROVIDER_ENDPOINTS)
        // Root's accounts in tests may read their token from GCE_TOKEN.
        .env("BC_CREDENTIAL_ENV", "GCE_TOKEN")
        // Provider retries wait 10 ms, not 500 ms, between tries.
        .env("BC_PROVIDER_RETRY_DELAY_MS", "10")
        // Tests send bursts no tenant would be allowed (thousands of calls a
        // second from one address, as one tenant): the request rates are off
        // unless a test sets them (`http::rates` tests the defaults).
        .env("BC_TENANT_RATE", "0")
        .env("BC_ANON_RATE", "0")
        .env(
            "RUST_LOG",
            std::env::var("TEST_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        );
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    cmd
}

/// The executable `name` beside the api-server binary under test; `build`
/// is the command that builds it, for the message when it is not there.
pub fn sibling_binary(name: &str, build: &str) -> std::path::PathBuf {
    // `BC_TEST_BIN_DIR` runs the suite against binaries of another build
    // (an older worker beside this api-server, to show a test fails on it).
    let path = match std::env::var_os("BC_TEST_BIN_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir).join(name),
        None => std::path::PathBuf::from(env!("CARGO_BIN_EXE_api-server")).with_file_name(name),
    };
    assert!(
        path.is_file(),
        "{name} binary not found at {}; run `{build}` or `just test`",
        path.display()
    );
    path
}

/// A short random suffix for keys and names.
pub fn rand_suffix() -> String {
    storage::ids::new_request_id()[..12].to_owned()
}

/// The events of one type.
pub fn of_type(evs: &[Value], ty: &str) -> Vec<Value> {
    evs.iter().filter(|e| e["type"] == ty).cloned().collect()
}

/// The value of the first series of a Prometheus exposition whose line
/// starts with `series` (`name{labels}`), 0 when there is none.
pub fn metric(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
