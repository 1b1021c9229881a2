//! A webhook receiver on loopback: records every request (headers and body)
//! and answers each with the next status of its script (200 once the
//! script is used up).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request's headers, lower-case names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// The request's path.
    pub path: String,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// The answers still to give: (status, `Location`).
type Script = Arc<Mutex<VecDeque<(u16, Option<String>)>>>;

/// A running receiver.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`
    pub url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    script: Script,
}

impl Receiver {
    /// Starts one on an ephemeral port.
    pub async fn start() -> Receiver {
        Receiver::start_slow(0).await
    }

    /// Starts one that records each request and never answers it (an hour
    /// is never, for a test).
    pub async fn start_silent() -> Receiver {
        Receiver::start_slow(3_600_000).await
    }

    /// Starts one that takes `delay_ms` to answer each request.
    pub async fn start_slow(delay_ms: u64) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script: Script = Arc::default();
        let (s, q) = (seen.clone(), script.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (s, q) = (s.clone(), q.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (s, q) = (s.clone(), q.clone());
                        async move {
                            let at = std::time::Instant::now();
                            let path = req.uri().path().to_owned();
                            let headers = req
                                .headers()
                                .iter()
                                .map(|(n, v)| {
                                    (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                                })
                                .collect();
                            let body = req.into_body().collect().await?.to_bytes();
                            s.lock().expect("lock").push(Received {
                                headers,
                                body: String::from_utf8_lossy(&body).into_owned(),
                                path,
                                at,
                            });
                            let (status, location) =
                                q.lock().expect("lock").pop_front().unwrap_or((200, None));
                            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                            let mut resp = Response::builder().status(status);
                            if let Some(l) = location {
                                resp = resp.header("location", l);
                            }
                            Ok::<_, hyper::Error>(
                                resp.body(Full::new(Bytes::from_static(b"ok")))
                                    .expect("response"),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            url: format!("http://127.0.0.1:{port}/hook"),
            seen,
            script,
        }
    }

    /// The next answers, in order (status, `Location`).
    pub fn answer(&self, answers: &[(u16, Option<&str>)]) {
        let mut q = self.script.lock().expect("lock");
        for (status, location) in answers {
            q.push_back((*status, location.map(str::to_owned)));
        }
    }

    /// The event ids of every request so far, in arrival order.
    pub fn event_ids(&self) -> Vec<String> {
        self.seen()
            .iter()
            .map(|q| q.json()["eventId"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits up to `within` for `n` requests; answers how many came.
    pub async fn wait_for(&self, n: usize, within: std::time::Duration) -> usize {
        let deadline = std::time::Instant::now() + within;
        loop {
            let got = self.seen.lock().expect("lock").len();
            if got >= n || std::time::Instant::now() >= deadline {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Received> {
        self.seen.lock().expect("lock").clone()
    }
}

/// Whether `header` (`t=..,v1=..[,v1=..]`) signs `body` under `secret`.
pub fn signed_by(header: &str, body: &str, secret: &str) -> bool {
    use hmac::{Hmac, Mac};
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = Some(v.to_owned()),
            Some(("v1", v)) => sigs.push(v.to_owned()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(format!("{t}.{body}").as_bytes());
    let want = hex::encode(mac.finalize().into_bytes());
    sigs.contains(&want)
}
