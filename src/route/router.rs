//! The router: pools, rules, calibration and health policy, shared by every request.
//!
//! It acts twice per request, in two layers of its own: the **plan** ([`super::plan`]: estimate
//! the prompt, then let the rules list the candidate pools, best first) and the **dispatch**
//! ([`super::dispatch`]: pick a backend of the planned pools ([`Router::pick`]), forward, retry,
//! and report to health ([`Router::report`])). Its calibration learns at the finish point
//! ([`Calibrator`] is a finish hook).
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::affinity::{AffinityKeys, Decision, PoolAffinity};
use super::backend::Backend;
use super::estimate::Calibrator;
use super::handoff::finish::HandoffHook;
use super::handoff::slots::SlotTables;
use super::handoff::PoolHandoff;
use super::health::{EjectPolicy, Fault, Verdict};
use super::pools::Pool;
use super::rules::Rules;
use super::slo::gate::Gate;
use super::slo::hook::SloHook;
use super::slo::{self, Decision as SloDecision, Demand, Placed, PoolSlo};
use super::{balance, probe, series, RouteError};
use crate::config::{Affinity, BalanceLoad, Config, PoolConfig};
use crate::context::{Prediction, RequestContext, RoutePlan};
use crate::metrics::Metrics;
use crate::proxy::client::UpstreamClient;
use crate::request::prefix;
use crate::tls::TlsClient;

/// The backend a request goes to next ([`Router::pick`]).
#[derive(Debug, Clone)]
pub struct Pick {
    /// Index of its pool.
    pub pool: usize,
    pub backend: Arc<Backend>,
    /// Why that pool: `rule`, `spill`, `fallback` or `panic`.
    pub reason: &'static str,
    /// Bytes of the prompt's text the backend was known to hold in its prompt cache (a pool with
    /// prefix affinity and a handoff, the one reader; `None` elsewhere).
    pub cached_bytes: Option<u64>,
    /// The pool's affinity decision (`hit`, `miss`, `overloaded`), in a pool with one.
    pub affinity: Option<&'static str>,
    /// What the latency model predicted there, in a `balance = "slo"` pool.
    pub prediction: Option<Prediction>,
}

/// A backend chosen within a pool, and what its affinity and latency model said.
#[derive(Debug)]
struct Chosen {
    backend: Arc<Backend>,
    cached_bytes: Option<u64>,
    affinity: Option<&'static str>,
    prediction: Option<Prediction>,
}

/// The pools, rules, calibration and health policy, shared by every request.
#[derive(Debug)]
pub struct Router {
    pub(crate) pools: Vec<Arc<Pool>>,
    /// Each pool's affinity (`None`: balancing alone), in pool order.
    affinities: Vec<Option<Arc<PoolAffinity>>>,
    /// Each pool's handoff to a prefill pool (`None`: it prefills its own requests), in pool
    /// order.
    pub(super) handoffs: Vec<Option<Arc<PoolHandoff>>>,
    /// Counts what the handoffs did, at the finish point; `None` when no pool hands off.
    handoff_hook: Option<Arc<HandoffHook>>,
    /// Each pool's latency-predicting placement (`None`: not `balance = "slo"`), in pool order.
    pub(super) slo: Vec<Option<Arc<PoolSlo>>>,
    /// Each `balance = "slo"` pool's gateway queue (`[pools.queue]`), in pool order.
    gates: Vec<Option<Arc<Gate>>>,
    /// Teaches the latency models at the finish point; `None` when no pool places by them.
    slo_hook: Option<Arc<SloHook>>,
    /// The slots of llama.cpp servers the handoffs reserve, kept across reloads.
    pub(super) slot_tables: Arc<SlotTables>,
    pub(crate) rules: Rules,
    pub(super) calibrator: Arc<Calibrator>,
    /// What the calibrator was made from (prior, window, per-model priors): a reload that
    /// changes none keeps it, and what it learned.
    calibration: (f64, u32, BTreeMap<String, f64>),
    pub(super) metrics: Arc<Metrics>,
    pub(crate) policy: EjectPolicy,
    pub(crate) retries: u32,
    fallback: bool,
    pub(crate) dns_refresh: Duration,
    /// Bound on one active health check or scrape.
    pub(crate) probe_timeout: Duration,
    pub(super) tokenize: bool,
    pub(super) tokenize_timeout: Duration,
    prefix_block_bytes: usize,
    prefix_key_blocks: usize,
    /// The client for the router's own requests (confirming checks, tokenizer calls); set once
    /// by [`Router::connect`]. Without it (a router used on its own) neither happens.
    pub(super) client: OnceLock<UpstreamClient>,
}

/// The TLS client of a pool with `https://` backends: its own `tls` table, else `[upstream.tls]`
/// (loaded only where needed, so a plain-HTTP config never reads the system's trust roots). The
/// previous one is kept when neither its table nor its files changed.
fn pool_tls(
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

impl Router {
    /// Builds the pools (the implicit `default` one when none are configured) and compiles the rules.
    pub fn from_config(config: &Config, metrics: Arc<Metrics>) -> Result<Self, RouteError> {
        Self::build(config, metrics, None)
    }

    /// The router of a reloaded `config`, for requests from now on. What this one learned carries
    /// over where the config leaves it meaningful: backends that stay (same pool, same URL) keep
    /// their health, load and ejections; a pool whose affinity settings are unchanged keeps its
    /// prefix index; the prompt calibration is kept while its priors and window are unchanged.
    /// Requests in flight keep the router they started with.
    pub fn reloaded(&self, config: &Config) -> Result<Self, RouteError> {
        Self::build(config, Arc::clone(&self.metrics), Some(self))
    }

    fn build(
        config: &Config,
        metrics: Arc<Metrics>,
        previous: Option<&Router>,
    ) -> Result<Self, RouteError> {
        series::describe(&metrics);
        let effective = config.effective_pools();
        let before = |name: &str| {
            previous.and_then(|p| {
                let index = p.pools.iter().position(|pool| &*pool.name == name)?;
                Some((index, p))
            })
        };
        let pools = effective
            .iter()
            .enumerate()
            .map(|(index, pool)| {
                let old = before(&pool.name).map(|(i, p)| &p.pools[i]);
                let tls = pool_tls(config, index, pool, old.and_then(|p| p.tls.as_ref()))?;
                Pool::reconfigured(
                    pool,
                    Some(Arc::clone(&metrics)),
                    tls.as_ref(),
                    old.map(|p| &**p),
                )
                .map(Arc::new)
                .map_err(|source| RouteError::Target {
                    pool: pool.name.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let same_blocks = previous.is_some_and(|p| {
            p.prefix_block_bytes == config.routing.prefix_block_bytes
                && p.prefix_key_blocks == config.routing.prefix_key_blocks
        });
        let affinities: Vec<Option<Arc<PoolAffinity>>> = effective
            .iter()
            .map(|pool| {
                let kept = before(&pool.name).and_then(|(i, p)| {
                    let old = p.affinities[i].as_ref()?;
                    (same_blocks && old.settings_match(pool)).then(|| Arc::clone(old))
                });
                kept.or_else(|| PoolAffinity::new(pool, Some(&metrics)).map(Arc::new))
            })
            .collect();
        let names: Vec<&str> = pools.iter().map(|p| &*p.name).collect();
        let rules = Rules::new(&config.rules, &names)?;
        let handoffs = effective
            .iter()
            .map(|pool| {
                let Some(handoff) = &pool.handoff else {
                    return Ok(None);
                };
                PoolHandoff::new(handoff, &names)
                    .map(|compiled| Some(Arc::new(compiled)))
                    .ok_or_else(|| RouteError::HandoffPool {
                        pool: pool.name.clone(),
                        prefill: handoff.prefill_pool.clone(),
                    })
            })
            .collect::<Result<Vec<_>, RouteError>>()?;
        let slo: Vec<Option<Arc<PoolSlo>>> = effective
            .iter()
            .enumerate()
            .map(|(index, pool)| {
                (pool.balance == BalanceLoad::Slo)
                    .then(|| Arc::new(PoolSlo::new(index, &pool.name, config, Some(&metrics))))
            })
            .collect();
        let gates = effective
            .iter()
            .zip(&slo)
            .enumerate()
            .map(|(index, (pool, placement))| {
                let (Some(queue), Some(placement)) = (&pool.queue, placement) else {
                    return None;
                };
                Some(Arc::new(Gate::new(
                    Arc::clone(&pools[index]),
                    Arc::clone(placement),
                    affinities[index].clone(),
                    queue.clone(),
                    Some(&metrics),
                )))
            })
            .collect();
        let slo_hook = slo
            .iter()
            .any(Option::is_some)
            .then(|| Arc::new(SloHook::new(pools.clone(), slo.clone())));
        let handoff_hook = handoffs
            .iter()
            .any(Option::is_some)
            .then(|| Arc::new(HandoffHook::new(Arc::clone(&metrics), config)));
        let routing = &config.routing;
        let priors: Vec<(Arc<str>, f64)> = routing
            .model_tokens_per_byte
            .iter()
            .map(|(model, ratio)| (metrics.model_label(Some(model)), *ratio))
            .collect();
        let calibration = (
            routing.prior_tokens_per_byte,
            routing.calibration_window,
            routing.model_tokens_per_byte.clone(),
        );
        let calibrator = match previous.filter(|p| p.calibration == calibration) {
            Some(p) => Arc::clone(&p.calibrator),
            None => Arc::new(
                Calibrator::new(
                    routing.prior_tokens_per_byte,
                    routing.calibration_window,
                    Some(Arc::clone(&metrics)),
                )
                .with_priors(priors),
            ),
        };
        let client = previous.map_or_else(OnceLock::new, |p| p.client.clone());
        let slot_tables = previous.map_or_else(Arc::default, |p| Arc::clone(&p.slot_tables));
        Ok(Self {
            pools,
            affinities,
            handoffs,
            handoff_hook,
            slo,
            gates,
            slo_hook,
            slot_tables,
            rules,
            calibrator,
            calibration,
            metrics,
            policy: EjectPolicy::from_config(routing),
            retries: routing.retries,
            fallback: routing.fallback,
            dns_refresh: routing.dns_refresh,
            probe_timeout: config.upstream.connect_timeout + Duration::from_secs(1),
            tokenize: routing.tokenize,
            tokenize_timeout: routing.tokenize_timeout,
            prefix_block_bytes: routing.prefix_block_bytes,
            prefix_key_blocks: routing.prefix_key_blocks,
            client,
        })
    }

    /// Gives the router the client for its own requests to backends (health checks that confirm
    /// answer failures, tokenizer calls). The server does this once at start.
    pub fn connect(&self, client: &UpstreamClient) {
        let _ = self.client.set(client.clone());
    }

    /// The pools, in configuration order.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// The prompt calibration.
    pub fn calibrator(&self) -> &Arc<Calibrator> {
        &self.calibrator
    }

    /// Whether a pool hands its prefills off to another (then the stack has a handoff layer).
    pub fn hands_off(&self) -> bool {
        self.handoff_hook.is_some()
    }

    /// The finish hook that counts the handoffs; `None` when no pool hands off.
    pub fn handoff_hook(&self) -> Option<Arc<dyn crate::context::FinishHook>> {
        self.handoff_hook
            .as_ref()
            .map(|hook| Arc::clone(hook) as Arc<dyn crate::context::FinishHook>)
    }

    /// The finish hook that teaches the latency models; `None` when no pool has
    /// `balance = "slo"`.
    pub fn slo_hook(&self) -> Option<Arc<dyn crate::context::FinishHook>> {
        self.slo_hook
            .as_ref()
            .map(|hook| Arc::clone(hook) as Arc<dyn crate::context::FinishHook>)
    }

    /// The backend to try next, and why its pool: `rule`, `spill`, `fallback`, or `panic` when
    /// every backend the plan allows is ejected (then the first pool's backends are balanced over
    /// whatever their health; see [`balance::choose_ignoring_health`]).
    ///
    /// Within a pool that has an affinity, the backend it prefers goes first (see
    /// [`super::affinity`]); its decision is counted on a request's first attempt only.
    pub(crate) fn pick(
        &self,
        plan: &RoutePlan,
        keys: &AffinityKeys,
        demand: Demand,
        tried: &[Arc<Backend>],
        now: Instant,
    ) -> Option<Pick> {
        let mut rng = rand::thread_rng();
        let mut reason = "rule";
        for (i, &index) in plan.pools.iter().enumerate() {
            if i > 0 && reason == "fallback" && !self.fallback {
                break;
            }
            let pool = &self.pools[index];
            let spill = i == 0
                && plan.pools.len() > 1
                && plan
                    .spill_queue_tokens
                    .is_some_and(|limit| pool.shortest_queue(now).is_some_and(|q| q > limit));
            if spill {
                reason = "spill";
                continue;
            }
            if let Some(chosen) = self.choose_in(index, keys, demand, tried, now, &mut rng) {
                return Some(Pick {
                    pool: index,
                    backend: chosen.backend,
                    reason,
                    cached_bytes: chosen.cached_bytes,
                    affinity: chosen.affinity,
                    prediction: chosen.prediction,
                });
            }
            reason = "fallback";
        }
        let first = *plan.pools.first()?;
        balance::choose_ignoring_health(&self.pools[first], tried, &mut rng).map(|backend| Pick {
            pool: first,
            backend,
            reason: "panic",
            cached_bytes: None,
            affinity: None,
            prediction: None,
        })
    }

    /// A backend of `pool`: affinity's preference within its load bound, else balancing; and,
    /// in a prefix-affinity pool, the prompt bytes the chosen backend was known to hold before
    /// this request (read before the request is remembered as its own).
    fn choose_in(
        &self,
        index: usize,
        keys: &AffinityKeys,
        demand: Demand,
        tried: &[Arc<Backend>],
        now: Instant,
        rng: &mut impl rand::Rng,
    ) -> Option<Chosen> {
        let pool = &self.pools[index];
        if let Some(slo) = &self.slo[index] {
            return self.place(index, slo, keys, demand, tried, now, rng);
        }
        let Some(affinity) = &self.affinities[index] else {
            return balance::choose(pool, now, tried, rng).map(|backend| Chosen {
                backend,
                cached_bytes: None,
                affinity: None,
                prediction: None,
            });
        };
        let backends = pool.backends();
        let (preferred, decision) = affinity.prefer(&backends, keys, |b| {
            b.available(now) && !tried.iter().any(|t| Arc::ptr_eq(t, b))
        });
        let chosen = preferred.or_else(|| balance::choose(pool, now, tried, rng))?;
        // Only a handoff weighs it: other pools do not walk the index twice per request.
        let cached_bytes = self.handoffs[index]
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

    /// A backend of `balance = "slo"` pool `index` by predicted latency ([`slo::choose`]); with
    /// prefix affinity, the prompt tokens each backend's cache holds shorten its prediction, and
    /// the decision is a `hit` when the chosen backend held some.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        index: usize,
        slo: &PoolSlo,
        keys: &AffinityKeys,
        demand: Demand,
        tried: &[Arc<Backend>],
        now: Instant,
        rng: &mut impl rand::Rng,
    ) -> Option<Chosen> {
        let affinity = self.affinities[index].as_ref();
        let runs = affinity.and_then(|affinity| affinity.cached_runs(keys));
        let cached_tokens = |backend: &Backend| {
            runs.as_ref().map_or(0, |runs| {
                runs.tokens_of(backend.owner(), demand.prompt_tokens)
            })
        };
        let placed = slo::choose(
            &self.pools[index],
            slo,
            demand,
            now,
            tried,
            cached_tokens,
            rng,
        )?;
        Some(self.adopt(index, slo, keys, placed, tried.is_empty()))
    }

    /// Takes `placed` as pool `index`'s choice: marks the backend stalling when the request's
    /// prefill will stall it (in a pool without a prefill pool), counts the decision (on a
    /// request's first attempt only), and tells the pool's affinity the backend now holds the
    /// prompt.
    fn adopt(
        &self,
        index: usize,
        slo: &PoolSlo,
        keys: &AffinityKeys,
        placed: Placed,
        first: bool,
    ) -> Chosen {
        let affinity = self.affinities[index].as_ref();
        // Only a handoff weighs the cached bytes, as in other pools.
        let cached_bytes = self.handoffs[index]
            .is_some()
            .then(|| affinity?.cached_bytes(keys, &placed.backend))
            .flatten()
            .filter(|&bytes| bytes > 0);
        // A pool that hands prefills off marks a stall once its handoff keeps the prefill on the
        // backend (`handoff::predicted`): most of those prefills run elsewhere.
        if let (Some(until), None) = (placed.stalls_until, &self.handoffs[index]) {
            placed.backend.stall_until(until);
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

    /// The gateway queue of the plan's first pool, when it has one: a request waits there for a
    /// backend predicted to meet its targets (see [`slo::gate`]).
    pub(crate) fn gate(&self, plan: &RoutePlan) -> Option<&Arc<Gate>> {
        self.gates[*plan.pools.first()?].as_ref()
    }

    /// The pick of a request its pool's gate placed, counted as [`Router::pick`] counts one.
    pub(crate) fn admitted(
        &self,
        keys: &AffinityKeys,
        placed: Placed,
        pool: usize,
    ) -> Option<Pick> {
        let slo = self.slo[pool].as_ref()?;
        let chosen = self.adopt(pool, slo, keys, placed, true);
        Some(Pick {
            pool,
            backend: chosen.backend,
            reason: "rule",
            cached_bytes: chosen.cached_bytes,
            affinity: chosen.affinity,
            prediction: chosen.prediction,
        })
    }

    /// What the request offers the affinity of the pools its plan may use: its prompt's blocks
    /// (named only when one of them has `affinity = "prefix"`) and affinity headers' values.
    pub(crate) fn affinity_keys(
        &self,
        context: &RequestContext,
        headers: &http::HeaderMap,
    ) -> AffinityKeys {
        self.affinity_keys_in(context, headers, &context.plan.pools)
    }

    /// What the request offers the affinity of `pools` (see [`Router::affinity_keys`]).
    pub(crate) fn affinity_keys_in(
        &self,
        context: &RequestContext,
        headers: &http::HeaderMap,
        pools: &[usize],
    ) -> AffinityKeys {
        let mut keys = AffinityKeys {
            generation: context.generation.is_some(),
            ..AffinityKeys::default()
        };
        for &index in pools {
            match self.affinities[index].as_ref().map(|a| &a.mode) {
                Some(Affinity::Prefix) if keys.prefix.is_none() => {
                    // Named from where the meter's one walk located the prompt members.
                    keys.prefix = context.generation.as_ref().and_then(|generation| {
                        prefix::name(
                            &generation.body,
                            generation.read.as_ref()?.prompt_spans.as_ref()?,
                            context.model.as_deref(),
                            self.prefix_block_bytes,
                            self.prefix_key_blocks,
                        )
                    });
                }
                Some(Affinity::Header(name)) if !keys.headers.iter().any(|(n, _)| n == name) => {
                    keys.headers
                        .push((name.clone(), AffinityKeys::header(name, headers)));
                }
                _ => {}
            }
        }
        keys
    }

    /// Counts a routing decision.
    pub(crate) fn decided(&self, pool: usize, reason: &'static str) {
        series::route_decision(&self.metrics, &self.pools[pool].name, reason);
    }

    /// Reports a failure to the backend's health; a run of answer failures has its health
    /// endpoint checked (see [`probe::confirm`]).
    pub(crate) fn report(&self, pool: usize, backend: &Arc<Backend>, fault: Fault) {
        let verdict = backend.on_failure(Instant::now(), &self.policy, fault);
        if verdict == Verdict::Confirm {
            if let Some(client) = self.client.get() {
                probe::confirm(
                    client,
                    backend,
                    &self.pools[pool].health_path,
                    self.policy,
                    self.probe_timeout,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
