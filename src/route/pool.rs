//! A pool: the unit the rules plan for and each phase asks.
//!
//! It owns its [`Members`] (the backends, how they are found and checked), how a request chooses
//! among them (balancing, a prefix or header [`affinity`](super::affinity), or the latency models'
//! [`placement`](super::placement) with its gateway queue), and its [`handoff`](super::handoff) to
//! a prefill pool. Why one value: a request planned for a pool meets all of these together, and a
//! reload carries each over by the pool's name (members keep their health and load, an affinity
//! whose settings did not change keeps its index). Held as parallel vectors indexed by pool, every
//! phase had to know them all.
use std::sync::Arc;

use tokio::time::Instant;

use super::affinity::{self, AffinityKeys, Decision, PoolAffinity};
use super::backend::Backend;
use super::balance;
use super::handoff::PoolHandoff;
use super::members::Members;
use super::placement::gate::Gate;
use super::placement::handed::PrefillPool;
use super::placement::{self, Decision as SloDecision, Demand, Placed, PoolSlo};
use super::RouteError;
use crate::config::{BalanceLoad, Config, PoolConfig};
use crate::metrics::Metrics;
use crate::route::placement::record::Prediction;
use crate::tls::TlsClient;

/// A pool of the router: its members and how requests are placed on them.
#[derive(Debug)]
pub struct Pool {
    pub name: Arc<str>,
    pub members: Arc<Members>,
    /// Its affinity (`None`: balancing alone).
    pub affinity: Option<Arc<PoolAffinity>>,
    /// Its handoff to a prefill pool (`None`: it prefills its own requests).
    pub handoff: Option<Arc<PoolHandoff>>,
    /// Its latency-predicting placement (`None`: not `balance = "slo"`).
    pub placement: Option<Placement>,
}

/// A `balance = "slo"` pool's latency models, and its gateway queue (`[pools.queue]`).
#[derive(Debug)]
pub struct Placement {
    pub slo: Arc<PoolSlo>,
    pub gate: Option<Arc<Gate>>,
}

/// A backend chosen within a pool, and what its affinity and latency model said.
#[derive(Debug)]
pub struct Chosen {
    pub backend: Arc<Backend>,
    /// Bytes of the prompt's text the backend was known to hold in its prompt cache (a pool with
    /// prefix affinity and a handoff, the one reader; `None` elsewhere).
    pub cached_bytes: Option<u64>,
    /// The affinity's decision (`hit`, `miss`, `overloaded`), in a pool with one.
    pub affinity: Option<&'static str>,
    /// What the latency model predicted there, in a `balance = "slo"` pool.
    pub prediction: Option<Prediction>,
}

/// What a pool is built from: its config, and what the router knows of every pool.
pub struct Recipe<'a> {
    pub index: usize,
    pub config: &'a PoolConfig,
    pub whole: &'a Config,
    /// Every pool's name, in router order (a handoff names its prefill pool by one).
    pub names: &'a [&'a str],
    pub metrics: &'a Arc<Metrics>,
    /// Whether the prompts are named as before (`prefix_block_bytes`, `prefix_key_blocks`): an
    /// affinity index of other blocks cannot be kept.
    pub same_blocks: bool,
}

impl Pool {
    /// The pool of `recipe`; `previous` is the pool of the same name before a reload, whose
    /// members (their health and load) and, while its settings are the same, affinity index it
    /// keeps.
    pub fn build(recipe: &Recipe<'_>, previous: Option<&Pool>) -> Result<Self, RouteError> {
        let Recipe {
            index,
            config,
            whole,
            names,
            metrics,
            same_blocks,
        } = *recipe;
        let old = previous.map(|pool| &*pool.members);
        let tls = tls_of(whole, index, config, old.and_then(|p| p.tls.as_ref()))?;
        let members = Members::reconfigured(config, Some(Arc::clone(metrics)), tls.as_ref(), old)
            .map(Arc::new)
            .map_err(|source| RouteError::Target {
                pool: config.name.clone(),
                source,
            })?;
        let kept = previous.and_then(|p| {
            let old = p.affinity.as_ref()?;
            (same_blocks && old.settings_match(config)).then(|| Arc::clone(old))
        });
        let affinity = kept.or_else(|| PoolAffinity::new(config, Some(metrics)).map(Arc::new));
        let handoff = match &config.handoff {
            None => None,
            Some(handoff) => Some(Arc::new(PoolHandoff::new(handoff, names).ok_or_else(
                || RouteError::HandoffPool {
                    pool: config.name.clone(),
                    prefill: handoff.prefill_pool.clone(),
                },
            )?)),
        };
        let placement = (config.balance == BalanceLoad::Slo).then(|| {
            let designates = config.designates();
            let before = previous
                .and_then(|pool| pool.placement.as_ref())
                .map(|placement| &*placement.slo);
            let slo = Arc::new(
                PoolSlo::new(index, &config.name, whole, designates, Some(metrics)).with_headroom(
                    &config.name,
                    config.autoscale.clone().unwrap_or_default(),
                    Some(metrics),
                    before,
                ),
            );
            // The headroom ticks while the placement lives (a router built outside a runtime,
            // as some tests build one, has no signal).
            let claim = slo.headroom().map(|headroom| headroom.claim());
            if let (Some(claim), Ok(_)) = (claim, tokio::runtime::Handle::try_current()) {
                tokio::spawn(placement::watch_headroom(
                    Arc::downgrade(&slo),
                    Arc::clone(&members),
                    claim,
                ));
            }
            let gate = config.queue.as_ref().map(|queue| {
                Arc::new(Gate::new(
                    Arc::clone(&members),
                    Arc::clone(&slo),
                    affinity.clone(),
                    queue.clone(),
                    Some(metrics),
                ))
            });
            Placement { slo, gate }
        });
        Ok(Self {
            name: Arc::clone(&members.name),
            members,
            affinity,
            handoff,
            placement,
        })
    }

    /// Gives a `balance = "slo"` pool that hands prefills off its prefill pool, of the router's
    /// `pools` (all built: a handoff may name a pool after it): its placement then scores each
    /// decode replica on the path the request's prefill takes from there
    /// ([`placement::handed`]).
    pub fn link(&self, pools: &[Arc<Pool>]) {
        let (Some(placement), Some(handoff)) = (&self.placement, &self.handoff) else {
            return;
        };
        if let Some(prefill) = pools.get(handoff.prefill) {
            let members = Arc::clone(&prefill.members);
            let prefill = PrefillPool::new(members, handoff.prefill_timeout);
            placement.slo.hand_off_to(prefill);
        }
    }

    /// Its backends now (a snapshot: DNS re-resolution swaps the set whole).
    pub fn backends(&self) -> Arc<[Arc<Backend>]> {
        self.members.backends()
    }

    /// The gateway queue of a `balance = "slo"` pool that has one.
    pub fn gate(&self) -> Option<&Arc<Gate>> {
        self.placement.as_ref()?.gate.as_ref()
    }

    /// A backend: by the latency models in a `balance = "slo"` pool ([`placement::choose`]; with
    /// prefix affinity, the prompt tokens each backend's cache holds shorten its prediction, and
    /// the decision is a `hit` when the chosen backend held some); else the affinity's preference
    /// within its load bound, else balancing; and, in a prefix-affinity pool with a handoff, the
    /// prompt bytes the chosen backend was known to hold before this request (read before the
    /// request is remembered as its own).
    pub fn choose(
        &self,
        keys: &AffinityKeys,
        demand: Demand,
        tried: &[Arc<Backend>],
        now: Instant,
        rng: &mut impl rand::Rng,
    ) -> Option<Chosen> {
        if let Some(Placement { slo, .. }) = &self.placement {
            let cached_tokens =
                affinity::cached_tokens(self.affinity.as_deref(), keys, demand.prompt_tokens);
            let placed =
                placement::choose(&self.members, slo, demand, now, tried, cached_tokens, rng)?;
            return Some(self.adopt(slo, keys, placed, tried.is_empty()));
        }
        let Some(affinity) = &self.affinity else {
            return balance::choose(&self.members, now, tried, rng).map(|backend| Chosen {
                backend,
                cached_bytes: None,
                affinity: None,
                prediction: None,
            });
        };
        let backends = self.members.backends();
        let (preferred, decision) = affinity.prefer(&backends, keys, |b| {
            b.available(now) && !tried.iter().any(|t| Arc::ptr_eq(t, b))
        });
        let chosen = preferred.or_else(|| balance::choose(&self.members, now, tried, rng))?;
        // Only a handoff weighs it: other pools do not walk the index twice per request.
        let cached_bytes = self
            .handoff
            .is_some()
            .then(|| affinity.cached_bytes(keys, &chosen))
            .flatten();
        affinity.remember(keys, &chosen);
        if let (Some(decision), true) = (decision, tried.is_empty()) {
            affinity.count(decision);
        }
        Some(Chosen {
            backend: chosen,
            cached_bytes,
            affinity: decision.map(Decision::as_str),
            prediction: None,
        })
    }

    /// The choice of a request this pool's gate placed, counted as [`Pool::choose`] counts one;
    /// `None` in a pool that does not place by latency.
    pub fn admitted(&self, keys: &AffinityKeys, placed: Placed) -> Option<Chosen> {
        let placement = self.placement.as_ref()?;
        Some(self.adopt(&placement.slo, keys, placed, true))
    }

    /// Takes `placed` as this pool's choice: marks the backend stalling when the request's
    /// prefill will stall it (in a pool without a prefill pool), counts the decision (on a
    /// request's `first` attempt only), and tells the pool's affinity the backend now holds the
    /// prompt.
    fn adopt(&self, slo: &PoolSlo, keys: &AffinityKeys, placed: Placed, first: bool) -> Chosen {
        let affinity = self.affinity.as_ref();
        // Only a handoff weighs the cached bytes, as in other pools.
        let cached_bytes = self
            .handoff
            .is_some()
            .then(|| affinity?.cached_bytes(keys, &placed.backend))
            .flatten()
            .filter(|&bytes| bytes > 0);
        // A pool that hands prefills off marks a stall once its handoff keeps the prefill on the
        // backend (`handoff::predicted`): most of those prefills run elsewhere.
        // A gated pool counted the request as it entered the gate (shed ones too).
        if first && self.gate().is_none() {
            slo.offered(placed.prediction.uncached_tokens());
        }
        if let (Some(until), None) = (placed.stalls_until, &self.handoff) {
            placed.backend.stall_until(until);
            // A gated pool counted the long prompt as it entered the gate (the demand includes
            // those it sheds); elsewhere, every long prompt is placed.
            if first && self.gate().is_none() {
                slo.long_prompt(placed.prediction.uncached_tokens());
            }
        } else if first {
            slo.chat_prompt(placed.prediction.uncached_tokens());
            // A gated pool counted the miss as the chat entered the gate (placed from it, it
            // meets its targets).
            if !placed.met && self.gate().is_none() {
                slo.chat_missed();
            }
        }
        if first {
            slo.decided(if placed.met {
                SloDecision::Met
            } else {
                SloDecision::Missed
            });
        }
        let decision = affinity.map(|affinity| {
            affinity.remember(keys, &placed.backend);
            let decision = if placed.prediction.cached_tokens > 0 {
                Decision::Hit
            } else {
                Decision::Miss
            };
            if first && keys.generation {
                affinity.count(decision);
            }
            decision
        });
        Chosen {
            backend: placed.backend,
            cached_bytes,
            affinity: decision.map(Decision::as_str),
            prediction: Some(placed.prediction),
        }
    }
}

/// The TLS client of a pool with `https://` backends: its own `tls` table, else `[upstream.tls]`
/// (loaded only where needed, so a plain-HTTP config never reads the system's trust roots). The
/// previous one is kept when neither its table nor its files changed.
fn tls_of(
    config: &Config,
    index: usize,
    pool: &PoolConfig,
    previous: Option<&TlsClient>,
) -> Result<Option<TlsClient>, RouteError> {
    if !pool.urls.iter().any(|url| url.starts_with("https://")) {
        return Ok(None);
    }
    let loaded = match &pool.tls {
        Some(own) => TlsClient::reload(&format!("pools[{index}].tls"), own, previous),
        None => TlsClient::reload("upstream.tls", &config.upstream.tls, previous),
    };
    loaded.map(Some).map_err(RouteError::Tls)
}
