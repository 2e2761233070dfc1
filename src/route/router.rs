//! The router: the pools, the rules that plan for them, the prompt calibration, and the settings
//! every request shares.
//!
//! It acts twice per request, in two phases of its own: the **plan** ([`super::plan`]: estimate
//! the prompt, then let the rules list the candidate pools, best first) and the **dispatch**
//! ([`super::dispatch`]: pick a backend of the planned pools ([`Router::pick`]; each [`Pool`]
//! chooses among its own members), forward, retry, and report to health ([`Router::report`])).
//! Its calibration learns at the finish point ([`Calibrator`] is a finish hook).
use std::sync::{Arc, OnceLock};

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::affinity::AffinityKeys;
use super::backend::Backend;
use super::estimate::Calibrator;
use super::fleet::{Fleet, SharedPool};
use super::handoff::finish::HandoffHook;
use super::handoff::slots::SlotTables;
use super::health::{Fault, Verdict};
use super::placement::hook::SloHook;
use super::placement::{Demand, Placed};
use super::pool::{Pool, Recipe};
use super::probe;
use super::rules::Rules;
use super::settings::Settings;
use super::{balance, series, RouteError};
use crate::config::{Affinity, Config};
use crate::context::{FinishHook, RequestContext};
use crate::metrics::Metrics;
use crate::proxy::client::UpstreamClient;
use crate::request::prefix;
use crate::route::placement::record::Prediction;
use crate::route::record::RoutePlan;

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

/// The pools, rules, calibration and settings, shared by every request.
#[derive(Debug)]
pub struct Router {
    pub(crate) pools: Vec<Arc<Pool>>,
    pub(crate) rules: Rules,
    pub(super) calibrator: Arc<Calibrator>,
    pub(crate) settings: Settings,
    hooks: Hooks,
    /// The slots of llama.cpp servers the handoffs reserve, kept across reloads.
    pub(super) slot_tables: Arc<SlotTables>,
    pub(super) metrics: Arc<Metrics>,
    /// The client for the router's own requests (confirming checks, tokenizer calls); set once
    /// by [`Router::connect`]. Without it (a router used on its own) neither happens.
    pub(super) client: OnceLock<UpstreamClient>,
    /// The fleet whose load it shares (`[fleet]`), kept across reloads.
    fleet: Option<Arc<Fleet>>,
}

/// The router's finish hooks: each `None` when no pool needs it.
#[derive(Debug)]
struct Hooks {
    /// Counts what the handoffs did.
    handoff: Option<Arc<HandoffHook>>,
    /// Teaches the latency models.
    slo: Option<Arc<SloHook>>,
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
        let settings = Settings::of(config);
        let effective = config.effective_pools();
        let names: Vec<&str> = effective.iter().map(|pool| pool.name.as_str()).collect();
        let same_blocks = previous.is_some_and(|p| {
            p.settings.prefix_block_bytes == settings.prefix_block_bytes
                && p.settings.prefix_key_blocks == settings.prefix_key_blocks
        });
        let pools = effective
            .iter()
            .enumerate()
            .map(|(index, pool)| {
                let before = previous
                    .and_then(|p| p.pools.iter().find(|old| *old.name == *pool.name))
                    .map(|old| &**old);
                let recipe = Recipe {
                    index,
                    config: pool,
                    whole: config,
                    names: &names,
                    metrics: &metrics,
                    same_blocks,
                };
                Pool::build(&recipe, before).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for pool in &pools {
            pool.link(&pools);
        }
        let rules = Rules::new(&config.rules, &names)?;
        let placing = pools.iter().any(|pool| pool.placement.is_some());
        let hooks = Hooks {
            handoff: pools
                .iter()
                .any(|pool| pool.handoff.is_some())
                .then(|| Arc::new(HandoffHook::new(Arc::clone(&metrics), config))),
            slo: placing.then(|| {
                Arc::new(SloHook::new(
                    pools.iter().map(|pool| Arc::clone(&pool.members)).collect(),
                    pools
                        .iter()
                        .map(|pool| pool.placement.as_ref().map(|p| Arc::clone(&p.slo)))
                        .collect(),
                ))
            }),
        };
        let calibrator = match previous.filter(|p| p.settings.calibration == settings.calibration) {
            Some(p) => Arc::clone(&p.calibrator),
            None => {
                let routing = &config.routing;
                let priors: Vec<(Arc<str>, f64)> = routing
                    .model_tokens_per_byte
                    .iter()
                    .map(|(model, ratio)| (metrics.model_label(Some(model)), *ratio))
                    .collect();
                Arc::new(
                    Calibrator::new(
                        routing.prior_tokens_per_byte,
                        routing.calibration_window,
                        Some(Arc::clone(&metrics)),
                    )
                    .with_priors(priors),
                )
            }
        };
        let client = previous.map_or_else(OnceLock::new, |p| p.client.clone());
        let fleet = match previous {
            Some(p) => p.fleet.clone(),
            None => Fleet::open(&config.fleet, &metrics)?,
        };
        let slot_tables = match previous {
            Some(p) => Arc::clone(&p.slot_tables),
            None if fleet.is_some() => Arc::new(SlotTables::in_fleet()),
            None => Arc::default(),
        };
        Ok(Self {
            pools,
            rules,
            calibrator,
            settings,
            hooks,
            slot_tables,
            metrics,
            client,
            fleet,
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

    #[cfg(test)]
    /// The prompt calibration.
    pub(crate) fn calibrator(&self) -> &Arc<Calibrator> {
        &self.calibrator
    }

    /// Whether a pool hands its prefills off to another (then the stack has a handoff phase).
    pub fn hands_off(&self) -> bool {
        self.hooks.handoff.is_some()
    }

    /// Starts the background tasks of the pools' members (DNS, active health checks, scrapes,
    /// the fleet's load sync); the server aborts them at shutdown or replaces them at a reload.
    pub fn spawn_probes(&self, client: &UpstreamClient) -> Vec<JoinHandle<()>> {
        let members = self.pools.iter().map(|pool| &pool.members);
        let mut tasks = probe::spawn(members, &self.settings, client);
        if let Some(fleet) = &self.fleet {
            let pools = self.pools.iter().map(|pool| SharedPool {
                members: Arc::clone(&pool.members),
                slo: pool.placement.as_ref().map(|p| Arc::clone(&p.slo)),
                gate: pool.gate().cloned(),
            });
            tasks.push(fleet.spawn(pools.collect(), Arc::clone(&self.slot_tables)));
        }
        tasks
    }

    /// The router's finish hooks, in order: the prompt calibration, then the handoffs' counts
    /// and the latency models' lessons where a pool needs them.
    pub fn hooks(&self) -> Vec<Arc<dyn FinishHook>> {
        let calibration = Arc::clone(&self.calibrator) as Arc<dyn FinishHook>;
        let handoff = self.hooks.handoff.clone().map(|h| h as Arc<dyn FinishHook>);
        let slo = self.hooks.slo.clone().map(|h| h as Arc<dyn FinishHook>);
        [calibration]
            .into_iter()
            .chain(handoff)
            .chain(slo)
            .collect()
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
            if i > 0 && reason == "fallback" && !self.settings.fallback {
                break;
            }
            let pool = &self.pools[index];
            let spill = i == 0
                && plan.pools.len() > 1
                && plan.spill_queue_tokens.is_some_and(|limit| {
                    pool.members.shortest_queue(now).is_some_and(|q| q > limit)
                });
            if spill {
                reason = "spill";
                continue;
            }
            if let Some(chosen) = pool.choose(keys, demand, tried, now, &mut rng) {
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
        let members = &self.pools[first].members;
        balance::choose_ignoring_health(members, tried, &mut rng).map(|backend| Pick {
            pool: first,
            backend,
            reason: "panic",
            cached_bytes: None,
            affinity: None,
            prediction: None,
        })
    }

    /// The pool of the plan's first choice, when it has a gateway queue: a request waits there
    /// for a backend predicted to meet its targets (see [`super::placement::gate`]).
    pub(crate) fn gate(&self, plan: &RoutePlan) -> Option<&Arc<super::placement::gate::Gate>> {
        self.pools.get(*plan.pools.first()?)?.gate()
    }

    /// The pick of a request its pool's gate placed, counted as [`Router::pick`] counts one.
    pub(crate) fn admitted(
        &self,
        keys: &AffinityKeys,
        placed: Placed,
        pool: usize,
    ) -> Option<Pick> {
        let chosen = self.pools.get(pool)?.admitted(keys, placed)?;
        Some(Pick {
            pool,
            backend: chosen.backend,
            reason: "rule",
            cached_bytes: chosen.cached_bytes,
            affinity: chosen.affinity,
            prediction: chosen.prediction,
        })
    }

    /// The backend of the pool named `pool` labelled `label` (the one a request's context
    /// names).
    pub(crate) fn backend_of(&self, pool: &str, label: &str) -> Option<Arc<Backend>> {
        let pool = self.pools.iter().find(|p| &*p.name == pool)?;
        let backends = pool.backends();
        backends
            .iter()
            .find(|backend| &*backend.target.label == label)
            .cloned()
    }

    /// What the request offers the affinity of the pools its plan may use: its prompt's blocks
    /// (named only when one of them has `affinity = "prefix"`) and affinity headers' values.
    pub(crate) fn affinity_keys(
        &self,
        context: &RequestContext,
        headers: &http::HeaderMap,
    ) -> AffinityKeys {
        self.affinity_keys_in(context, headers, &context.route.plan.pools)
    }

    /// What the request offers the affinity of `pools` (see [`Router::affinity_keys`]).
    pub(crate) fn affinity_keys_in(
        &self,
        context: &RequestContext,
        headers: &http::HeaderMap,
        pools: &[usize],
    ) -> AffinityKeys {
        let mut keys = AffinityKeys {
            generation: context.request.generation.is_some(),
            ..AffinityKeys::default()
        };
        for &index in pools {
            match self.pools[index].affinity.as_ref().map(|a| &a.mode) {
                Some(Affinity::Prefix) if keys.prefix.is_none() => {
                    // Named from where the meter's one walk located the prompt members.
                    keys.prefix = context.request.generation.as_ref().and_then(|generation| {
                        prefix::name(
                            &generation.body,
                            generation.read.as_ref()?.prompt_spans.as_ref()?,
                            context.request.model.as_deref(),
                            self.settings.prefix_block_bytes,
                            self.settings.prefix_key_blocks,
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
        let verdict = backend.on_failure(Instant::now(), &self.settings.policy, fault);
        if verdict == Verdict::Confirm {
            if let Some(client) = self.client.get() {
                probe::confirm(
                    client,
                    backend,
                    &self.pools[pool].members.health_path,
                    self.settings.policy,
                    self.settings.probe_timeout,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
