//! A bare proxy on hyper's server and client: what the plain way to build a proxy on tokenmeter's
//! stack costs per chunk, for comparison.
//!
//! It forwards every request to one upstream and streams the response back frame by frame, with
//! nothing else: hyper's HTTP/1 server on the client side, hyper's HTTP/1 client on the upstream
//! side (one upstream connection per client connection, opened on its first request and kept),
//! tokio's multi-threaded runtime, `TCP_NODELAY` both ways. No metering, no routing, no metrics,
//! no header rewriting, no timeouts. tokenmeter pays for all of those, but talks to upstreams
//! with its own HTTP/1 client (`src/proxy/h1`); the difference between this path and
//! `tokenmeter-unmetered` is mostly hyper's client against that one (docs/performance.md).
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1 as client;
use hyper::server::conn::http1 as server;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

type Body = BoxBody<Bytes, hyper::Error>;

/// The upstream connection of one client connection: opened on the first request, reopened
/// when the upstream closed it.
struct Upstream {
    addr: SocketAddr,
    sender: Mutex<Option<client::SendRequest<Incoming>>>,
}

impl Upstream {
    async fn send(&self, request: Request<Incoming>) -> Result<Response<Incoming>, String> {
        let mut sender = self.sender.lock().await;
        if !sender.as_ref().is_some_and(|s| !s.is_closed()) {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            let (send, conn) = client::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            *sender = Some(send);
        }
        let send = sender.as_mut().ok_or("no upstream connection")?;
        send.ready().await.map_err(|e| e.to_string())?;
        send.send_request(request).await.map_err(|e| e.to_string())
    }
}

async fn forward(
    upstream: Arc<Upstream>,
    request: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    match upstream.send(request).await {
        Ok(response) => Ok(response.map(BodyExt::boxed)),
        Err(err) => {
            eprintln!("bare: upstream: {err}");
            let mut response = Response::new(
                http_body_util::Full::new(Bytes::from_static(b"upstream failed"))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            Ok(response)
        }
    }
}

/// Serves until killed. Prints `listening <addr>` once bound.
pub async fn run(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<()> {
    // The accept queue tokenmeter uses, so the two differ only in what they do per request.
    let listener = tokenmeter::server::listen(listen, 4096)?;
    println!("listening {}", listener.local_addr()?);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                eprintln!("bare: accept: {err}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let upstream = Arc::new(Upstream {
            addr: upstream,
            sender: Mutex::new(None),
        });
        tokio::spawn(async move {
            let service = service_fn(move |request| forward(Arc::clone(&upstream), request));
            let _ = server::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
