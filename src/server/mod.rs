//! Listeners, the tower stack, admin routes and graceful shutdown.
//!
//! The traffic listener serves HTTP/1.1 and h2c on one port (hyper-util's auto builder) through the
//! stack `admission -> meter -> plan -> dispatch -> forward` ([`live`]). The admin listener, kept on its own port so API clients never
//! see metrics, serves `/metrics`, `/healthz` and `/readyz`.
//!
//! Hostile clients meet the limits of `[server]`: the HTTP/1 head must arrive within
//! `header_read_timeout` and fit `max_header_bytes` / `max_headers`; HTTP/2 connections get
//! `http2_max_concurrent_streams` and the abuse budgets of [`h2guard`]; connections past
//! `max_connections` and requests past `max_streams` are answered 503 at once
//! ([`crate::server::admission`]).
//!
//! Shutdown: `/readyz` turns 503, the traffic listener closes, in-flight streams may finish for
//! `server.shutdown_grace`, then whatever is left is cut (its bodies are dropped, so each is counted
//! as `cancelled`).
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Request};

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use admission::{Limit, Limits};
use h2guard::{AbuseCounters, Budgets, H2Guard};
pub use listen::listen;
use live::LiveStack;
use reload::{Applied, ConfigSource, ReloadRequest};
use smuggling::{ConnectionFraming, GuardedStream};

use crate::config::{Config, ConfigError, ServerConfig, ServerTlsConfig};
use crate::context::{FinishHook, FinishHooks, RequestContext};
use crate::meter::series::MeterSeries;
use crate::metrics::{Metrics, MetricsError};
use crate::proxy::client::{self, UpstreamClient};
use crate::route::{self, RouteError, Router};
use crate::tls::acceptor::{ALPN_ADMIN, ALPN_TRAFFIC};
use crate::tls::{self, ServerTls};
use crate::upstream::UpstreamError;

mod admin;
pub mod admission;
pub mod h2guard;
mod listen;
pub mod live;
pub mod reload;
pub mod series;
pub mod smuggling;
mod sniff;

/// How often histogram samples are folded into buckets (keeps memory flat between scrapes).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot bind {what} listener on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A listener's TLS files do not load (the error names the key).
    #[error(transparent)]
    Tls(#[from] ConfigError),
}

/// Binds the traffic and admin listeners from the config.
/// Both listen with `server.listen_backlog` (see [`listen()`]).
pub async fn bind(config: &Config) -> Result<(TcpListener, TcpListener), ServerError> {
    let backlog = config.server.listen_backlog;
    let bind = |what, addr| {
        listen(addr, backlog).map_err(|source| ServerError::Bind { what, addr, source })
    };
    let traffic = bind("traffic", config.server.listen)?;
    let admin = bind("admin", config.server.admin_listen)?;
    Ok((traffic, admin))
}

/// A running proxy started by [`spawn`] (tests and the demo use it).
#[derive(Debug)]
pub struct ServerHandle {
    pub traffic_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    /// Admission state: open connections, requests in flight, rejections.
    pub limits: Arc<Limits>,
    reloads: mpsc::Sender<ReloadRequest>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ServerHandle {
    /// Applies `config` as a reload would (SIGHUP with this file): new requests get it, streams
    /// in flight finish where they are; refused (and the running config kept) when it does not
    /// load, with the reason.
    pub async fn reload(&self, config: Config) -> Result<Applied, String> {
        let (reply, answer) = oneshot::channel();
        let request = ReloadRequest {
            trigger: reload::Trigger::Handle,
            config: Some(config),
            reply: Some(reply),
        };
        self.reloads
            .send(request)
            .await
            .map_err(|_| "the server has stopped".to_owned())?;
        answer
            .await
            .map_err(|_| "the server has stopped".to_owned())?
    }

    /// Starts the graceful shutdown and waits until it is complete.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Starts the proxy on bound listeners in a background task.
pub fn spawn(
    config: Config,
    traffic: TcpListener,
    admin: TcpListener,
) -> Result<ServerHandle, ServerError> {
    spawn_with_hooks(config, traffic, admin, Vec::new())
}

/// [`spawn`], with `hooks` run at the end of every request after the proxy's own (see
/// [`crate::context::finish`]).
pub fn spawn_with_hooks(
    config: Config,
    traffic: TcpListener,
    admin: TcpListener,
    hooks: Vec<Arc<dyn FinishHook>>,
) -> Result<ServerHandle, ServerError> {
    let traffic_addr = local_addr(&traffic)?;
    let admin_addr = local_addr(&admin)?;
    let metrics = Arc::new(Metrics::new(&config)?);
    let (stop, mut stopped) = watch::channel(false);
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let server = hooks.into_iter().try_fold(
        Server::new(config, Arc::clone(&metrics))?,
        |server, hook| Ok::<_, ServerError>(server.with_finish_hook(hook)),
    )?;
    let limits = Arc::clone(&server.limits);
    let reloads = server.reloads();
    let task = tokio::spawn(server.run(traffic, admin, shutdown));
    Ok(ServerHandle {
        traffic_addr,
        admin_addr,
        metrics,
        limits,
        reloads,
        stop,
        task,
    })
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, ServerError> {
    listener.local_addr().map_err(|source| ServerError::Bind {
        what: "local",
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}

/// The proxy: its config, metrics, and readiness.
pub struct Server {
    config: Config,
    metrics: Arc<Metrics>,
    /// The meter's series, shared by every stack generation.
    meter: Arc<MeterSeries>,
    router: Arc<Router>,
    limits: Arc<Limits>,
    ready: Arc<AtomicBool>,
    /// TLS of the traffic and admin listeners (`[server.tls]`, `[server.admin_tls]`).
    tls: Option<Arc<ServerTls>>,
    admin_tls: Option<Arc<ServerTls>>,
    /// Where reloads read the config (and the file the watch looks at).
    source: ConfigSource,
    reload_tx: mpsc::Sender<ReloadRequest>,
    /// Taken by [`Server::run`].
    reload_rx: Option<mpsc::Receiver<ReloadRequest>>,
    /// Finish hooks of the embedder (or a test), run after the proxy's own in every generation.
    hooks: Vec<Arc<dyn FinishHook>>,
}

impl Server {
    pub fn new(config: Config, metrics: Arc<Metrics>) -> Result<Self, ServerError> {
        let router = Arc::new(Router::from_config(&config, Arc::clone(&metrics))?);
        let limits = Arc::new(Limits::new(&config.server));
        let (reload_tx, reload_rx) = mpsc::channel(8);
        let load = |table: &str, tls: &Option<ServerTlsConfig>, alpn| match tls {
            Some(tls) => ServerTls::load(table, tls, alpn).map(|tls| Some(Arc::new(tls))),
            None => Ok(None),
        };
        let tls = load("server.tls", &config.server.tls, ALPN_TRAFFIC)?;
        let admin_tls = load("server.admin_tls", &config.server.admin_tls, ALPN_ADMIN)?;
        series::register(&metrics, &config);
        let meter = Arc::new(MeterSeries::new(Arc::clone(&metrics), &config));
        Ok(Self {
            config,
            metrics,
            meter,
            router,
            limits,
            ready: Arc::new(AtomicBool::new(true)),
            tls,
            admin_tls,
            source: ConfigSource::default(),
            reload_tx,
            reload_rx: Some(reload_rx),
            hooks: Vec::new(),
        })
    }

    /// Adds a hook that runs at the end of every request, after the proxy's own (see
    /// [`crate::context::finish`]); it carries over reloads.
    pub fn with_finish_hook(mut self, hook: Arc<dyn FinishHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Reloads read `path` (the file `serve --config` named; `None`: the shipped defaults), and,
    /// with `server.watch_config`, the server watches it.
    pub fn with_config_source(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.source = ConfigSource { path };
        self
    }

    /// A sender of reload requests (SIGHUP's, a handle's).
    pub fn reloads(&self) -> mpsc::Sender<ReloadRequest> {
        self.reload_tx.clone()
    }

    /// The file watch's interval while `server.watch_config` is on.
    fn watch_interval(&self) -> Option<Duration> {
        let server = &self.config.server;
        server.watch_config.then_some(server.watch_interval)
    }

    /// Applies a reload: `config`, or the source's file read again. Everything new is built
    /// first (router, upstream TLS, listener TLS); nothing changes unless all of it loads.
    fn reload(
        &mut self,
        config: Option<Config>,
        client: &UpstreamClient,
        stack: &LiveStack,
        probes: &mut Vec<JoinHandle<()>>,
    ) -> Result<Applied, String> {
        let mut new = match config {
            Some(config) => {
                config.validate().map_err(|err| err.to_string())?;
                config
            }
            None => self.source.load().map_err(|err| err.to_string())?,
        };
        let restart_required = reload::restart_only_changes(&self.config, &new);
        reload::keep_restart_only(&self.config, &mut new);
        let router = Arc::new(self.router.reloaded(&new).map_err(|err| err.to_string())?);
        let prepare =
            |tls: &Option<Arc<ServerTls>>, table: &Option<ServerTlsConfig>| match (tls, table) {
                (Some(tls), Some(table)) => tls.prepare(table).map(Some),
                _ => Ok(None),
            };
        let traffic_tls = prepare(&self.tls, &new.server.tls).map_err(|err| err.to_string())?;
        let admin_tls =
            prepare(&self.admin_tls, &new.server.admin_tls).map_err(|err| err.to_string())?;

        // Everything loaded: commit.
        for (tls, prepared) in [(&self.tls, traffic_tls), (&self.admin_tls, admin_tls)] {
            if let (Some(tls), Some(prepared)) = (tls, prepared) {
                tls.commit(prepared);
            }
        }
        self.limits.resize(&new.server);
        self.metrics.reload_models(&new);
        self.meter.reload(&new);
        let client = client.with_connect_timeout(new.upstream.connect_timeout);
        stack.store(live::build(
            &new,
            &self.meter,
            &router,
            &self.limits,
            client.clone(),
            &self.hooks,
        ));
        probes.iter().for_each(JoinHandle::abort);
        *probes = route::probe::spawn(&router, &client);
        self.router = router;
        self.config = new;
        Ok(Applied { restart_required })
    }

    /// Serves until `shutdown` resolves, then drains (see the module docs).
    pub async fn run(
        mut self,
        traffic: TcpListener,
        admin: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) {
        let client = client::build(&self.config.upstream);
        self.router.connect(&client);
        let mut probes = route::probe::spawn(&self.router, &client);
        let stack = LiveStack::new(live::build(
            &self.config,
            &self.meter,
            &self.router,
            &self.limits,
            client.clone(),
            &self.hooks,
        ));
        let (watch_every, watch_every_rx) = watch::channel(self.watch_interval());
        let watcher_task = self.source.path.clone().map(|path| {
            tokio::spawn(reload::watch_file(
                path,
                move || *watch_every_rx.borrow(),
                self.reload_tx.clone(),
            ))
        });
        let mut reload_rx = self.reload_rx.take();

        // Registered before the admin port serves, so every kind is scraped from 0.
        let h2_budgets = Budgets::for_server(self.config.server.max_header_bytes);
        let h2_abuse = Arc::new(AbuseCounters::new(&self.metrics));
        let upkeep = tokio::spawn(upkeep(Arc::clone(&self.metrics)));
        let admin_task = tokio::spawn(admin::serve(
            admin,
            self.admin_tls.clone(),
            Arc::clone(&self.metrics),
            Arc::clone(&self.limits),
            Arc::clone(&self.ready),
        ));
        let reloads: Vec<JoinHandle<()>> = [("traffic", &self.tls), ("admin", &self.admin_tls)]
            .into_iter()
            .filter_map(|(listener, tls)| {
                let tls = Arc::clone(tls.as_ref()?);
                let metrics = Arc::clone(&self.metrics);
                Some(tokio::spawn(tls.watch(move |result| {
                    tls::series::reloaded(&metrics, listener, result)
                })))
            })
            .collect();

        let builders = Arc::new(TrafficBuilders::new(&self.config.server));
        let graceful = GracefulShutdown::new();
        // Tells connections still waiting for their first byte to give up (see `sniff`).
        let (stopping_tx, stopping) = watch::channel(false);
        // Connection tasks live in a set so that, past the grace period, they can be cut.
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                Some(request) = recv(&mut reload_rx) => {
                    let ReloadRequest { trigger, config, reply } = request;
                    let outcome = self.reload(config, &client, &stack, &mut probes);
                    match &outcome {
                        Ok(applied) => {
                            series::config_reload(&self.metrics, "ok");
                            series::config_restart_required(&self.metrics, !applied.restart_required.is_empty());
                            tracing::info!(trigger = trigger.as_str(), restart_required = ?applied.restart_required, "config reloaded");
                            for key in &applied.restart_required {
                                tracing::warn!(key, "config reload: this key's new value takes effect on restart; the running value stays");
                            }
                        }
                        Err(err) => {
                            series::config_reload(&self.metrics, "error");
                            tracing::error!(trigger = trigger.as_str(), error = %err, "config reload refused; the running config stays");
                        }
                    }
                    let _ = watch_every.send(self.watch_interval());
                    if let Some(reply) = reply {
                        let _ = reply.send(outcome);
                    }
                }
                accepted = traffic.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // Out of file descriptors and the like: back off instead of spinning.
                            tracing::warn!(error = %err, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let Some(permit) = self.limits.try_connection() else {
                        connections.spawn(refuse_connection(stream, peer, stack.hooks()));
                        continue;
                    };
                    let framing = ConnectionFraming::new();
                    let io_framing = Arc::clone(&framing);
                    let max_head = self.config.server.max_header_bytes;
                    let first_byte_timeout = self.config.server.header_read_timeout;
                    let service = stack.for_connection(peer, self.tls.is_some(), framing);
                    let service = TowerToHyperService::new(service);
                    let watcher = graceful.watcher();
                    let builders = Arc::clone(&builders);
                    let h2_abuse = Arc::clone(&h2_abuse);
                    let mut stopping = stopping.clone();
                    let tls = self.tls.clone();
                    let metrics = Arc::clone(&self.metrics);
                    connections.spawn(async move {
                        let _permit = permit;
                        let Some(tls) = tls else {
                            let Some(http1) = sniff::first_bytes(&stream, first_byte_timeout, &mut stopping).await else {
                                tracing::debug!(%peer, "no byte before header_read_timeout or shutdown: closed");
                                return;
                            };
                            let io = GuardedStream::new(stream, io_framing, max_head);
                            builders.serve(http1, io, (h2_budgets, h2_abuse), service, watcher, peer).await;
                            return;
                        };
                        let handshake = tls::acceptor::handshake(tls.acceptor(), stream, first_byte_timeout);
                        let stream = tokio::select! {
                            done = handshake => match done {
                                Ok(stream) => stream,
                                Err((failure, err)) => {
                                    tls::series::handshake_failed(&metrics, "traffic", failure);
                                    tracing::debug!(error = %err, %peer, reason = failure.as_str(), "TLS handshake failed");
                                    return;
                                }
                            },
                            _ = stopping.wait_for(|stop| *stop) => return,
                        };
                        // ALPN says the protocol; a client that offered none gets the detecting builder.
                        let http1 = stream.get_ref().1.alpn_protocol() == Some(b"http/1.1");
                        let io = GuardedStream::new(stream, io_framing, max_head);
                        builders.serve(http1, io, (h2_budgets, h2_abuse), service, watcher, peer).await;
                    });
                }
            }
        }

        self.ready.store(false, Ordering::SeqCst);
        drop(traffic);
        let _ = stopping_tx.send(true);
        let grace = self.config.server.shutdown_grace;
        tracing::info!(
            grace_seconds = grace.as_secs_f64(),
            "draining in-flight streams"
        );
        tokio::select! {
            () = graceful.shutdown() => tracing::info!("all streams finished"),
            () = tokio::time::sleep(grace) => {
                tracing::warn!(connections = connections.len(), "grace period over: cutting remaining streams");
            }
        }
        // Dropping a connection drops its response bodies: each unfinished stream counts as cancelled.
        connections.shutdown().await;
        admin_task.abort();
        reloads.iter().for_each(JoinHandle::abort);
        watcher_task.iter().for_each(JoinHandle::abort);
        upkeep.abort();
        probes.iter().for_each(JoinHandle::abort);
        self.metrics.run_upkeep();
    }
}

/// Serves one accepted connection until it ends (or the graceful shutdown ends it).
async fn serve<I, S, B>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    watcher: hyper_util::server::graceful::Watcher,
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
        watcher: hyper_util::server::graceful::Watcher,
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
/// time, so a flood of refused connections cannot pile up. Each request ends at the finish point
/// like any other (outcome `overloaded`).
async fn refuse_connection(stream: tokio::net::TcpStream, peer: SocketAddr, hooks: FinishHooks) {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let mut context = RequestContext::for_head(
            Instant::now(),
            req.method(),
            req.uri(),
            req.headers(),
            hooks.clone(),
        );
        context.client = Some(peer);
        admission::refused(context);
        let mut response = admission::overloaded(Limit::Connections);
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(false);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(REFUSE_DEADLINE, connection).await;
}

/// The next reload request, or never once the channel is gone (or was never there).
async fn recv(requests: &mut Option<mpsc::Receiver<ReloadRequest>>) -> Option<ReloadRequest> {
    match requests {
        Some(requests) => requests.recv().await,
        None => std::future::pending().await,
    }
}

async fn upkeep(metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    loop {
        tick.tick().await;
        metrics.run_upkeep();
    }
}
