//! One traffic connection, from its first byte to its end: the protocol sniff or the TLS
//! handshake, the request-smuggling guard, HTTP/1 or the detecting builder behind the HTTP/2 abuse
//! guard, and the stack each of its requests takes ([`super::live`]). A connection past
//! `max_connections` is answered 503 and closed ([`refuse`]).
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::admission::{self, ConnectionPermit, Limit};
use super::h2guard::{self, AbuseCounters, Budgets, H2Guard};
use super::head;
use super::live::LiveStack;
use super::smuggling::{ConnectionFraming, GuardedStream};
use super::sniff;
use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::tenant::certificate::CertificateNames;
use crate::tls::{self, ServerTls};

/// What every traffic connection of a server run shares.
pub(super) struct Traffic {
    builders: TrafficBuilders,
    h2: (Budgets, Arc<AbuseCounters>),
    tls: Option<Arc<ServerTls>>,
    metrics: Arc<Metrics>,
    max_head: usize,
    first_byte_timeout: Duration,
}

impl Traffic {
    /// For the listener of `config` (its head limits are restart-only: one `Traffic` per run).
    pub(super) fn new(
        config: &ServerConfig,
        tls: Option<Arc<ServerTls>>,
        metrics: Arc<Metrics>,
        h2: (Budgets, Arc<AbuseCounters>),
    ) -> Self {
        Self {
            builders: TrafficBuilders::new(config),
            h2,
            tls,
            metrics,
            max_head: config.max_header_bytes,
            first_byte_timeout: config.header_read_timeout,
        }
    }

    /// Serves `stream`, accepted from `peer` under `permit`, until it ends (or the graceful
    /// shutdown `watcher` ends it; `stopping` gives up on a connection still waiting for its first
    /// byte or its handshake).
    pub(super) async fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        permit: ConnectionPermit,
        stack: LiveStack,
        watcher: Watcher,
        mut stopping: watch::Receiver<bool>,
    ) {
        let _permit = permit;
        let framing = ConnectionFraming::new();
        let io_framing = Arc::clone(&framing);
        let (budgets, abuse) = (self.h2.0, Arc::clone(&self.h2.1));
        let Some(tls) = &self.tls else {
            let service =
                TowerToHyperService::new(stack.for_connection(peer, false, None, framing));
            let first = sniff::first_bytes(&stream, self.first_byte_timeout, &mut stopping).await;
            let Some(http1) = first else {
                tracing::debug!(%peer, "no byte before header_read_timeout or shutdown: closed");
                return;
            };
            let io = GuardedStream::new(stream, io_framing, self.max_head);
            let builders = &self.builders;
            builders
                .serve(http1, io, (budgets, abuse), service, watcher, peer)
                .await;
            return;
        };
        let handshake = tls::acceptor::handshake(tls.acceptor(), stream, self.first_byte_timeout);
        let stream = tokio::select! {
            done = handshake => match done {
                Ok(stream) => stream,
                Err((failure, err)) => {
                    tls::series::handshake_failed(&self.metrics, "traffic", failure);
                    tracing::debug!(error = %err, %peer, reason = failure.as_str(), "TLS handshake failed");
                    return;
                }
            },
            _ = stopping.wait_for(|stop| *stop) => return,
        };
        // ALPN says the protocol; a client that offered none gets the detecting builder.
        let http1 = stream.get_ref().1.alpn_protocol() == Some(b"http/1.1");
        // The verified client certificate's names, read once for every request of the connection.
        let certificate = tls::acceptor::client_certificate(&stream)
            .map(|der| Arc::new(CertificateNames::from_der(der)));
        let service =
            TowerToHyperService::new(stack.for_connection(peer, true, certificate, framing));
        let io = GuardedStream::new(stream, io_framing, self.max_head);
        self.builders
            .serve(http1, io, (budgets, abuse), service, watcher, peer)
            .await;
    }
}

/// Serves one accepted connection until it ends (or the graceful shutdown ends it).
async fn serve<I, S, B>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    watcher: Watcher,
    peer: SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = http::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection = builder.serve_connection(TokioIo::new(io), service);
    if let Err(err) = watcher.watch(connection).await {
        tracing::debug!(error = %err, %peer, "connection ended with an error");
    }
}

/// The traffic port's two connection builders: `auto` detects HTTP/1 or h2c itself, `http1` is the
/// same configuration for connections already known to be HTTP/1 ([`sniff`]: it saves 8 KiB of
/// read buffer per connection).
struct TrafficBuilders {
    auto: auto::Builder<TokioExecutor>,
    http1: auto::Builder<TokioExecutor>,
}

impl TrafficBuilders {
    fn new(config: &ServerConfig) -> Self {
        let auto = traffic_builder(config);
        let http1 = auto.clone().http1_only();
        Self { auto, http1 }
    }

    /// Serves a connection known to speak HTTP/1 with the HTTP/1 builder; any other (h2c, TLS
    /// with ALPN `h2` or none) with the detecting builder, its frames counted against the HTTP/2
    /// abuse budgets.
    async fn serve<I, S, B>(
        &self,
        http1: bool,
        io: I,
        (budgets, abuse): (Budgets, Arc<AbuseCounters>),
        service: S,
        watcher: Watcher,
        peer: SocketAddr,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        S: hyper::service::Service<Request<Incoming>, Response = http::Response<B>>
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: http_body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if http1 {
            serve(&self.http1, io, service, watcher, peer).await;
        } else {
            let io = H2Guard::new(io, budgets, abuse);
            serve(&self.auto, io, service, watcher, peer).await;
        }
    }
}

/// The traffic port's HTTP/1 + h2c builder with the request-head limits of `[server]`.
fn traffic_builder(config: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .max_buf_size(config.max_header_bytes)
        .max_headers(config.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(config.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX))
        // Streams reset before hyper accepted them: as many as the guard's rapid-reset budget, so
        // the guard (which counts) trips first.
        .max_pending_accept_reset_streams(h2guard::budget::RESETS_PER_WINDOW as usize)
        // Streams the server resets for a client's protocol errors: a well-behaved client causes none.
        .max_local_error_reset_streams(Some(H2_MAX_LOCAL_ERROR_RESETS))
        // Response bytes queued per stream beyond the client's window (hyper: 400 KiB), x streams.
        .max_send_buf_size(H2_MAX_SEND_BUF_BYTES);
    builder
}

/// Resets of streams by the server for a client's errors after which h2 closes the connection
/// (hyper's default: 1024).
const H2_MAX_LOCAL_ERROR_RESETS: usize = 256;

/// Response bytes h2 may queue per stream beyond what the client's window lets out: a token stream
/// needs little, and with `http2_max_concurrent_streams` (256) streams that do not read it bounds a
/// connection at 16 MiB rather than hyper's 100 MiB (400 KiB each).
const H2_MAX_SEND_BUF_BYTES: usize = 64 * 1024;

/// How long a connection past `max_connections` may take to read its 503.
const REFUSE_DEADLINE: Duration = Duration::from_secs(2);

/// Answers every request of a connection past `max_connections` with 503 and closes it. Bounded in
/// time, so a flood of refused connections cannot pile up. Each request starts as every other does
/// ([`head`]: its tenant, its trace, the current revision's hooks) and ends at the finish point at
/// once (outcome `overloaded`).
pub(super) async fn refuse(stream: TcpStream, peer: SocketAddr, stack: LiveStack) {
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        // No TLS handshake is spent on a connection refused for load (so a TLS client's request
        // never gets this far), and the connection closes after this answer: nothing for the
        // smuggling guard to follow.
        let connection = head::Connection {
            peer,
            tls: false,
            certificate: None,
            conflicting_framing: false,
        };
        let revision = stack.current();
        let parts = head::Parts {
            hooks: &revision.hooks,
            tenants: revision.tenants.as_deref(),
            tracing: revision.tracing.as_deref(),
        };
        let context = head::start(parts, &mut req, connection);
        let refusal = admission::over_limit(Limit::Connections).closing();
        let response = admission::refuse(Some(context), refusal);
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(false);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(REFUSE_DEADLINE, connection).await;
}
