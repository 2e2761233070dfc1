//! A pool's members: its backends, how they are found (static URLs, DNS) and checked
//! ([`super::backend`] is one backend's load and health; [`super::pool`] the pool as a whole).
//!
//! A pool's backend set is a snapshot (`Arc<[Arc<Backend>]>`) swapped whole when DNS re-resolution
//! changes it; a backend that stays keeps its `Arc`, so its load counts and health survive, and a
//! backend that leaves is freed when its last in-flight response ends.
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use tokio::time::Instant;

use super::backend::Backend;
use crate::config::{BalanceLoad, PoolConfig};
use crate::metrics::Metrics;
use crate::tls::TlsClient;
use crate::upstream::Target;

/// A pool's named set of interchangeable backends.
#[derive(Debug)]
pub struct Members {
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

impl Members {
    /// A pool of `config`'s backends; its `https://` ones are connected with `tls`.
    pub fn new(
        config: &PoolConfig,
        metrics: Option<Arc<Metrics>>,
        tls: Option<&TlsClient>,
    ) -> Result<Self, crate::upstream::UpstreamError> {
        Self::reconfigured(config, metrics, tls, None)
    }

    /// [`Members::new`] after a reload: a backend `previous` (the pool of the same name) already has
    /// is kept, with its health, load and ejections, and so is what DNS resolved while `dns` is
    /// the same name. A backend no longer listed is not in the new pool; its streams in flight
    /// finish on it.
    pub(crate) fn reconfigured(
        config: &PoolConfig,
        metrics: Option<Arc<Metrics>>,
        tls: Option<&TlsClient>,
        previous: Option<&Members>,
    ) -> Result<Self, crate::upstream::UpstreamError> {
        let name: Arc<str> = Arc::from(config.name.as_str());
        let statics = config
            .urls
            .iter()
            .map(|url| Target::from_url_with_tls(url, tls))
            .collect::<Result<Vec<_>, _>>()?;
        let known = previous.map(Members::backends).unwrap_or_default();
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
    pub(crate) fn set_resolved(&self, addrs: &[SocketAddr]) {
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
    pub(crate) fn shortest_queue(&self, now: Instant) -> Option<u64> {
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
