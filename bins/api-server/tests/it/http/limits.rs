//! The HTTP limits of contract 1.7: a client that stalls is disconnected
//! and the others are served; connections over the cap wait in the backlog;
//! a shutdown does not wait on stalled clients.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::server::{Options, ROOT_TOKEN, Server};

/// A server with these limits (milliseconds).
async fn server_with(vars: &[(&str, &str)]) -> Server {
    Server::start_with_vars(vars).await
}

/// Asserts that the server's `/metrics` report `n` as its connection cap.
async fn assert_max_connections(s: &Server, n: u32) {
    let (_, metrics) = s.get_text("/metrics").await;
    assert!(
        metrics.contains(&format!("\nbc_api_max_connections {n}\n")),
        "{metrics}"
    );
}

fn addr(s: &Server) -> String {
    s.url.trim_start_matches("http://").to_owned()
}

/// Opens a connection and sends `bytes`, then nothing more.
async fn stall(addr: &str, bytes: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    c.write_all(bytes).await.expect("send");
    c
}

/// Half a request head: no blank line ever comes.
const HALF_HEAD: &[u8] = b"POST /api/compute/tenants/list HTTP/1.1\r\nHost: bc\r\nAuthoriz";

/// Reads until the server closes the connection (EOF or reset), at most
/// `within`; what it sent, or `None` if it kept the connection open.
async fn closed_within(c: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.is_ok().then_some(out)
}

/// 500 clients that send half a request head and stall do not keep a
/// normal client from its answers, and each of them is disconnected once
/// the header timeout has passed (on a server without one they stay open
/// for ever and, in numbers, use up its file descriptors).
#[tokio::test(flavor = "multi_thread")]
async fn stalled_heads_are_cut_off_and_the_others_served() {
    let s = server_with(&[("BC_HTTP_HEADER_TIMEOUT_MS", "4000")]).await;
    let a = addr(&s);
    let opened = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..500 {
        stalled.push(stall(&a, HALF_HEAD).await);
    }
    // Meanwhile a normal client keeps getting answers, fast: the stalled
    // connections hold no worker, no database connection, no lock.
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let t = Instant::now();
        let answer = if i % 2 == 0 {
            s.root("tenants/list", json!({})).await.ok()
        } else {
            serde_json::from_str(&s.get_text("/healthz").await.1).expect("json")
        };
        assert!(answer.is_object());
        slowest = slowest.max(t.elapsed());
    }
    eprintln!("slowest normal answer with 500 stalled clients: {slowest:?}");
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    // Every stalled client is disconnected, none before its deadline.
    for (i, c) in stalled.iter_mut().enumerate() {
        let left = Duration::from_secs(60).saturating_sub(opened.elapsed());
        let sent = closed_within(c, left).await;
        assert!(
            sent.is_some(),
            "stalled connection {i} still open after 60 s"
        );
    }
    let took = opened.elapsed();
    eprintln!("500 stalled connections closed {took:?} after they opened");
    assert!(
        took >= Duration::from_millis(3900),
        "closed before the timeout: {took:?}"
    );
    let (_, metrics) = s.get_text("/metrics").await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("bc_api_client_timeouts_total{phase=\"head\"}"))
        .unwrap_or_default();
    let counted: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(counted >= 500.0, "{line:?}");
}

/// A head with a valid key and without its body is answered 400
/// (`details { field: "body", reason: "timeout" }`) once the body deadline
/// passes, and the connection is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_body_is_answered_and_closed() {
    let s = server_with(&[("BC_HTTP_BODY_TIMEOUT_MS", "1500")]).await;
    let head = format!(
        "POST /api/compute/tenants/list HTTP/1.1\r\nHost: bc\r\n\
         Authorization: Bearer {ROOT_TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"tenantId\""
    );
    let mut c = stall(&addr(&s), head.as_bytes()).await;
    let sent = closed_within(&mut c, Duration::from_secs(30))
        .await
        .expect("the server closes a connection whose body stalls");
    let text = String::from_utf8_lossy(&sent);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let body = &text[text.find("\r\n\r\n").expect("a head") + 4..];
    let v: serde_json::Value = serde_json::from_str(body).expect("json");
    assert_eq!(v["error"]["code"], "INVALID_INPUT", "{v}");
    assert_eq!(v["error"]["details"]["field"], "body", "{v}");
    assert_eq!(v["error"]["details"]["reason"], "timeout", "{v}");
}

/// With `BC_HTTP_MAX_CONNECTIONS` connections open, the next client waits
/// in the listen backlog (it is not refused) and is served as soon as a
/// slot frees: never before the first stalled connection is closed.
#[tokio::test(flavor = "multi_thread")]
async fn connections_over_the_cap_wait_in_the_backlog() {
    let s = server_with(&[
        ("BC_HTTP_MAX_CONNECTIONS", "20"),
        ("BC_HTTP_HEADER_TIMEOUT_MS", "3000"),
    ])
    .await;
    assert_max_connections(&s, 20).await;
    // The metrics request's connection is closed by the client's pool only
    // when it idles out: wait for the server to see every slot free.
    let a = addr(&s);
    let mut stalled = Vec::new();
    for _ in 0..20 {
        stalled.push(stall(&a, HALF_HEAD).await);
    }
    let waiting = tokio::spawn({
        let a = a.clone();
        async move {
            let mut c = TcpStream::connect(&a).await.expect("queued in the backlog");
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: bc\r\nConnection: close\r\n\r\n")
                .await
                .expect("send");
            let sent = closed_within(&mut c, Duration::from_secs(60)).await;
            (Instant::now(), sent)
        }
    });
    let mut first_close = None;
    for c in &mut stalled {
        closed_within(c, Duration::from_secs(60))
            .await
            .expect("a stalled connection is closed");
        first_close.get_or_insert_with(Instant::now);
    }
    let (answered, sent) = waiting.await.expect("join");
    let sent = String::from_utf8_lossy(&sent.expect("the queued client is served")).into_owned();
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent}");
    let first_close = first_close.expect("closed");
    assert!(
        answered + Duration::from_millis(50) >= first_close,
        "the queued client was served before any slot freed"
    );
}

/// SIGTERM ends the process although clients hold connections in the
/// middle of a head and of a body: in-flight work gets the grace period,
/// then the rest are closed.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_with_stalled_connections_open() {
    let s = server_with(&[
        ("BC_HTTP_HEADER_TIMEOUT_MS", "600000"),
        ("BC_HTTP_BODY_TIMEOUT_MS", "600000"),
        ("BC_HTTP_SHUTDOWN_GRACE_MS", "1000"),
    ])
    .await;
    let a = addr(&s);
    let mid_body = format!(
        "POST /api/compute/tenants/list HTTP/1.1\r\nHost: bc\r\n\
         Authorization: Bearer {ROOT_TOKEN}\r\nContent-Length: 50\r\n\r\n{{"
    );
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(stall(&a, HALF_HEAD).await);
        held.push(stall(&a, mid_body.as_bytes()).await);
    }
    // Let the server read what was sent, so the bodies are in flight.
    s.get_text("/healthz").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let status = s.stop().await;
    eprintln!("stopped {:?} after SIGTERM", t.elapsed());
    assert!(status.success(), "{status:?}");
    drop(held);
}

/// Under a low file descriptor limit (`ulimit -n 256`), the connection cap
/// is fitted to it (256 - 128) and 300 stalled clients do not exhaust the
/// process: nothing fails to accept, the database pool still opens its
/// connections, and a normal client queued behind them in the backlog is
/// served as stalled ones are cut off. (Without a fitted cap the stalled
/// clients take every descriptor: accepts fail with EMFILE, and neither the
/// normal client nor the database pool gets one.)
#[tokio::test(flavor = "multi_thread")]
async fn a_low_descriptor_limit_is_never_exhausted_by_stalled_clients() {
    let s = Server::start_with(Options {
        env: vec![("BC_HTTP_HEADER_TIMEOUT_MS".into(), "3000".into())],
        fd_limit: Some(256),
        ..Options::default()
    })
    .await;
    assert_max_connections(&s, 128).await;
    let a = addr(&s);
    let mut stalled = Vec::new();
    for _ in 0..300 {
        stalled.push(stall(&a, HALF_HEAD).await);
    }
    // A normal client on a new connection, queued behind the stalled ones:
    // it needs a database connection for its answer.
    let fresh = reqwest::Client::new()
        .post(format!("{}/api/compute/tenants/list", s.url))
        .bearer_auth(ROOT_TOKEN)
        .json(&json!({ "tenantId": "root" }))
        .send();
    let answer = tokio::time::timeout(Duration::from_secs(90), fresh)
        .await
        .expect("the queued client is served once stalled clients are cut off")
        .expect("an answer");
    assert_eq!(answer.status().as_u16(), 200);
    let body: serde_json::Value = answer.json().await.expect("json");
    assert!(body["items"].is_array(), "{body}");
    for (i, c) in stalled.iter_mut().enumerate() {
        assert!(
            closed_within(c, Duration::from_secs(90)).await.is_some(),
            "stalled connection {i} still open"
        );
    }
    let (_, metrics) = s.get_text("/metrics").await;
    assert!(
        metrics.contains("\nbc_api_accept_errors_total 0\n"),
        "{metrics}"
    );
}
