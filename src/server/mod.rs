//! Listeners, the tower stack, admin routes and graceful shutdown.
//!
//! The traffic listener serves HTTP/1.1 and h2c on one port (hyper-util's auto builder) through the
//! stack `admission -> meter -> plan -> dispatch -> [handoff ->] forward` ([`live`]). The admin listener, kept on its own port so API clients never
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
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use admission::Limits;
pub use bind::{bind, bind_from, ListenOrigins};
use connection::Traffic;
pub use error::ServerError;
use h2guard::{AbuseCounters, Budgets};
pub use handle::{spawn, spawn_with_hooks, ServerHandle};
pub use listen::listen;
use live::LiveStack;
use reload::{Applied, ConfigSource, ReloadRequest};

use crate::config::{Config, ServerTlsConfig};
use crate::context::FinishHook;
use crate::meter::series::MeterSeries;
use crate::metrics::Metrics;
use crate::proxy::client::{self, UpstreamClient};
use crate::route::Router;
use crate::tenant::system::TenantSystem;
use crate::tls::acceptor::{ALPN_ADMIN, ALPN_TRAFFIC};
use crate::tls::{self, ServerTls};
use crate::trace::system::TraceSystem;

mod admin;
pub mod admission;
mod bind;
mod connection;
mod error;
pub mod h2guard;
mod handle;
mod head;
mod listen;
pub mod live;
pub mod reload;
pub mod series;
pub mod smuggling;
mod sniff;
pub mod watched;

/// How often histogram samples are folded into buckets (keeps memory flat between scrapes).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The proxy: its config, metrics, and readiness, and the subsystems it composes.
pub struct Server {
    config: Config,
    metrics: Arc<Metrics>,
    /// The meter's series, shared by every stack revision.
    meter: Arc<MeterSeries>,
    router: Arc<Router>,
    /// The phase series and the span exporter.
    trace: TraceSystem,
    /// The tenant labels, identity, usage records and budgets.
    tenants: TenantSystem,
    limits: Arc<Limits>,
    ready: Arc<AtomicBool>,
    /// TLS of the traffic and admin listeners (`[server.tls]`, `[server.admin_tls]`).
    tls: ListenerTls,
    /// Where reloads read the config (and the file the watch looks at).
    source: ConfigSource,
    reloads: (
        mpsc::Sender<ReloadRequest>,
        Option<mpsc::Receiver<ReloadRequest>>,
    ),
    /// Finish hooks of the embedder (or a test), run after the proxy's own in every revision.
    hooks: Vec<Arc<dyn FinishHook>>,
}

/// The TLS of the two listeners, each `None` when plain.
struct ListenerTls {
    traffic: Option<Arc<ServerTls>>,
    admin: Option<Arc<ServerTls>>,
}

/// How far [`Server::build`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Everything, to serve.
    Serve,
    /// Everything but what writes: `serve --check` leaves no file behind.
    Check,
}

impl Server {
    /// Builds every subsystem of `config`: the router (the upstream's and the pools' TLS files),
    /// the listeners' TLS files, the tenants' keys and the backend's key, the usage records' file,
    /// the budget store (its URL and TLS files) and the span exporter (its endpoint). Nothing is
    /// bound and nothing connects (the budget store's handshake is [`Server::verify_budget_store`],
    /// the upstreams' at [`Server::run`]); the first problem stops it, its error naming the key.
    /// `serve` calls it before it binds its listeners, so a start that cannot be whole stops
    /// before it says it is serving.
    pub fn new(config: Config, metrics: Arc<Metrics>) -> Result<Self, ServerError> {
        Self::build(config, metrics, Start::Serve)
    }

    /// `serve --check`: builds what [`Server::new`] builds, then drops it. The one difference:
    /// the usage records' file is opened only when it exists (its directory checked otherwise),
    /// never created.
    pub fn check(config: &Config) -> Result<(), ServerError> {
        let metrics = Arc::new(Metrics::new(config)?);
        Self::build(config.clone(), metrics, Start::Check).map(drop)
    }

    fn build(config: Config, metrics: Arc<Metrics>, start: Start) -> Result<Self, ServerError> {
        let router = Arc::new(Router::from_config(&config, Arc::clone(&metrics))?);
        let limits = Arc::new(Limits::new(&config.server));
        let load = |table: &str, tls: &Option<ServerTlsConfig>, alpn| match tls {
            Some(tls) => ServerTls::load(table, tls, alpn).map(|tls| Some(Arc::new(tls))),
            None => Ok(None),
        };
        let tls = ListenerTls {
            traffic: load("server.tls", &config.server.tls, ALPN_TRAFFIC)?,
            admin: load("server.admin_tls", &config.server.admin_tls, ALPN_ADMIN)?,
        };
        series::register(&metrics, &config);
        let meter = Arc::new(MeterSeries::new(Arc::clone(&metrics), &config));
        let tenants = TenantSystem::build(&config, &metrics, start == Start::Check)?;
        // Started here, not when serving: an exporter that cannot be built stops the start (and
        // the check) with its key named, rather than serving without spans.
        let trace = TraceSystem::build(&config, &metrics).map_err(ServerError::Tracing)?;
        let (reload_tx, reload_rx) = mpsc::channel(8);
        Ok(Self {
            config,
            metrics,
            meter,
            router,
            trace,
            tenants,
            limits,
            ready: Arc::new(AtomicBool::new(true)),
            tls,
            source: ConfigSource::default(),
            reloads: (reload_tx, Some(reload_rx)),
            hooks: Vec::new(),
        })
    }

    /// Adds a hook that runs at the end of every request, after the proxy's own (see
    /// [`crate::context::finish`]); it carries over reloads.
    pub(crate) fn with_finish_hook(mut self, hook: Arc<dyn FinishHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Before serving: a budget store over TLS that cannot make its handshake (a CA that does
    /// not match, a client certificate Redis refuses) stops the start with an error naming the
    /// keys; a Redis that is merely down does not (`serve` calls this; an embedder may).
    pub async fn verify_budget_store(&self) -> Result<(), ServerError> {
        Ok(self.tenants.verify(&self.config).await?)
    }

    /// Reloads read `path` (the file `serve --config` named; `None`: the shipped defaults), and,
    /// with `server.watch_config`, the server watches it.
    pub fn with_config_source(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.source = ConfigSource { path };
        self
    }

    /// A sender of reload requests (SIGHUP's, a handle's).
    pub fn reloads(&self) -> mpsc::Sender<ReloadRequest> {
        self.reloads.0.clone()
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
        let exporter = self.trace.prepare(&new)?;
        let identity = self.tenants.prepare(&new).map_err(|err| err.to_string())?;
        let prepare =
            |tls: &Option<Arc<ServerTls>>, table: &Option<ServerTlsConfig>| match (tls, table) {
                (Some(tls), Some(table)) => tls.prepare(table).map(Some),
                _ => Ok(None),
            };
        let traffic_tls =
            prepare(&self.tls.traffic, &new.server.tls).map_err(|err| err.to_string())?;
        let admin_tls =
            prepare(&self.tls.admin, &new.server.admin_tls).map_err(|err| err.to_string())?;

        // Everything loaded: commit.
        for (tls, prepared) in [
            (&self.tls.traffic, traffic_tls),
            (&self.tls.admin, admin_tls),
        ] {
            if let (Some(tls), Some(prepared)) = (tls, prepared) {
                tls.commit(prepared);
            }
        }
        self.limits.resize(&new.server);
        self.metrics.reload_models(&new);
        self.meter.reload(&new);
        let client = client.with_connect_timeout(new.upstream.connect_timeout);
        self.trace.commit(exporter);
        self.tenants.commit(&new, identity);
        self.router = router;
        stack.store(live::build(
            &new,
            self.shared(),
            client.clone(),
            &self.hooks,
        ));
        probes.iter().for_each(JoinHandle::abort);
        *probes = self.router.spawn_probes(&client);
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
        // Named in the 508 of a request that loops back here, and in x-tokenmeter-via upstream.
        tracing::info!(instance = %self.limits.instance(), "loop guard: this tokenmeter's id");
        let client = client::build(&self.config.upstream).naming(self.limits.instance().clone());
        self.router.connect(&client);
        let mut probes = self.router.spawn_probes(&client);
        let stack = LiveStack::new(live::build(
            &self.config,
            self.shared(),
            client.clone(),
            &self.hooks,
        ));
        let (watch_every, watch_every_rx) = watch::channel(self.watch_interval());
        let watcher_task = self.source.path.clone().map(|path| {
            tokio::spawn(reload::watch_file(
                path,
                move || *watch_every_rx.borrow(),
                self.reloads.0.clone(),
            ))
        });
        let mut reload_rx = self.reloads.1.take();

        // Registered before the admin port serves, so every kind is scraped from 0.
        let h2_budgets = Budgets::for_server(self.config.server.max_header_bytes);
        let h2_abuse = Arc::new(AbuseCounters::new(&self.metrics));
        let upkeep = tokio::spawn(Arc::clone(&self.metrics).upkeep(UPKEEP_INTERVAL));
        let admin_task = tokio::spawn(admin::serve(
            admin,
            self.tls.admin.clone(),
            Arc::clone(&self.metrics),
            Arc::clone(&self.limits),
            Arc::clone(&self.ready),
        ));
        let reloads: Vec<JoinHandle<()>> =
            [("traffic", &self.tls.traffic), ("admin", &self.tls.admin)]
                .into_iter()
                .filter_map(|(listener, tls)| {
                    let tls = Arc::clone(tls.as_ref()?);
                    let metrics = Arc::clone(&self.metrics);
                    Some(tokio::spawn(tls.watch(move |result| {
                        tls::series::reloaded(&metrics, listener, result)
                    })))
                })
                .collect();

        let serving = Arc::new(Traffic::new(
            &self.config.server,
            self.tls.traffic.clone(),
            Arc::clone(&self.metrics),
            (h2_budgets, h2_abuse),
        ));
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
                Some(request) = reload::next(&mut reload_rx) => {
                    let ReloadRequest { trigger, config, reply } = request;
                    let outcome = self.reload(config, &client, &stack, &mut probes);
                    reload::report(&self.metrics, trigger, &outcome);
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
                        connections.spawn(connection::refuse(stream, peer, stack.clone()));
                        continue;
                    };
                    connections.spawn(Arc::clone(&serving).serve(
                        stream,
                        peer,
                        permit,
                        stack.clone(),
                        graceful.watcher(),
                        stopping.clone(),
                    ));
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
        // Every request has ended: its spans, settlements and usage records are queued. Sent
        // and written now, each within a bound.
        self.trace.shutdown(SPAN_FLUSH).await;
        self.tenants.shutdown(SPAN_FLUSH).await;
        self.metrics.run_upkeep();
    }

    /// What every stack revision is built from.
    fn shared(&self) -> live::Shared<'_> {
        live::Shared {
            meter: &self.meter,
            limits: &self.limits,
            router: &self.router,
            trace: &self.trace,
            tenants: &self.tenants,
        }
    }
}

/// The longest a stopping server waits for its last spans to be exported.
const SPAN_FLUSH: Duration = Duration::from_secs(5);
