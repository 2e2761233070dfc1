//! Pools of backends, each backend's load and health, and the guard that holds a request's load.
//!
//! A pool's backend set is a snapshot (`Arc<[Arc<Backend>]>`) swapped whole when DNS re-resolution
//! changes it; a backend that stays keeps its `Arc`, so its load counts and health survive, and a
//! backend that leaves is freed when its last in-flight response ends.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use tokio::time::Instant;

use super::health::{EjectPolicy, Fault, Health, Verdict};
use super::series::BackendMetrics;
use crate::config::{BalanceLoad, PoolConfig};
use crate::metrics::Metrics;
use crate::tls::TlsClient;
use crate::upstream::{BodyGuard, Target};

/// A backend as the prefix index names it: its id and its ejection epoch at the time. An entry
/// whose backend has left the pool, or has been ejected since (its epoch moved on), is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub backend: u32,
    pub epoch: u32,
}

/// Ids of backends, unique in the process (the prefix index names owners by them).
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// One backend of one pool.
#[derive(Debug)]
pub struct Backend {
    pub target: Target,
    pub pool: Arc<str>,
    id: u32,
    /// Ejections so far: prefix index entries written before the last one are dead.
    epoch: AtomicU32,
    /// Requests whose response stream has not ended.
    streams: AtomicU64,
    /// Estimated prompt tokens of requests not yet past their first response byte.
    queued_tokens: AtomicU64,
    health: Mutex<Health>,
    /// Scraped `vllm:num_requests_waiting`.
    waiting: AtomicU64,
    /// Scraped `vllm:kv_cache_usage_perc`, as `f64` bits.
    kv_usage: AtomicU64,
    /// A health check asked for by a run of answer failures is under way.
    checking: AtomicBool,
    /// The backend answered `/tokenize` with "no such endpoint": never asked again.
    no_tokenize: AtomicBool,
    metrics: Option<BackendMetrics>,
}

impl Backend {
    pub fn new(target: Target, pool: Arc<str>, metrics: Option<&Metrics>) -> Self {
        let metrics = metrics.map(|m| BackendMetrics::new(m, &pool, &target.label));
        if let Some(m) = &metrics {
            m.healthy.set(1.0);
        }
        Self {
            target,
            pool,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            epoch: AtomicU32::new(0),
            streams: AtomicU64::new(0),
            queued_tokens: AtomicU64::new(0),
            health: Mutex::new(Health::default()),
            waiting: AtomicU64::new(0),
            kv_usage: AtomicU64::new(0f64.to_bits()),
            checking: AtomicBool::new(false),
            no_tokenize: AtomicBool::new(false),
            metrics,
        }
    }

    /// Whether the backend takes traffic now (and the `healthy` gauge says so).
    pub fn available(&self, now: Instant) -> bool {
        let available = self.lock_health().available(now);
        if let Some(m) = &self.metrics {
            m.healthy.set(if available { 1.0 } else { 0.0 });
        }
        available
    }

    /// The backend as a prefix index owner: its id and current ejection epoch.
    pub fn owner(&self) -> Owner {
        Owner {
            backend: self.id,
            epoch: self.epoch.load(Ordering::Relaxed),
        }
    }

    pub fn streams(&self) -> u64 {
        self.streams.load(Ordering::Relaxed)
    }

    pub fn queued_tokens(&self) -> u64 {
        self.queued_tokens.load(Ordering::Relaxed)
    }

    /// The load power-of-two-choices compares, weighted by scraped gauges when there are any: a
    /// backend with a queue or a full KV cache looks proportionally busier.
    pub fn score(&self, kind: BalanceLoad) -> f64 {
        let load = match kind {
            BalanceLoad::PromptTokens => self.queued_tokens() as f64,
            BalanceLoad::Streams | BalanceLoad::RoundRobin => self.streams() as f64,
        };
        let waiting = self.waiting.load(Ordering::Relaxed) as f64;
        let kv = f64::from_bits(self.kv_usage.load(Ordering::Relaxed));
        (load + 1.0) * (1.0 + waiting) * (1.0 + kv)
    }

    /// Records scraped gauges.
    pub fn set_scraped(&self, waiting: u64, kv_usage: f64) {
        self.waiting.store(waiting, Ordering::Relaxed);
        self.kv_usage.store(kv_usage.to_bits(), Ordering::Relaxed);
    }

    pub fn on_success(&self) {
        self.lock_health().on_success();
    }

    /// A failed request; see [`Verdict`] for what the caller must do with `Confirm`.
    pub fn on_failure(&self, now: Instant, policy: &EjectPolicy, fault: Fault) -> Verdict {
        let verdict = self.lock_health().on_failure(now, policy, fault);
        if let Verdict::Ejected(length) = verdict {
            self.ejected(length);
        }
        verdict
    }

    /// Claims the one confirming health check a backend may have under way; `false` when one
    /// already is. Released by [`Self::end_check`].
    pub fn start_check(&self) -> bool {
        !self.checking.swap(true, Ordering::AcqRel)
    }

    pub fn end_check(&self) {
        self.checking.store(false, Ordering::Release);
    }

    /// Counts the result of a confirming health check (see [`super::probe::confirm`]).
    pub fn confirmed(&self, result: Confirmation) {
        if let Some(m) = &self.metrics {
            m.confirmations[result as usize].increment(1);
        }
    }

    /// Whether `/tokenize` may be asked of this backend.
    pub fn tokenizes(&self) -> bool {
        !self.no_tokenize.load(Ordering::Relaxed)
    }

    /// The backend has no `/tokenize`.
    pub fn no_tokenize(&self) {
        self.no_tokenize.store(true, Ordering::Relaxed);
    }

    /// A failed active check: eject now (unless already ejected).
    pub fn eject(&self, now: Instant, policy: &EjectPolicy) {
        let mut health = self.lock_health();
        if health.available(now) {
            let length = health.eject(now, policy);
            drop(health);
            self.ejected(length);
        }
    }

    fn ejected(&self, length: Duration) {
        // Whatever the backend cached may be gone (a restart) and it takes no traffic now: its
        // prefix index entries die with this epoch.
        self.epoch.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            pool = &*self.pool,
            backend = &*self.target.label,
            seconds = length.as_secs_f64(),
            "backend ejected"
        );
        if let Some(m) = &self.metrics {
            m.healthy.set(0.0);
            m.ejections.increment(1);
        }
    }

    /// Counts a retry away from this backend.
    pub fn retried(&self) {
        if let Some(m) = &self.metrics {
            m.retries.increment(1);
        }
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a confirming health check found (the order of [`BackendMetrics::confirmations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// The check passed: the failed answers were the requests' doing.
    Kept = 0,
    /// The check failed too: ejected.
    Ejected = 1,
    /// The backend has no health endpoint: kept, answers alone never eject.
    Unavailable = 2,
}

/// A request's load on its backend: counted from the pick until the response body ends (the
/// guard travels in the body), its prompt tokens only until the first response byte.
#[derive(Debug)]
pub struct LoadGuard {
    backend: Arc<Backend>,
    prompt_tokens: u64,
    prefill_done: AtomicBool,
}

impl LoadGuard {
    pub fn new(backend: Arc<Backend>, prompt_tokens: u64) -> Self {
        backend.streams.fetch_add(1, Ordering::Relaxed);
        backend
            .queued_tokens
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        if let Some(m) = &backend.metrics {
            m.inflight.increment(1.0);
        }
        Self {
            backend,
            prompt_tokens,
            prefill_done: AtomicBool::new(false),
        }
    }

    fn end_prefill(&self) {
        if !self.prefill_done.swap(true, Ordering::Relaxed) {
            self.backend
                .queued_tokens
                .fetch_sub(self.prompt_tokens, Ordering::Relaxed);
        }
    }
}

impl BodyGuard for LoadGuard {
    fn first_frame(&self) {
        self.end_prefill();
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.end_prefill();
        self.backend.streams.fetch_sub(1, Ordering::Relaxed);
        if let Some(m) = &self.backend.metrics {
            m.inflight.decrement(1.0);
        }
    }
}

/// A named set of interchangeable backends.
#[derive(Debug)]
pub struct Pool {
    pub name: Arc<str>,
    pub balance: BalanceLoad,
    /// `host:port` re-resolved periodically, if configured.
    pub dns: Option<String>,
    pub health_check: Duration,
    /// Path of the backends' health endpoint.
    pub health_path: Arc<str>,
    pub scrape_metrics: Duration,
    statics: Vec<Target>,
    backends: RwLock<Arc<[Arc<Backend>]>>,
    /// The TLS its `https://` backends were made with (kept by a reload that changes nothing).
    pub(crate) tls: Option<TlsClient>,
    /// Round-robin position (the `round_robin` balance only).
    pub(crate) next: AtomicUsize,
    metrics: Option<Arc<Metrics>>,
}

impl Pool {
    /// A pool of `config`'s backends; its `https://` ones are connected with `tls`.
    pub fn new(
        config: &PoolConfig,
        metrics: Option<Arc<Metrics>>,
        tls: Option<&TlsClient>,
    ) -> Result<Self, crate::upstream::UpstreamError> {
        Self::reconfigured(config, metrics, tls, None)
    }

    /// [`Pool::new`] after a reload: a backend `previous` (the pool of the same name) already has
    /// is kept, with its health, load and ejections, and so is what DNS resolved while `dns` is
    /// the same name. A backend no longer listed is not in the new pool; its streams in flight
    /// finish on it.
    pub fn reconfigured(
        config: &PoolConfig,
        metrics: Option<Arc<Metrics>>,
        tls: Option<&TlsClient>,
        previous: Option<&Pool>,
    ) -> Result<Self, crate::upstream::UpstreamError> {
        let name: Arc<str> = Arc::from(config.name.as_str());
        let statics = config
            .urls
            .iter()
            .map(|url| Target::from_url_with_tls(url, tls))
            .collect::<Result<Vec<_>, _>>()?;
        let known = previous.map(Pool::backends).unwrap_or_default();
        let kept = |target: &Target| {
            known
                .iter()
                .find(|b| same_target(&b.target, target))
                .cloned()
        };
        let mut backends: Vec<Arc<Backend>> = statics
            .iter()
            .map(|t| {
                kept(t).unwrap_or_else(|| {
                    Arc::new(Backend::new(
                        t.clone(),
                        Arc::clone(&name),
                        metrics.as_deref(),
                    ))
                })
            })
            .collect();
        if let Some(previous) = previous.filter(|p| p.dns.is_some() && p.dns == config.dns) {
            let resolved: Vec<Arc<Backend>> = known
                .iter()
                .filter(|b| {
                    !previous.statics.iter().any(|t| same_target(t, &b.target))
                        && !backends.iter().any(|n| same_target(&n.target, &b.target))
                })
                .cloned()
                .collect();
            backends.extend(resolved);
        }
        Ok(Self {
            name,
            balance: config.balance,
            dns: config.dns.clone(),
            health_check: config.health_check,
            health_path: Arc::from(config.health_path.as_str()),
            scrape_metrics: config.scrape_metrics,
            statics,
            backends: RwLock::new(backends.into()),
            tls: tls.cloned(),
            next: AtomicUsize::new(0),
            metrics,
        })
    }

    /// The current backends.
    pub fn backends(&self) -> Arc<[Arc<Backend>]> {
        Arc::clone(
            &self
                .backends
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// Replaces the resolved part of the set: static backends always stay; resolved addresses
    /// already known keep their backend (and its load and health).
    pub fn set_resolved(&self, addrs: &[SocketAddr]) {
        let current = self.backends();
        let mut next: Vec<Arc<Backend>> = Vec::with_capacity(self.statics.len() + addrs.len());
        let mut wanted: Vec<String> = self
            .statics
            .iter()
            .map(|t| t.authority.as_str().to_owned())
            .collect();
        wanted.extend(addrs.iter().map(SocketAddr::to_string));
        for authority in wanted {
            if next
                .iter()
                .any(|b| b.target.authority.as_str() == authority)
            {
                continue;
            }
            if let Some(known) = current
                .iter()
                .find(|b| b.target.authority.as_str() == authority)
            {
                next.push(Arc::clone(known));
                continue;
            }
            let Ok(parsed) = authority.parse::<Authority>() else {
                continue;
            };
            // Resolved addresses are in-cluster backends, spoken to in plain HTTP.
            let target = Target {
                scheme: Scheme::HTTP,
                label: Arc::from(parsed.as_str()),
                authority: parsed,
                tls: None,
            };
            tracing::info!(pool = &*self.name, backend = %target.label, "backend added");
            next.push(Arc::new(Backend::new(
                target,
                Arc::clone(&self.name),
                self.metrics.as_deref(),
            )));
        }
        for gone in current
            .iter()
            .filter(|b| !next.iter().any(|n| Arc::ptr_eq(n, b)))
        {
            tracing::info!(pool = &*self.name, backend = %gone.target.label, "backend removed");
        }
        *self
            .backends
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = next.into();
    }

    /// Prompt tokens queued on the least-loaded available backend (`None`: none available).
    pub fn shortest_queue(&self, now: Instant) -> Option<u64> {
        self.backends()
            .iter()
            .filter(|b| b.available(now))
            .map(|b| b.queued_tokens())
            .min()
    }
}

/// The same backend: scheme, authority, and TLS identity (table and verified name).
fn same_target(a: &Target, b: &Target) -> bool {
    a.scheme == b.scheme && a.authority == b.authority && a.tls == b.tls
}

#[cfg(test)]
mod tests;
