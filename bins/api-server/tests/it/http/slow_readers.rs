//! Slow readers and bodies after authentication (contract 1.7 r4): a client
//! that never reads its answers is cut off once they make no progress for
//! `BC_HTTP_WRITE_TIMEOUT_MS`, however many connections it opens; an idle
//! connection is closed after the head deadline; an unauthenticated request
//! is answered 401 without its body being waited for or buffered.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::server::{Options, ROOT_TOKEN, Server, metric};

fn addr(s: &Server) -> std::net::SocketAddr {
    s.url
        .trim_start_matches("http://")
        .parse()
        .expect("the server's address")
}

/// A connection with a small receive buffer that asks for the OpenAPI
/// document `n` times at once (pipelined) and never reads: the answers
/// (about half a megabyte each) fill every buffer on the way and the
/// server's writes stop making progress.
///
/// Past the listen backlog a connect waits for the server to accept (the
/// kernel retries the SYN); one that gives up is tried again, a few times.
async fn never_reading(s: &Server, n: usize) -> TcpStream {
    let mut tries = 0;
    let mut c = loop {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        match socket.connect(addr(s)).await {
            Ok(c) => break c,
            Err(e) if tries < 3 => {
                tries += 1;
                eprintln!("connect failed ({e}), again");
            }
            Err(e) => panic!("connect: {e} (the server accepts nobody)"),
        }
    };
    let ask = "GET /api/openapi.json HTTP/1.1\r\nHost: bc\r\n\r\n".repeat(n);
    c.write_all(ask.as_bytes()).await.expect("send");
    c
}

/// Whether the server closed `c` within `within` (what it sent is read and
/// dropped: the test reads only to see the end).
async fn closed_within(c: &mut TcpStream, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// 1,000 connections that each ask for the OpenAPI document and never
/// read it, under a descriptor limit that caps the server at 128
/// connections: a normal client queued behind all of them is served, each
/// of them is closed once its answer makes no progress for the write
/// deadline, and the metrics count them. (Without a write deadline the
/// first 128 hold every connection slot for good and nobody else is
/// served.)
#[tokio::test(flavor = "multi_thread")]
async fn clients_that_never_read_are_cut_off_and_the_others_served() {
    let s = Server::start_with(Options {
        env: vec![
            ("BC_HTTP_WRITE_TIMEOUT_MS".into(), "2000".into()),
            ("BC_HTTP_HEADER_TIMEOUT_MS".into(), "60000".into()),
        ],
        fd_limit: Some(256),
        ..Options::default()
    })
    .await;
    let opened = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..1000 {
        stalled.push(never_reading(&s, 20).await);
    }
    // A normal client, behind all of them in the backlog.
    let fresh = reqwest::Client::new()
        .post(format!("{}/api/compute/tenants/list", s.url))
        .bearer_auth(ROOT_TOKEN)
        .json(&json!({ "tenantId": "root" }))
        .send();
    let answer = tokio::time::timeout(Duration::from_secs(240), fresh)
        .await
        .expect("the normal client is served once the readers that never read are cut off")
        .expect("an answer");
    assert_eq!(answer.status().as_u16(), 200);
    eprintln!(
        "normal client served {:?} after 1,000 non-readers connected",
        opened.elapsed()
    );
    for (i, c) in stalled.iter_mut().enumerate() {
        assert!(
            closed_within(c, Duration::from_secs(120)).await,
            "non-reading connection {i} still open"
        );
    }
    let (_, metrics) = s.get_text("/metrics").await;
    let cut = metric(&metrics, "bc_api_client_timeouts_total{phase=\"write\"}");
    assert!(cut >= 1000.0, "write timeouts counted: {cut}");
    assert!(
        metrics.contains("\nbc_api_accept_errors_total 0\n"),
        "{metrics}"
    );
}

/// A keep-alive connection left idle after its answer is closed once the
/// head deadline passes: idle connections do not pile up.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_connection_is_closed_after_the_head_deadline() {
    let s = Server::start_with(Options {
        env: vec![("BC_HTTP_HEADER_TIMEOUT_MS".into(), "1500".into())],
        ..Options::default()
    })
    .await;
    let mut c = TcpStream::connect(addr(&s)).await.expect("connect");
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: bc\r\n\r\n")
        .await
        .expect("send");
    let mut buf = vec![0u8; 4096];
    let n = c.read(&mut buf).await.expect("answer");
    let head = String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let idle = Instant::now();
    assert!(
        closed_within(&mut c, Duration::from_secs(30)).await,
        "the idle connection stayed open"
    );
    assert!(
        idle.elapsed() >= Duration::from_millis(1400),
        "closed before the deadline: {:?}",
        idle.elapsed()
    );
}

/// Sends a head announcing a body of 500,000 bytes, none of which comes,
/// with `authorization` if any; the answer's status line and body.
async fn head_without_body(s: &Server, authorization: Option<&str>) -> (String, serde_json::Value) {
    let mut c = TcpStream::connect(addr(s)).await.expect("connect");
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /api/compute/tenants/list HTTP/1.1\r\nHost: bc\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: 500000\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.expect("send");
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while !String::from_utf8_lossy(&out).contains("\"error\"")
            || !String::from_utf8_lossy(&out).ends_with('}')
        {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(buf.get(..n).unwrap_or_default()),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "no answer within 20 s: {:?}",
        String::from_utf8_lossy(&out)
    );
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, serde_json::from_str(body).expect("json"))
}

/// A request without a key, or with an unknown one, is answered 401 at
/// once, its announced body never waited for (the body deadline is a
/// minute here); with a valid key the same head waits for its body.
#[tokio::test(flavor = "multi_thread")]
async fn an_unauthenticated_request_is_answered_without_waiting_for_its_body() {
    let s = Server::start_with(Options {
        env: vec![("BC_HTTP_BODY_TIMEOUT_MS".into(), "60000".into())],
        ..Options::default()
    })
    .await;
    for auth in [None, Some("Bearer bck_not_a_key")] {
        let asked = Instant::now();
        let (status, body) = head_without_body(&s, auth).await;
        assert!(status.starts_with("HTTP/1.1 401"), "{status} {body}");
        assert_eq!(body["error"]["code"], "UNAUTHENTICATED", "{body}");
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "{:?}",
            asked.elapsed()
        );
    }
    // A valid key: the body is awaited (nothing comes within a few seconds).
    let mut c = TcpStream::connect(addr(&s)).await.expect("connect");
    let head = format!(
        "POST /api/compute/tenants/list HTTP/1.1\r\nHost: bc\r\n\
         Authorization: Bearer {ROOT_TOKEN}\r\nContent-Length: 500000\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.expect("send");
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_secs(3), c.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "a valid key's request was answered before its body came"
    );
}
