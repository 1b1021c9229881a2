//! A minimal HTTP/1.1 keep-alive client (one hyper connection per load
//! worker, no pool, no redirects, no decompression) and the "trivial hyper
//! handler" ceiling server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::load::Op;

/// One keep-alive HTTP/1.1 connection.
pub struct HttpConn {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

impl HttpConn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<HttpConn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(HttpConn {
            sender,
            host: HeaderValue::from_str(&addr.to_string())?,
        })
    }

    /// POSTs a JSON body with a bearer token; returns status and body.
    pub async fn post(
        &mut self,
        path: &str,
        token: &str,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let req = Request::post(path)
            .header(header::HOST, self.host.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(body))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// A body for operation `i`.
pub type BodyFn = Arc<dyn Fn(u64) -> String + Send + Sync>;

/// A load worker POSTing to one path; anything but 200 fails the run.
pub struct HttpOp {
    conn: HttpConn,
    path: String,
    token: Arc<str>,
    body: BodyFn,
}

impl HttpOp {
    /// `clients` workers, each on its own connection to `addr`.
    pub async fn many(
        clients: usize,
        addr: SocketAddr,
        path: &str,
        token: &str,
        body: BodyFn,
    ) -> anyhow::Result<Vec<HttpOp>> {
        let token: Arc<str> = token.into();
        let mut out = Vec::with_capacity(clients);
        for _ in 0..clients {
            out.push(HttpOp {
                conn: HttpConn::connect(addr).await?,
                path: path.to_owned(),
                token: token.clone(),
                body: body.clone(),
            });
        }
        Ok(out)
    }
}

impl Op for HttpOp {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let body = Bytes::from((self.body)(i));
        let (status, answer) = self.conn.post(&self.path, &self.token, body).await?;
        if status != StatusCode::OK {
            bail!(
                "{} answered {status}: {}",
                self.path,
                String::from_utf8_lossy(&answer)
            );
        }
        Ok(())
    }
}

/// The ceiling server: answers every request with the same JSON body after
/// reading the request body, on its own two-thread runtime (as a separate
/// process would have), with the api-server's connection setup (auto
/// HTTP/1-or-2 builder, TCP_NODELAY).
pub struct FixedServer {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FixedServer {
    /// Starts serving `body` on an ephemeral loopback port.
    pub fn start(body: Bytes) -> anyhow::Result<FixedServer> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = TcpListener::from_std(std_listener) else {
                    return;
                };
                let builder = auto::Builder::new(TokioExecutor::new());
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { continue };
                            let _ = stream.set_nodelay(true);
                            let body = body.clone();
                            let service = service_fn(move |req: Request<Incoming>| {
                                let body = body.clone();
                                async move {
                                    let _ = req.into_body().collect().await;
                                    let mut resp = Response::new(Full::new(body));
                                    resp.headers_mut().insert(
                                        header::CONTENT_TYPE,
                                        HeaderValue::from_static("application/json"),
                                    );
                                    Ok::<_, Infallible>(resp)
                                }
                            });
                            let conn = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .into_owned();
                            tokio::spawn(async move {
                                let _ = conn.await;
                            });
                        }
                        _ = &mut stop_rx => break,
                    }
                }
            });
        });
        Ok(FixedServer {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for FixedServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
