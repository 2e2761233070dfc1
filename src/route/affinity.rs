//! Affinity: which backend of a pool a request prefers, before the pool's balancing.
//!
//! A prompt cache (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's slot cache)
//! makes a request cheap on the backend that served its prefix, and only there: a balancer that
//! looks at load alone scatters a conversation's turns and throws the cache away. With
//! `affinity = "prefix"` a pool keeps a bounded [`PrefixIndex`] of which backend last served each
//! prompt block ([`crate::request::prefix`] names them) and prefers, in order:
//! 1. the backend that served the longest prefix of the prompt, when that prefix reaches past the
//!    conversation's key (this tokenmeter has seen an earlier turn of this conversation) or the
//!    key itself was served there: `hit`;
//! 2. else the conversation's **home**: the backend with the highest rendezvous score
//!    `xxh3(backend, seed = key)` (highest random weight hashing), a function of the prompt and
//!    the backend set alone, so tokenmeter replicas that share no state send a conversation to
//!    the same backend, and a backend joining or leaving moves only the conversations it wins or
//!    held: `miss`.
//!
//! A prefix shorter than the key (a system prompt that many conversations share) does not decide:
//! following it would pile every conversation of a popular template onto one backend, while
//! homes spread them and each backend soon caches every popular system prompt anyway.
//!
//! The load bound, as consistent hashing with bounded loads: when the preferred backend has more
//! streams in flight than `affinity_load_factor` x the least-loaded candidate's plus
//! `affinity_load_slack`, the pool's balancing decides instead (`overloaded`). Either way the
//! chosen backend is remembered as the prompt's owner, so the next turn follows it.
//!
//! `affinity = "header:<name>"` is the home alone, keyed by the header's value (a session or user
//! id the client knows), with the same bound; a generation request without the header is a
//! `miss` and balanced.
//!
//! Entries carry the backend's ejection epoch: a backend that is ejected, or leaves the pool,
//! leaves the index at once (its entries are dead, and removed when next met).
use std::sync::{Arc, Mutex, MutexGuard};

use http::{HeaderMap, HeaderName};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::backend::Backend;
use super::series::AffinityMetrics;
use crate::config::{Affinity, PoolConfig};
use crate::metrics::Metrics;
use crate::request::prefix::PromptPrefix;

pub mod index;

pub(crate) use index::holders::MAX_HOLDERS;
pub(crate) use index::{Owner, PrefixIndex};

#[cfg(test)]
mod tests;

/// How an affinity decision went: the `result` label `hit`, `miss` or `overloaded`, in
/// [`AffinityMetrics::decisions`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The backend known to hold the conversation (prefix), or the key's home (header).
    Hit = 0,
    /// Nothing known: the conversation's home (prefix), or no key to hash (header).
    Miss = 1,
    /// The preferred backend was over the load bound: the pool's balancing chose.
    Overloaded = 2,
}

impl Decision {
    /// The `result` label, and the span attribute `tokenmeter.route.affinity`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Hit => "hit",
            Decision::Miss => "miss",
            Decision::Overloaded => "overloaded",
        }
    }
}

/// What a request offers affinity: its prompt's blocks and the affinity headers' values.
#[derive(Debug, Default, Clone)]
pub struct AffinityKeys {
    /// A generation request (only those are counted).
    pub generation: bool,
    pub prefix: Option<PromptPrefix>,
    /// Each header-mode pool's header, and the hash of its value when the request has it.
    pub headers: Vec<(HeaderName, Option<u64>)>,
}

impl AffinityKeys {
    /// The hash of a header's value, for pools keyed by it.
    pub fn header(name: &HeaderName, headers: &HeaderMap) -> Option<u64> {
        headers
            .get(name)
            .map(|value| xxh3_64_with_seed(value.as_bytes(), 0))
    }

    fn header_key(&self, name: &HeaderName) -> Option<u64> {
        self.headers
            .iter()
            .find(|(known, _)| known == name)
            .and_then(|(_, key)| *key)
    }
}

/// The leading runs of a prompt's blocks that backends hold ([`PoolAffinity::cached_runs`]): one
/// per holder of its first block, at most [`MAX_HOLDERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CachedRuns {
    /// Each holder and the bytes of the prompt's text in its run.
    runs: [(Owner, u64); MAX_HOLDERS],
    len: usize,
    /// Bytes of the whole prompt's text.
    prompt_bytes: u64,
}

impl CachedRuns {
    /// Bytes of the prompt's text `owner` holds from the start (0 when it is not a holder).
    pub(crate) fn bytes_of(&self, owner: Owner) -> u64 {
        self.runs[..self.len]
            .iter()
            .find(|(o, _)| *o == owner)
            .map_or(0, |&(_, bytes)| bytes)
    }

    /// `owner`'s share of a prompt of `prompt_tokens` tokens.
    pub fn tokens_of(&self, owner: Owner, prompt_tokens: u64) -> u64 {
        if self.prompt_bytes == 0 {
            return 0;
        }
        let bytes = self.bytes_of(owner);
        let tokens = u128::from(prompt_tokens) * u128::from(bytes) / u128::from(self.prompt_bytes);
        u64::try_from(tokens).unwrap_or(u64::MAX).min(prompt_tokens)
    }
}

/// The prompt tokens of a prompt of `prompt_tokens` that each backend's cache holds, as a placement
/// weighs them: by the runs `affinity` knows for `keys` ([`PoolAffinity::cached_runs`], walked once
/// here); 0 everywhere in a pool without prefix affinity.
pub fn cached_tokens(
    affinity: Option<&PoolAffinity>,
    keys: &AffinityKeys,
    prompt_tokens: u64,
) -> impl Fn(&Backend) -> u64 {
    let runs = affinity.and_then(|affinity| affinity.cached_runs(keys));
    move |backend| runs.map_or(0, |runs| runs.tokens_of(backend.owner(), prompt_tokens))
}

/// A pool's affinity: its mode, load bound, index and counters.
#[derive(Debug)]
pub struct PoolAffinity {
    pub mode: Affinity,
    load_factor: f64,
    load_slack: u64,
    /// The prefix index's capacity, in blocks (0 unless `prefix`).
    index_blocks: usize,
    index: Mutex<PrefixIndex>,
    metrics: Option<AffinityMetrics>,
}

impl PoolAffinity {
    /// `None` for `affinity = "none"`.
    pub fn new(config: &PoolConfig, metrics: Option<&Metrics>) -> Option<Self> {
        if config.affinity == Affinity::None {
            return None;
        }
        let blocks = match config.affinity {
            Affinity::Prefix => config.affinity_index_blocks,
            _ => 0,
        };
        Some(Self {
            mode: config.affinity.clone(),
            load_factor: config.affinity_load_factor,
            load_slack: config.affinity_load_slack,
            index_blocks: blocks,
            index: Mutex::new(PrefixIndex::new(blocks)),
            metrics: metrics.map(|m| AffinityMetrics::new(m, &config.name)),
        })
    }

    /// Whether `config` (the pool's, after a reload) asks for this same affinity: then its
    /// prefix index stays valid and is kept.
    pub(crate) fn settings_match(&self, config: &PoolConfig) -> bool {
        let blocks = match config.affinity {
            Affinity::Prefix => config.affinity_index_blocks,
            _ => 0,
        };
        self.mode == config.affinity
            && self.load_factor == config.affinity_load_factor
            && self.load_slack == config.affinity_load_slack
            && self.index_blocks == blocks
    }

    /// The backend this request prefers among `backends` (those `eligible` may take it), and how
    /// the decision went; `(None, Some(Overloaded))` when the preferred one is over the bound,
    /// `(None, None)` when affinity has nothing to say (not a generation request, no candidate).
    pub fn prefer(
        &self,
        backends: &[Arc<Backend>],
        keys: &AffinityKeys,
        eligible: impl Fn(&Arc<Backend>) -> bool,
    ) -> (Option<Arc<Backend>>, Option<Decision>) {
        if !keys.generation {
            return (None, None);
        }
        let candidates: Vec<&Arc<Backend>> = backends.iter().filter(|b| eligible(b)).collect();
        let Some(least) = candidates.iter().map(|b| b.streams()).min() else {
            return (None, None);
        };
        let (preferred, decision) = match &self.mode {
            Affinity::None => return (None, None),
            Affinity::Prefix => {
                let Some(prefix) = &keys.prefix else {
                    return (None, Some(Decision::Miss));
                };
                match self.holder(backends, prefix) {
                    Some(holder) if candidates.iter().any(|b| Arc::ptr_eq(b, &holder)) => {
                        (holder, Decision::Hit)
                    }
                    _ => match home(&candidates, prefix.key) {
                        Some(home) => (home, Decision::Miss),
                        None => return (None, None),
                    },
                }
            }
            Affinity::Header(name) => {
                match keys.header_key(name).and_then(|key| home(&candidates, key)) {
                    Some(home) => (home, Decision::Hit),
                    None => return (None, Some(Decision::Miss)),
                }
            }
        };
        let bound = least as f64 * self.load_factor + self.load_slack as f64;
        if preferred.streams() as f64 > bound {
            return (None, Some(Decision::Overloaded));
        }
        (Some(preferred), Some(decision))
    }

    /// Remembers that `backend` serves this request's prompt (prefix mode).
    pub fn remember(&self, keys: &AffinityKeys, backend: &Backend) {
        let (Affinity::Prefix, Some(prefix)) = (&self.mode, &keys.prefix) else {
            return;
        };
        let owner = backend.owner();
        let mut index = self.lock();
        for &name in &prefix.blocks {
            index.insert(name, owner);
        }
        index.insert(prefix.key, owner);
        let held = index.len();
        drop(index);
        if let Some(m) = &self.metrics {
            m.blocks.set(held as f64);
        }
    }

    /// Bytes of the prompt's text that `backend` is known to hold (prefix mode): its run of the
    /// prompt's blocks from the first, as the index says now. Reads without refreshing or
    /// evicting anything, so asking changes no other request's routing.
    pub(crate) fn cached_bytes(&self, keys: &AffinityKeys, backend: &Backend) -> Option<u64> {
        let (Affinity::Prefix, Some(prefix)) = (&self.mode, &keys.prefix) else {
            return None;
        };
        let owner = backend.owner();
        let index = self.lock();
        let held = prefix
            .blocks
            .iter()
            .take_while(|&&name| index.peek(name).is_some_and(|h| h.contains(owner)))
            .count();
        Some((held as u64 * prefix.block_bytes).min(prefix.bytes))
    }

    /// The backends that can hold a leading run of the prompt's blocks in their prompt caches
    /// (the holders of its first block, as the index says now) and each run's length: the cached
    /// share a latency prediction subtracts. One walk over the blocks for all of them; reads
    /// without refreshing or evicting anything.
    pub(crate) fn cached_runs(&self, keys: &AffinityKeys) -> Option<CachedRuns> {
        let (Affinity::Prefix, Some(prefix)) = (&self.mode, &keys.prefix) else {
            return None;
        };
        let index = self.lock();
        let first = index.peek(*prefix.blocks.first()?)?;
        let mut runs = [(first.latest(), 0u64); MAX_HOLDERS];
        let len = first.as_slice().len();
        for (run, &owner) in runs.iter_mut().zip(first.as_slice()) {
            run.0 = owner;
        }
        // Each holder's run ends at the first block it does not hold; the walk ends with the last.
        let mut running = len;
        for (i, &name) in prefix.blocks.iter().enumerate() {
            let holders = index.peek(name);
            for run in runs[..len].iter_mut().filter(|run| run.1 == i as u64) {
                if holders.is_some_and(|h| h.contains(run.0)) {
                    run.1 += 1;
                } else {
                    running -= 1;
                }
            }
            if running == 0 {
                break;
            }
        }
        drop(index);
        for run in &mut runs[..len] {
            run.1 = (run.1 * prefix.block_bytes).min(prefix.bytes);
        }
        Some(CachedRuns {
            runs,
            len,
            prompt_bytes: prefix.bytes,
        })
    }

    /// Counts a decision.
    pub fn count(&self, decision: Decision) {
        if let Some(m) = &self.metrics {
            m.decisions[decision as usize].increment(1);
        }
    }

    /// The live backend known to hold the conversation: the owner of the longest indexed prefix
    /// when it reaches past the key, else the owner of the key.
    fn holder(&self, backends: &[Arc<Backend>], prefix: &PromptPrefix) -> Option<Arc<Backend>> {
        let resolve = |owner: Owner| backends.iter().find(|b| b.owner() == owner).map(Arc::clone);
        let alive = |owner: Owner| resolve(owner).is_some();
        let mut index = self.lock();
        let (matched, owner) = index.longest(&prefix.blocks, alive);
        let past_key = matched as u64 * prefix.block_bytes > prefix.key_bytes;
        let owner = match owner {
            Some(owner) if past_key => Some(owner),
            _ => index.get(prefix.key, alive),
        };
        drop(index);
        owner.and_then(resolve)
    }

    fn lock(&self) -> MutexGuard<'_, PrefixIndex> {
        self.index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The rendezvous (highest random weight) choice for `key`: the candidate whose name, hashed
/// with the key as seed, scores highest.
pub fn home(candidates: &[&Arc<Backend>], key: u64) -> Option<Arc<Backend>> {
    candidates
        .iter()
        .max_by_key(|b| xxh3_64_with_seed(b.target.label.as_bytes(), key))
        .map(|b| Arc::clone(b))
}
