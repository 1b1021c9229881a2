//! A hostile tenant against the provider-account boundary (contract 3.5 r2):
//! it cannot make the server send its environment or files anywhere, cannot
//! point an account inside the platform's network (directly or through DNS),
//! learns nothing from provider errors, and cannot bind its own reservation
//! into a platform pool.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};

use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::bodies::InstanceBody;
use crate::support::builders::InstanceBuilder;
use crate::support::calls::{list_accounts, list_reservations_as, scan_as};
use crate::support::clock::T0;
use crate::support::fixtures::{bind, create_account, platform_at_t0, scan};
use crate::support::gce::{Gce, PROJECT};
use crate::support::server::{Options, ROOT_TOKEN, Server, rand_suffix};
use crate::support::worker;

/// A secret in the server's environment that no tenant may ever see.
const PLANTED: &str = "planted-secret-value-7f3a9c";

/// A TCP listener standing in for a tenant's own server: records every
/// request it receives and answers each with `status` and `body`.
struct Listener {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Listener {
    async fn start(bind: &str, status: u16, body: &'static str) -> Listener {
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    seen.lock()
                        .expect("lock")
                        .push(String::from_utf8_lossy(&buf).into_owned());
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Listener { addr, requests }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }
}

const EMPTY_LISTING: &str = r#"{"items":{}}"#;

fn account_body(name: &str, endpoint: &str, credentials: &str) -> Value {
    json!({
        "tenantId": "acme",
        "name": name,
        "provider": "gce",
        "config": { "project": "acme-project-1", "endpoint": endpoint, "credentials": credentials },
        "idempotencyKey": format!("acct-{name}"),
    })
}

async fn tenant_account(s: &Server, token: &str, name: &str, endpoint: &str, cred: &str) -> String {
    create_account(s, token, account_body(name, endpoint, cred)).await
}

/// Inserts an account as it may have been stored before the policy existed,
/// bypassing today's create-time check.
async fn legacy_account(s: &Server, id: &str, tenant: &str, config: Value) {
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    diesel::sql_query(
        "INSERT INTO provider_accounts (account_id, tenant_id, name, provider, config, created_at) \
         VALUES ($1, $2, 'legacy', 'gce', $3::jsonb, 0)",
    )
    .bind::<Text, _>(id)
    .bind::<Text, _>(tenant)
    .bind::<Text, _>(config.to_string())
    .execute(&mut conn)
    .await
    .expect("insert legacy account");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_credential_reference_sends_the_servers_environment_or_files_to_a_tenant() {
    let listener = Listener::start("127.0.0.1:0", 200, EMPTY_LISTING).await;
    let endpoint = format!("http://127.0.0.1:{}", listener.port());
    let dir = std::env::temp_dir().join(format!("bc-cred-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).expect("dir");
    let token_file = dir.join("root-token");
    std::fs::write(&token_file, format!("{PLANTED}-file")).expect("write");
    let s = Server::start_with(Options {
        env: vec![
            // The tenant's endpoint is listed: only the credential rules stand
            // between it and the server's secrets.
            ("BC_PROVIDER_ENDPOINTS".into(), endpoint.clone()),
            ("BC_CREDENTIAL_ENV".into(), "GCE_*".into()),
            ("BC_CREDENTIAL_DIR".into(), dir.display().to_string()),
            ("GCE_ROOT_TOKEN".into(), format!("{PLANTED}-env")),
            ("BC_PLANTED".into(), PLANTED.into()),
        ],
        ..Options::default()
    })
    .await;
    s.set_clock(T0).await;
    let t = s.tenant("acme").await;

    // Every reference that reaches the server's environment or files is
    // refused for a tenant, listed for root or not.
    let attempts = [
        "env:BC_BOOTSTRAP_TOKEN".to_owned(),
        "env:DATABASE_URL".to_owned(),
        "env:PATH".to_owned(),
        "env:BC_PLANTED".to_owned(),
        "env:GCE_ROOT_TOKEN".to_owned(),
        "file:/etc/hostname".to_owned(),
        "file:/proc/self/environ".to_owned(),
        format!("file:{}", token_file.display()),
        format!("file:{}/../../etc/passwd", dir.display()),
        "adc".to_owned(),
        "secret:gce-key".to_owned(),
    ];
    for (i, cred) in attempts.iter().enumerate() {
        let a = s
            .call(
                &t,
                "providerAccounts/create",
                account_body(&format!("a{i}"), &endpoint, cred),
            )
            .await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(d["field"], "config.credentials", "{cred}");
        assert_eq!(d["reason"], "credential-not-allowed", "{cred}");
        assert!(!a.body.to_string().contains(PLANTED), "{cred}: {}", a.body);
    }
    let listed = list_accounts(&s, &t, "acme").await.ok();
    assert_eq!(listed["items"], json!([]));

    // Root may use what the operator listed, and nothing else.
    for cred in [
        "env:BC_BOOTSTRAP_TOKEN",
        "env:DATABASE_URL",
        "env:BC_PLANTED",
        "file:/etc/hostname",
    ] {
        let mut body = account_body("r", &endpoint, cred);
        body["tenantId"] = json!("root");
        let a = s.root("providerAccounts/create", body).await;
        assert_eq!(
            a.err(400, "INVALID_INPUT")["reason"],
            "credential-not-allowed",
            "{cred}"
        );
    }

    // Accounts stored before the policy (a tenant's env: and file:
    // references) are unusable: their scans fail as provider errors, by the
    // API and by the worker, and never connect.
    let legacy = |n: u8, credentials: &str| {
        (
            format!("pacct_01jd000000000000000000000{n}"),
            json!({
                "project": "acme-project-1",
                "endpoint": endpoint,
                "credentials": credentials,
            }),
        )
    };
    let by_api = [
        legacy(1, "env:BC_BOOTSTRAP_TOKEN"),
        legacy(2, "file:/etc/hostname"),
    ];
    let by_worker = [
        legacy(3, "env:BC_PLANTED"),
        legacy(4, "file:/proc/self/environ"),
    ];
    for (id, config) in by_api.iter().chain(&by_worker) {
        legacy_account(&s, id, "acme", config.clone()).await;
    }
    for (id, _) in &by_api {
        let a = scan_as(&s, &t, "acme", id).await;
        assert_eq!(
            a.err(503, "UNAVAILABLE"),
            &json!({ "reason": "provider-error" }),
            "{id}"
        );
    }
    let (status, err) = worker::once_with(
        &s,
        &["vps.reservations"],
        &[
            ("BC_PROVIDER_ENDPOINTS", endpoint.as_str()),
            ("BC_CREDENTIAL_ENV", "GCE_*"),
            ("GCE_ROOT_TOKEN", "worker-side-secret"),
            ("BC_PLANTED", PLANTED),
            ("RUST_LOG", "info"),
            ("NO_COLOR", "1"),
        ],
    )
    .await;
    assert!(status.success(), "{err}");
    let c = worker::pass_counts(&err, "vps.reservations")
        .unwrap_or_else(|| panic!("no pass line: {err}"));
    // The two the API tried are backing off; the worker tried the other two.
    assert_eq!(
        (c["accountsFailed"], c["accountsBackingOff"]),
        (2, 2),
        "{err}"
    );
    // The start-up check named every one of them in the worker's log.
    for (id, _) in by_api.iter().chain(&by_worker) {
        assert!(
            err.contains(id.as_str()),
            "{id} not reported at start-up: {err}"
        );
    }
    assert!(
        !err.contains(PLANTED) && !err.contains("worker-side-secret"),
        "{err}"
    );
    assert!(listener.requests().is_empty(), "{:?}", listener.requests());

    // A tenant account with `none` does reach the listed endpoint, with no
    // Authorization header at all.
    let id = tenant_account(&s, &t, "plain", &endpoint, "none").await;
    scan_as(&s, &t, "acme", &id).await.ok();
    let (status, err) = worker::once_with(
        &s,
        &["vps.reservations"],
        &[
            ("BC_PROVIDER_ENDPOINTS", endpoint.as_str()),
            ("BC_PLANTED", PLANTED),
        ],
    )
    .await;
    assert!(status.success(), "{err}");
    let seen = listener.requests();
    assert_eq!(seen.len(), 2, "the API's scan and the worker's: {seen:?}");
    let db_url = s.db.url().to_owned();
    let path = std::env::var("PATH").unwrap_or_default();
    let hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    for r in &seen {
        let lower = r.to_ascii_lowercase();
        assert!(!lower.contains("authorization"), "{r}");
        for secret in [
            PLANTED,
            ROOT_TOKEN,
            db_url.as_str(),
            path.as_str(),
            "worker-side-secret",
        ] {
            assert!(!r.contains(secret), "{secret:?} reached the tenant: {r}");
        }
        if !hostname.trim().is_empty() {
            assert!(!r.contains(&format!("Bearer {}", hostname.trim())), "{r}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn root_accounts_send_only_the_credentials_the_operator_listed() {
    let listener = Listener::start("127.0.0.1:0", 200, EMPTY_LISTING).await;
    let endpoint = format!("http://127.0.0.1:{}", listener.port());
    let s = Server::start_with(Options {
        env: vec![
            ("BC_CREDENTIAL_ENV".into(), "GCE_*".into()),
            ("GCE_ROOT_TOKEN".into(), "root-gce-token".into()),
        ],
        ..Options::default()
    })
    .await;
    let mut body = account_body("root-gce", &endpoint, "env:GCE_ROOT_TOKEN");
    body["tenantId"] = json!("root");
    let a = s.root("providerAccounts/create", body).await.ok();
    let id = a["account"]["accountId"].as_str().expect("id").to_owned();
    scan(&s, &id).await;
    let seen = listener.requests();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].contains("Bearer root-gce-token"), "{}", seen[0]);
}

/// A host name (not `localhost`) that resolves only to non-public
/// addresses of this machine: its own host name, from `/etc/hosts`.
fn internal_name() -> String {
    let mut candidates = Vec::new();
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        candidates.push(h.trim().to_owned());
    }
    candidates.extend(["localhost.localdomain", "ip6-localhost", "ip6-loopback"].map(String::from));
    for name in candidates {
        if name.is_empty() || name == "localhost" {
            continue;
        }
        let Ok(addrs) = (name.as_str(), 80).to_socket_addrs() else {
            continue;
        };
        let addrs: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
        let internal = |ip: &IpAddr| match ip {
            IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
            IpAddr::V6(v6) => v6.is_loopback(),
        };
        if !addrs.is_empty() && addrs.iter().all(internal) {
            return name;
        }
    }
    panic!("no host name of this machine resolves to an internal address (/etc/hosts)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_endpoint_inside_the_platform_is_refused_at_create_or_at_connect() {
    let listener = Listener::start("0.0.0.0:0", 200, EMPTY_LISTING).await;
    let port = listener.port();
    let name = internal_name();
    // The operator lists a name, by mistake or because DNS changed under it.
    let listed = format!("https://compute.googleapis.com,http://{name}:{port}");
    let s = Server::start_with_env("BC_PROVIDER_ENDPOINTS", listed.clone()).await;
    let t = s.tenant("acme").await;
    // Not listed: refused at create, whatever the form.
    for endpoint in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
        "http://169.254.169.254".to_owned(),
        "http://metadata.google.internal".to_owned(),
        "http://10.0.0.1:5432".to_owned(),
        format!("http://{name}:{}", port + 1),
        format!("https://{name}:{port}"),
    ] {
        let a = s
            .call(
                &t,
                "providerAccounts/create",
                account_body("x", &endpoint, "none"),
            )
            .await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("config.endpoint"), Some("endpoint-not-allowed")),
            "{endpoint}"
        );
    }
    // Listed by name, but the name resolves inside: refused at connect, as a
    // provider error that says nothing of the address.
    let endpoint = format!("http://{name}:{port}");
    let id = tenant_account(&s, &t, "dns", &endpoint, "none").await;
    let scanned = scan_as(&s, &t, "acme", &id).await;
    assert_eq!(
        scanned.err(503, "UNAVAILABLE"),
        &json!({ "reason": "provider-error" })
    );
    let text = scanned.body.to_string();
    assert!(
        !text.contains(&port.to_string()) && !text.contains("127.0.0.1"),
        "{text}"
    );
    let (status, err) = worker::once_with(
        &s,
        &["vps.reservations"],
        &[("BC_PROVIDER_ENDPOINTS", listed.as_str())],
    )
    .await;
    assert!(status.success(), "{err}");
    assert!(listener.requests().is_empty(), "{:?}", listener.requests());

    // Root's accounts are the operator's own: they may name it.
    let mut body = account_body("root-dns", &endpoint, "none");
    body["tenantId"] = json!("root");
    let a = s.root("providerAccounts/create", body).await.ok();
    let rid = a["account"]["accountId"].as_str().expect("id").to_owned();
    scan(&s, &rid).await;
    assert_eq!(listener.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_loopback_address_is_reachable_and_provider_errors_echo_nothing() {
    let listener = Listener::start(
        "127.0.0.1:0",
        500,
        r#"{"error":"db at 10.20.30.40:5432 refused: internal topology"}"#,
    )
    .await;
    let endpoint = format!("http://127.0.0.1:{}", listener.port());
    let s = Server::start_with_env("BC_PROVIDER_ENDPOINTS", endpoint.clone()).await;
    let t = s.tenant("acme").await;
    let id = tenant_account(&s, &t, "listed", &endpoint, "none").await;
    let scanned = scan_as(&s, &t, "acme", &id).await;
    // Listed by IP: the call is made (the operator allowed that address).
    assert!(!listener.requests().is_empty());
    assert_eq!(
        scanned.err(503, "UNAVAILABLE"),
        &json!({ "reason": "provider-error", "status": 500 })
    );
    assert!(
        !scanned.body.to_string().contains("10.20.30.40"),
        "{}",
        scanned.body
    );
    // A closed port answers the same way as an open one that fails: no
    // transport text, no status.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let s2 = Server::start_with_env("BC_PROVIDER_ENDPOINTS", "http://127.0.0.1:*").await;
    let t2 = s2.tenant("acme").await;
    let id = tenant_account(
        &s2,
        &t2,
        "closed",
        &format!("http://127.0.0.1:{closed}"),
        "none",
    )
    .await;
    let scanned = scan_as(&s2, &t2, "acme", &id).await;
    assert_eq!(
        scanned.err(503, "UNAVAILABLE"),
        &json!({ "reason": "provider-error" })
    );
    let text = scanned.body.to_string().to_ascii_lowercase();
    assert!(
        !text.contains("refused") && !text.contains("connect"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_cannot_bind_its_own_reservation_into_a_platform_pool() {
    let (s, p) = platform_at_t0(2).await;
    let t = p.tenant_token.clone();
    // acme's own GCE project, with a reservation of the pool's flavor.
    let own = Gce::start().await;
    own.put("acme-res", 8, 0, "READY").await;
    let mut body = account_body("own", &own.url, "none");
    body["config"]["project"] = json!(PROJECT);
    let a = s.call(&t, "providerAccounts/create", body).await.ok();
    let acct = a["account"]["accountId"]
        .as_str()
        .expect("accountId")
        .to_owned();
    let found = scan_as(&s, &t, "acme", &acct).await.ok();
    let res = found["items"][0]["reservationId"]
        .as_str()
        .expect("reservation")
        .to_owned();
    let body = json!({ "tenantId": "acme", "accountId": acct, "reservationId": res,
                       "poolId": p.pool });
    s.call(&t, "providerAccounts/bindReservation", body)
        .await
        .err(403, "ACCESS_DENIED");
    // Root cannot bind it either: the account is not root's.
    bind(&s, &acct, &res, &p.pool).await.err(404, "NOT_FOUND");
    // Nothing changed: the reservation serves no pool, and once the
    // platform's own reservation is full, the pool has no slot to give.
    let listed = list_reservations_as(&s, &t, "acme", &acct).await.ok();
    assert!(listed["items"][0].get("poolId").is_none(), "{listed}");
    for _ in 0..2 {
        let i = InstanceBuilder::new(&p).create(&s).await;
        assert_eq!(i["placement"]["reservationId"], p.reservation.as_str());
    }
    let full = s
        .call(
            &t,
            "instances/create",
            InstanceBody::new(&p.pool, "third").tenant("acme").json(),
        )
        .await;
    let d = full.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(d["reservationId"], p.reservation.as_str(), "{d}");
}
