use super::*;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::guard::{GuardedResolver, check_ip_literal};
use crate::policy::CREDENTIAL_DIR_VAR;
use crate::{ProviderReservation, ReservationProvider};

const ROOT: AccountOwner = AccountOwner::Root;
const TENANT: AccountOwner = AccountOwner::Tenant;

fn policy(vars: &[(&str, &str)]) -> Arc<ProviderPolicy> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Arc::new(ProviderPolicy::from_lookup(|name| vars.get(name).cloned()).expect("policy"))
}

fn provider_with(
    endpoint: &str,
    credentials: Credentials,
    owner: AccountOwner,
    policy: Arc<ProviderPolicy>,
    options: GceProviderOptions,
) -> GceProvider {
    GceProvider::new(
        GceConfig {
            project: "my-project".into(),
            endpoint: endpoint.into(),
            credentials,
        },
        options,
        ProviderAccess::new(owner, policy),
    )
    .expect("client")
}

fn root_provider(credentials: Credentials, policy: Arc<ProviderPolicy>) -> GceProvider {
    provider_with(
        "http://127.0.0.1:9",
        credentials,
        ROOT,
        policy,
        GceProviderOptions::default(),
    )
}

/// Options resolving `name` to `ip` (and nothing else), with a short
/// connect timeout so that a guard that failed to refuse shows as a
/// timeout or transport error rather than a hang.
fn resolving(name: &str, ips: &[IpAddr]) -> GceProviderOptions {
    GceProviderOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(5),
        dns_overrides: BTreeMap::from([(name.to_owned(), ips.to_vec())]),
        ..GceProviderOptions::default()
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

async fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

/// Asserts that nothing connected to `listener`. Every call under test has
/// finished before this runs, so a connection it made is already queued.
async fn assert_no_connection(listener: &TcpListener) {
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "something connected: {accepted:?}");
}

/// Accepts one connection and answers an empty reservation list; returns
/// the request head it read.
async fn serve_one_empty_list(listener: &TcpListener) -> String {
    let (mut socket, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .expect("a connection within 5 s")
        .expect("accept");
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.expect("read");
        assert!(n > 0, "the client closed before sending its request");
        head.extend_from_slice(&buf[..n]);
    }
    let body = b"{}";
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(response.as_bytes()).await.expect("write");
    socket.write_all(body).await.expect("write");
    String::from_utf8_lossy(&head).into_owned()
}

/// Runs a listing while a listener serves it once; answers the listing's
/// result and the request head.
async fn list_served(
    provider: &GceProvider,
    listener: &TcpListener,
) -> (Result<Vec<ProviderReservation>, ProviderError>, String) {
    let (result, head) = tokio::join!(provider.list_reservations(), serve_one_empty_list(listener));
    (result, head)
}

#[test]
fn defaults() {
    let o = GceProviderOptions::default();
    assert_eq!(o.connect_timeout, Duration::from_secs(5));
    assert_eq!(o.request_timeout, Duration::from_secs(30));
    assert_eq!(o.page_size, None);
    assert!(o.dns_overrides.is_empty());
    let p = root_provider(Credentials::None, Arc::default());
    assert_eq!(
        p.list_url.as_str(),
        "http://127.0.0.1:9/compute/v1/projects/my-project/aggregated/reservations"
    );
    assert_eq!(p.access().owner, ROOT);
}

#[tokio::test]
async fn no_credentials_no_header() {
    let p = root_provider(Credentials::None, Arc::default());
    assert_eq!(p.current_authorization().await, Ok(None));
}

#[tokio::test]
async fn token_from_a_file_is_sensitive_and_trimmed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("token");
    let policy = policy(&[(CREDENTIAL_DIR_VAR, dir.path().to_str().expect("utf-8"))]);
    let provider = || root_provider(Credentials::File(path.clone()), Arc::clone(&policy));
    std::fs::write(&path, "tok-123\n").expect("write");
    let value = provider()
        .current_authorization()
        .await
        .expect("token")
        .expect("header");
    assert_eq!(value.to_str().expect("ascii"), "Bearer tok-123");
    assert!(value.is_sensitive());
    assert!(!format!("{value:?}").contains("tok-123"));

    std::fs::write(&path, "line one\nline two").expect("write");
    let err = provider()
        .current_authorization()
        .await
        .expect_err("not a token");
    assert!(!err.to_string().contains("line"), "{err}");
    std::fs::write(&path, "  \n").expect("write");
    assert!(matches!(
        provider().current_authorization().await,
        Err(ProviderError::Credentials(_))
    ));
    std::fs::remove_file(&path).expect("remove");
    let err = provider()
        .current_authorization()
        .await
        .expect_err("missing");
    assert!(err.to_string().contains("cannot read token file"), "{err}");
}

#[tokio::test]
async fn missing_env_var_is_a_credentials_error() {
    let name = "PROVIDERS_TEST_SURELY_UNSET_TOKEN";
    let err = root_provider(
        Credentials::Env(name.into()),
        policy(&[("BC_CREDENTIAL_ENV", "PROVIDERS_TEST_*")]),
    )
    .current_authorization()
    .await
    .expect_err("unset");
    assert_eq!(
        err,
        ProviderError::Credentials(
            "environment variable PROVIDERS_TEST_SURELY_UNSET_TOKEN is not set".into()
        )
    );
}

#[tokio::test]
async fn unreachable_endpoint_is_a_transport_error() {
    // A port that was just free: connecting to it is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port();
    let err = provider_with(
        &format!("http://127.0.0.1:{port}"),
        Credentials::None,
        ROOT,
        Arc::default(),
        GceProviderOptions::default(),
    )
    .list_reservations()
    .await
    .expect_err("nothing listens");
    match err {
        ProviderError::Transport(m) => assert!(!m.contains("for url"), "{m}"),
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_reference_no_longer_allowed_fails_without_touching_the_network() {
    let (listener, port) = listener().await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("temp dir");
    let outside = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(outside.path(), "the server's secret").expect("write");
    let dir_policy = policy(&[(CREDENTIAL_DIR_VAR, dir.path().to_str().expect("utf-8"))]);
    let cases = [
        // The root tenant's references, not (or no longer) listed.
        (
            Credentials::Env("BC_BOOTSTRAP_TOKEN".into()),
            ROOT,
            Arc::default(),
        ),
        (Credentials::Env("HOME".into()), ROOT, Arc::default()),
        (
            Credentials::File("/etc/hostname".into()),
            ROOT,
            Arc::default(),
        ),
        (
            Credentials::File(outside.path().into()),
            ROOT,
            Arc::clone(&dir_policy),
        ),
        (Credentials::Adc, TENANT, Arc::default()),
    ];
    for (credentials, owner, policy) in cases {
        let shown = credentials.to_string();
        let p = provider_with(
            &endpoint,
            credentials,
            owner,
            policy,
            GceProviderOptions::default(),
        );
        let err = p.list_reservations().await.expect_err(&shown);
        let ProviderError::NotAllowed(message) = &err else {
            panic!("{shown}: expected NotAllowed, got {err:?}");
        };
        assert!(
            message.starts_with("config.credentials: credential-not-allowed"),
            "{shown}: {message}"
        );
        assert!(!err.is_retryable());
        assert_eq!(err.status(), None);
        assert!(!err.to_string().contains("the server's secret"), "{err}");
    }
    // A tenant: `env:`, `file:` and `adc` are refused, whatever the policy
    // (`secret:` is its own, resolved in its tenant).
    let generous = policy(&[
        (
            "BC_PROVIDER_ENDPOINTS",
            &format!("{endpoint}, http://localhost:*"),
        ),
        ("BC_CREDENTIAL_ENV", "HOME,PATH,GCE_*"),
        (CREDENTIAL_DIR_VAR, dir.path().to_str().expect("utf-8")),
    ]);
    std::fs::write(dir.path().join("token"), "tok").expect("write");
    for credentials in [
        Credentials::Env("HOME".into()),
        Credentials::File(dir.path().join("token")),
        Credentials::Adc,
    ] {
        let shown = credentials.to_string();
        let p = provider_with(
            &endpoint,
            credentials,
            TENANT,
            Arc::clone(&generous),
            GceProviderOptions::default(),
        );
        let err = p.list_reservations().await.expect_err(&shown);
        assert!(
            matches!(&err, ProviderError::NotAllowed(m) if m.contains("credential-not-allowed")),
            "{shown}: {err:?}"
        );
    }
    // A tenant endpoint that is not listed.
    let p = provider_with(
        &endpoint,
        Credentials::None,
        TENANT,
        Arc::default(),
        GceProviderOptions::default(),
    );
    let err = p.list_reservations().await.expect_err("not listed");
    let ProviderError::NotAllowed(message) = &err else {
        panic!("expected NotAllowed, got {err:?}");
    };
    assert!(
        message.starts_with("config.endpoint: endpoint-not-allowed"),
        "{message}"
    );
    assert_no_connection(&listener).await;
}

#[tokio::test]
async fn a_listed_tenant_ip_endpoint_is_reached() {
    let (listener, port) = listener().await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let p = provider_with(
        &endpoint,
        Credentials::None,
        TENANT,
        policy(&[("BC_PROVIDER_ENDPOINTS", &endpoint)]),
        GceProviderOptions::default(),
    );
    let (result, head) = list_served(&p, &listener).await;
    assert_eq!(result, Ok(vec![]));
    assert!(
        head.starts_with("GET /compute/v1/projects/my-project/aggregated/reservations HTTP/1.1"),
        "{head}"
    );
    assert!(
        !head.to_ascii_lowercase().contains("authorization"),
        "{head}"
    );
}

#[tokio::test]
async fn a_listed_localhost_is_reached() {
    let (listener, port) = listener().await;
    let endpoint = format!("http://localhost:{port}");
    let listed = policy(&[("BC_PROVIDER_ENDPOINTS", "http://localhost:*")]);
    // Through an override, and through the system resolver.
    for options in [
        resolving("localhost", &[ip("127.0.0.1")]),
        GceProviderOptions::default(),
    ] {
        let p = provider_with(
            &endpoint,
            Credentials::None,
            TENANT,
            Arc::clone(&listed),
            options,
        );
        let (result, _) = list_served(&p, &listener).await;
        assert_eq!(result, Ok(vec![]));
    }
}

#[tokio::test]
async fn a_name_resolving_inside_the_platform_is_refused_for_tenants() {
    let (listener, port) = listener().await;
    let endpoint = format!("http://evil.example:{port}");
    let listed = policy(&[("BC_PROVIDER_ENDPOINTS", "http://evil.example:*")]);
    for internal in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "100.64.0.1",
    ] {
        let p = provider_with(
            &endpoint,
            Credentials::None,
            TENANT,
            Arc::clone(&listed),
            resolving("evil.example", &[ip(internal)]),
        );
        let err = p.list_reservations().await.expect_err(internal);
        let ProviderError::NotAllowed(message) = &err else {
            panic!("{internal}: expected NotAllowed, got {err:?}");
        };
        assert!(
            message.starts_with("refusing to connect to evil.example"),
            "{message}"
        );
        assert!(message.contains(internal), "{message}");
        assert!(!err.is_retryable());
    }
    // Several addresses, all internal: refused as well.
    let p = provider_with(
        &endpoint,
        Credentials::None,
        TENANT,
        Arc::clone(&listed),
        resolving(
            "evil.example",
            &[ip("127.0.0.1"), ip("::1"), ip("10.0.0.1")],
        ),
    );
    assert!(matches!(
        p.list_reservations().await,
        Err(ProviderError::NotAllowed(_))
    ));
    assert_no_connection(&listener).await;

    // The same name and address for a root account: not guarded.
    let root = provider_with(
        &endpoint,
        Credentials::None,
        ROOT,
        Arc::default(),
        resolving("evil.example", &[ip("127.0.0.1")]),
    );
    let (result, head) = list_served(&root, &listener).await;
    assert_eq!(result, Ok(vec![]));
    assert!(
        head.to_ascii_lowercase().contains("host: evil.example"),
        "{head}"
    );
}

#[tokio::test]
async fn the_resolver_drops_internal_addresses_and_keeps_the_rest() {
    let overrides = BTreeMap::from([
        (
            "Mixed.Example".to_owned(),
            vec![ip("127.0.0.1"), ip("93.184.215.14"), ip("10.0.0.1")],
        ),
        ("inside.example".to_owned(), vec![ip("192.168.0.10")]),
        ("nothing.example".to_owned(), vec![]),
    ]);
    let tenant = GuardedResolver::new(Some(Arc::default()), &overrides);
    let got = tenant
        .lookup("mixed.example")
        .await
        .expect("a public address remains");
    assert_eq!(got, vec![SocketAddr::new(ip("93.184.215.14"), 0)]);
    let err = tenant
        .lookup("inside.example")
        .await
        .expect_err("all internal");
    assert!(crate::guard::refusal_in(err.as_ref()).is_some(), "{err}");
    // No address at all is a resolution failure, not a refusal.
    let none = tenant
        .lookup("nothing.example")
        .await
        .expect("no addresses");
    assert!(none.is_empty());
    // The system resolver's answer is filtered too (no override, no DNS:
    // `localhost` comes from the hosts file).
    let err = tenant.lookup("localhost").await.expect_err("loopback only");
    assert!(crate::guard::refusal_in(err.as_ref()).is_some(), "{err}");
    // A root account's resolver filters nothing.
    let root = GuardedResolver::new(None, &overrides);
    assert_eq!(root.lookup("inside.example").await.expect("root").len(), 1);
    assert_eq!(root.lookup("MIXED.example").await.expect("root").len(), 3);
}

#[test]
fn internal_ip_literals_are_refused_before_the_request() {
    let default = ProviderPolicy::default();
    for url in [
        "http://127.0.0.1:8085/x",
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.0.1/",
        "http://169.254.169.254/computeMetadata/v1/",
        "http://[::1]:8085/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0:8085/",
        // Spellings the URL parser turns into 127.0.0.1.
        "http://2130706433/",
        "http://0x7f.1/",
    ] {
        let parsed = reqwest::Url::parse(url).expect("url");
        let err = check_ip_literal(&parsed, &default).expect_err(url);
        assert!(
            matches!(&err, ProviderError::NotAllowed(m) if m.starts_with("refusing to connect")),
            "{url}: {err:?}"
        );
    }
    for url in [
        "http://8.8.8.8/",
        "https://[2001:4860:4860::8888]/",
        "https://evil.example/",
    ] {
        let parsed = reqwest::Url::parse(url).expect("url");
        assert_eq!(check_ip_literal(&parsed, &default), Ok(()), "{url}");
    }
    // Listed by IP: exempt.
    let listed = policy(&[(
        "BC_PROVIDER_ENDPOINTS",
        "http://127.0.0.1:*, http://[::1]:8085",
    )]);
    for url in ["http://127.0.0.1:8085/", "http://[::1]:8085/"] {
        let parsed = reqwest::Url::parse(url).expect("url");
        assert_eq!(check_ip_literal(&parsed, &listed), Ok(()), "{url}");
    }
    let parsed = reqwest::Url::parse("http://127.0.0.2/").expect("url");
    assert!(check_ip_literal(&parsed, &listed).is_err());
}

const PROXY_MARKER: &str = "PROVIDERS_TEST_PROXY_CHILD";

/// Tenant clients ignore `http_proxy` (a proxy would connect for them, past
/// the guard); root clients honour it. Setting a variable in this process
/// needs `unsafe` (forbidden here), so the test runs itself again as a
/// child process with the proxy variables set, and the child does the checks.
#[test]
fn tenant_clients_ignore_environment_proxies() {
    if std::env::var_os(PROXY_MARKER).is_none() {
        let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "gce::tests::tenant_clients_ignore_environment_proxies",
                "--exact",
                "--test-threads=1",
            ])
            .env(PROXY_MARKER, "1")
            // Port 1: nothing listens, so a proxied request fails to connect.
            .env("http_proxy", "http://127.0.0.1:1")
            .env("HTTP_PROXY", "http://127.0.0.1:1")
            .env("all_proxy", "http://127.0.0.1:1")
            .env_remove("no_proxy")
            .env_remove("NO_PROXY")
            .output()
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child test failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (listener, port) = listener().await;
        let endpoint = format!("http://127.0.0.1:{port}");
        let tenant = provider_with(
            &endpoint,
            Credentials::None,
            TENANT,
            policy(&[("BC_PROVIDER_ENDPOINTS", &endpoint)]),
            GceProviderOptions::default(),
        );
        let (result, _) = list_served(&tenant, &listener).await;
        assert_eq!(result, Ok(vec![]), "the tenant client went direct");
        let root = provider_with(
            &endpoint,
            Credentials::None,
            ROOT,
            Arc::default(),
            GceProviderOptions::default(),
        );
        let err = root
            .list_reservations()
            .await
            .expect_err("through the dead proxy");
        assert!(matches!(err, ProviderError::Transport(_)), "{err:?}");
        assert_no_connection(&listener).await;
    });
}
