//! The backend of the overhead benchmark: a minimal streaming server with no model behind it, so
//! the proxy (not the model) is what is measured.
//!
//! It answers every POST with a vLLM-shaped chat-completions SSE stream. Each content chunk
//! carries, in its `delta.content`, the wall-clock instant (ns since the Unix epoch) at which the
//! backend handed it to the socket: `"content":"T1712345678901234567"`. The client, a separate
//! process on the same machine (same clock), subtracts it on arrival, which gives the one-way
//! latency of every chunk on every path; the proxy's added latency is the difference against the
//! direct path at the same percentile.
//!
//! The request's JSON picks the shape: `max_tokens` content chunks, `interval_us` between them
//! (0 = back to back, as fast as the connection drains), `hold_ms` = pause after the first chunk
//! (idle streams). The stream ends like vLLM's: a `finish_reason` chunk, the usage chunk when
//! `stream_options.include_usage` is set, `data: [DONE]`.
//!
//! With a certificate it also serves the same streams over TLS on a second port (the TLS paths:
//! a proxy that speaks TLS upstream, or the client straight to a TLS backend); every response on
//! it carries what its connection negotiated in [`BACKEND_TLS_HEADER`], which the proxies pass
//! through to the load client.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use super::tls::{describe, BACKEND_TLS_HEADER};
use super::wall_ns;

/// What one request asks for.
#[derive(Debug, Clone, Copy)]
struct Shape {
    chunks: u64,
    interval: Duration,
    hold: Duration,
    usage: bool,
}

impl Shape {
    fn parse(body: &[u8]) -> Shape {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let number = |name: &str, default: u64| value[name].as_u64().unwrap_or(default);
        Shape {
            chunks: number("max_tokens", 16),
            interval: Duration::from_micros(number("interval_us", 0)),
            hold: Duration::from_millis(number("hold_ms", 0)),
            usage: value["stream_options"]["include_usage"]
                .as_bool()
                .unwrap_or(false),
        }
    }
}

/// A body fed by the producer task through a small channel (backpressure: the producer waits
/// when the connection does not drain).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

const PREFIX: &str = r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":"T"#;
const SUFFIX: &str = "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

/// One content chunk stamped now (the instant it is handed to hyper, which writes it at once).
fn content_chunk() -> Bytes {
    Bytes::from(format!("{PREFIX}{:019}{SUFFIX}", wall_ns()))
}

fn tail(shape: Shape) -> Vec<Bytes> {
    let mut out = vec![Bytes::from_static(
        b"data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n",
    )];
    if shape.usage {
        out.push(Bytes::from(format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench\",\"choices\":[],\"usage\":{{\"prompt_tokens\":8,\"total_tokens\":{},\"completion_tokens\":{}}}}}\n\n",
            shape.chunks + 8,
            shape.chunks
        )));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

async fn produce(shape: Shape, tx: mpsc::Sender<Bytes>) {
    let mut next = tokio::time::Instant::now();
    for i in 0..shape.chunks {
        if i == 1 && !shape.hold.is_zero() {
            tokio::time::sleep(shape.hold).await;
            next = tokio::time::Instant::now();
        }
        if !shape.interval.is_zero() && i > 0 {
            // Absolute deadlines: a late tick does not push every later chunk back.
            next += shape.interval;
            tokio::time::sleep_until(next).await;
        }
        if tx.send(content_chunk()).await.is_err() {
            return; // the client went away
        }
    }
    for bytes in tail(shape) {
        if tx.send(bytes).await.is_err() {
            return;
        }
    }
}

/// `tls`: what this connection negotiated, when it is TLS (sent back in [`BACKEND_TLS_HEADER`]).
async fn handle(
    request: Request<Incoming>,
    tls: Option<HeaderValue>,
) -> Result<Response<ChannelBody>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let shape = Shape::parse(&body);
    let (tx, rx) = mpsc::channel(2);
    tokio::spawn(produce(shape, tx));
    let mut response = Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache");
    if let Some(tls) = tls {
        response = response.header(BACKEND_TLS_HEADER, tls);
    }
    let response = response
        .body(ChannelBody(rx))
        .unwrap_or_else(|_| Response::new(ChannelBody(mpsc::channel(1).1)));
    Ok(response)
}

/// Serves until killed: plain HTTP on `listen` and, with `tls`, HTTP over TLS on its address.
/// Prints `listening <plain addr> [<tls addr>]` once bound.
pub async fn run(
    listen: SocketAddr,
    tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
) -> std::io::Result<()> {
    // The accept queue tokenmeter uses (tokio's default of 128 drops SYNs when 1024 streams
    // connect at once, adding a second to the direct path's TTFT).
    let plain = tokenmeter::server::listen(listen, 4096)?;
    let tls = match tls {
        Some((addr, config)) => Some((
            tokenmeter::server::listen(addr, 4096)?,
            TlsAcceptor::from(config),
        )),
        None => None,
    };
    match &tls {
        Some((listener, _)) => println!(
            "listening {} {}",
            plain.local_addr()?,
            listener.local_addr()?
        ),
        None => println!("listening {}", plain.local_addr()?),
    }
    if let Some((listener, acceptor)) = tls {
        tokio::spawn(serve(listener, Some(acceptor)));
    }
    serve(plain, None).await;
    Ok(())
}

async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                // EMFILE under 10k streams: back off instead of dying.
                eprintln!("backend: accept: {err}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        tokio::spawn(async move {
            let http = http1::Builder::new();
            match tls {
                None => {
                    let service = service_fn(|request| handle(request, None));
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
                Some(acceptor) => {
                    let stream = match acceptor.accept(stream).await {
                        Ok(stream) => stream,
                        Err(err) => {
                            eprintln!("backend: TLS handshake: {err}");
                            return;
                        }
                    };
                    let negotiated = HeaderValue::from_str(&describe(stream.get_ref().1)).ok();
                    let service = service_fn(move |request| handle(request, negotiated.clone()));
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
            }
        });
    }
}
