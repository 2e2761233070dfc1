//! Live reconfiguration: what asks for a reload (SIGHUP, the file watch, a test), and which keys a
//! running server cannot take without a restart.
//!
//! The reload itself is [`super::Server`]'s: it builds everything new first (the router with its
//! upstream TLS, the listeners' TLS), commits only when all of it loaded, and swaps the request
//! stack that new requests take. A request holds the stack it started with to its end, so streams
//! in flight finish on their old backend, rules and timeouts.
//!
//! Restart-only keys are compared, reported (logged, `tokenmeter_config_restart_required`), and
//! kept at their running values, so the config the server reports is the one in effect.
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::series;
use crate::config::{Config, ConfigError};
use crate::metrics::Metrics;

/// Why a reload was asked for (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Signal,
    FileChanged,
    Handle,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::FileChanged => "file changed",
            Trigger::Handle => "handle",
        }
    }
}

/// A reload asked of a running server.
#[derive(Debug)]
pub struct ReloadRequest {
    pub trigger: Trigger,
    /// The config to apply; `None`: read the file the server was started with.
    pub config: Option<Config>,
    pub reply: Option<oneshot::Sender<Result<Applied, String>>>,
}

impl ReloadRequest {
    /// A reload of the file the server was started with, that nobody waits on (a signal's, the
    /// file watch's).
    fn reread(trigger: Trigger) -> Self {
        Self {
            trigger,
            config: None,
            reply: None,
        }
    }
}

/// What a reload that succeeded applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Keys whose new values wait for a restart (their running values stay in effect).
    pub restart_required: Vec<&'static str>,
}

/// Where reloads read the config from: the file given to `serve --config`, or the shipped
/// defaults; the environment overrides apply on top, as at start.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConfigSource {
    pub path: Option<PathBuf>,
}

impl ConfigSource {
    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.path.as_deref())
    }
}

/// `check("<table>.<field>", running.<field> != new.<field>)` for each field named: the key
/// reported is spelled from the field compared, so the two cannot drift apart.
macro_rules! check_fields {
    ($check:ident, $table:literal, $running:expr, $new:expr, [$($field:ident),+ $(,)?]) => {
        $($check(concat!($table, ".", stringify!($field)), $running.$field != $new.$field);)+
    };
}

/// The keys a running server cannot change (listeners are bound, hyper's connection builders and
/// the histograms' bucket layouts are fixed at start), with their values in `running` and `new`.
pub(crate) fn restart_only_changes(running: &Config, new: &Config) -> Vec<&'static str> {
    let (r, n) = (&running.server, &new.server);
    let mut changed = Vec::new();
    let mut check = |key: &'static str, differs: bool| {
        if differs {
            changed.push(key);
        }
    };
    check_fields!(
        check,
        "server",
        r,
        n,
        [
            listen,
            admin_listen,
            listen_backlog,
            header_read_timeout,
            max_header_bytes,
            max_headers,
            http2_max_concurrent_streams,
        ]
    );
    check("server.tls", r.tls.is_some() != n.tls.is_some());
    check("tenants.usage", running.tenants.usage != new.tenants.usage);
    let (rb, nb) = (&running.tenants.budgets, &new.tenants.budgets);
    check_fields!(
        check,
        "tenants.budgets",
        rb,
        nb,
        [
            store,
            store_tls,
            store_cluster,
            store_timeout,
            key_prefix,
            stream_lease,
            settle_queue,
        ]
    );
    check(
        "server.admin_tls",
        r.admin_tls.is_some() != n.admin_tls.is_some(),
    );
    check("buckets", running.buckets != new.buckets);
    check("fleet", running.fleet != new.fleet);
    let (ru, nu) = (&running.upstream, &new.upstream);
    check_fields!(
        check,
        "upstream",
        ru,
        nu,
        [pool_idle_timeout, pool_max_idle_per_host]
    );
    check(
        "metering.max_observed_models",
        running.metering.max_observed_models != new.metering.max_observed_models,
    );
    // The SLO targets apply at once (verdicts, attainment, placement), per model and class too;
    // only the set of their exact bucket edges in the TTFT / TPOT / ITL histograms waits for a
    // restart.
    check(
        "slo.ttft (bucket edge)",
        running.slo.ttft_targets() != new.slo.ttft_targets(),
    );
    check(
        "slo.tpot (bucket edge)",
        running.slo.tpot_targets() != new.slo.tpot_targets(),
    );
    check(
        "slo.max_gap (bucket edge)",
        running.slo.gap_targets() != new.slo.gap_targets(),
    );
    changed
}

/// Copies the restart-only values of `running` into `new` (see [`restart_only_changes`]); the
/// SLO targets are not copied: they apply at once.
pub(crate) fn keep_restart_only(running: &Config, new: &mut Config) {
    let (r, n) = (&running.server, &mut new.server);
    n.listen = r.listen;
    n.admin_listen = r.admin_listen;
    n.listen_backlog = r.listen_backlog;
    n.header_read_timeout = r.header_read_timeout;
    n.max_header_bytes = r.max_header_bytes;
    n.max_headers = r.max_headers;
    n.http2_max_concurrent_streams = r.http2_max_concurrent_streams;
    if r.tls.is_none() {
        n.tls = None;
    } else if n.tls.is_none() {
        n.tls.clone_from(&r.tls);
    }
    if r.admin_tls.is_none() {
        n.admin_tls = None;
    } else if n.admin_tls.is_none() {
        n.admin_tls.clone_from(&r.admin_tls);
    }
    new.buckets = running.buckets.clone();
    new.tenants.usage = running.tenants.usage.clone();
    new.tenants.budgets.keep_store(&running.tenants.budgets);
    // Every key of [fleet] is restart-only.
    new.fleet.clone_from(&running.fleet);
    new.upstream.pool_idle_timeout = running.upstream.pool_idle_timeout;
    new.upstream.pool_max_idle_per_host = running.upstream.pool_max_idle_per_host;
    new.metering.max_observed_models = running.metering.max_observed_models;
}

/// Asks for a reload on every SIGHUP.
#[cfg(unix)]
pub async fn on_sighup(requests: mpsc::Sender<ReloadRequest>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: reload by signal is off");
        return;
    };
    while hangups.recv().await.is_some() {
        if requests
            .send(ReloadRequest::reread(Trigger::Signal))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Without Unix signals there is no SIGHUP; the file watch still works.
#[cfg(not(unix))]
pub async fn on_sighup(_requests: mpsc::Sender<ReloadRequest>) {}

/// Asks for a reload whenever the file's bytes differ from the last look, looking every
/// `every()` (read each time: a reload may change it). By content, not modification time: a
/// ConfigMap volume swaps a symlink, and an editor may keep the time. The first look only records.
pub(crate) async fn watch_file(
    path: PathBuf,
    every: impl Fn() -> Option<Duration>,
    requests: mpsc::Sender<ReloadRequest>,
) {
    let mut last = std::fs::read(&path).ok();
    loop {
        let Some(interval) = every() else {
            // Watching is off (a reload turned it off); look again later in case it is back on.
            tokio::time::sleep(Duration::from_secs(1)).await;
            last = std::fs::read(&path).ok();
            continue;
        };
        tokio::time::sleep(interval).await;
        if every().is_none() {
            // Turned off while asleep (the reload of the last change may have done it).
            continue;
        }
        let now = std::fs::read(&path).ok();
        if now.is_none() || now == last {
            // A file missing for a moment (being replaced) is not a change to an empty config.
            continue;
        }
        last = now;
        let request = ReloadRequest::reread(Trigger::FileChanged);
        if requests.send(request).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;

/// The next reload request, or never once the channel is gone (or was never there).
pub async fn next(requests: &mut Option<mpsc::Receiver<ReloadRequest>>) -> Option<ReloadRequest> {
    match requests {
        Some(requests) => requests.recv().await,
        None => std::future::pending().await,
    }
}

/// Counts and logs what a reload did: applied (and which keys wait for a restart), or refused.
pub fn report(metrics: &Metrics, trigger: Trigger, outcome: &Result<Applied, String>) {
    match outcome {
        Ok(applied) => {
            series::config_reload(metrics, "ok");
            series::config_restart_required(metrics, !applied.restart_required.is_empty());
            tracing::info!(trigger = trigger.as_str(), restart_required = ?applied.restart_required, "config reloaded");
            for key in &applied.restart_required {
                tracing::warn!(key, "config reload: this key's new value takes effect on restart; the running value stays");
            }
        }
        Err(err) => {
            series::config_reload(metrics, "error");
            tracing::error!(trigger = trigger.as_str(), error = %err, "config reload refused; the running config stays");
        }
    }
}
