//! The replica's prefix cache, as vLLM V1's automatic prefix caching keeps it: KV blocks of
//! [`BLOCK_TOKENS`] tokens, each named by the hash chain of its tokens (a block's hash covers its
//! own tokens and its parent's hash), so a block is reusable only when every block before it
//! matches too. Pure bookkeeping, no clock: the scheduler asks how much of a prompt is cached when
//! it admits the request ([`PrefixCache::lookup`]), and gives back the blocks of every finished
//! request, prompt and output ([`PrefixCache::insert`]). Memory is the replica's KV capacity:
//! cached blocks live in what running requests do not reserve and are evicted least recently used
//! first ([`PrefixCache::fit`]).
//!
//! As in vLLM, only full blocks are cached, and a fully cached prompt still computes its last
//! token (the step needs one to sample from), so at most `prompt - 1` tokens are served cached.
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// Tokens per KV block (vLLM's default block size).
pub const BLOCK_TOKENS: usize = 16;

/// The hash chain of the full blocks of `tokens`: block `i`'s hash covers block `i - 1`'s hash
/// and its own tokens.
pub fn block_hashes(tokens: &[u64]) -> Vec<u64> {
    let mut parent = 0u64;
    tokens
        .chunks_exact(BLOCK_TOKENS)
        .map(|block| {
            // The standard library's SipHash with its fixed keys: the same chain every run.
            #[allow(deprecated)]
            let mut hasher = std::hash::SipHasher::new();
            parent.hash(&mut hasher);
            block.hash(&mut hasher);
            parent = hasher.finish();
            parent
        })
        .collect()
}

/// Cached blocks, least recently used first out.
#[derive(Debug, Default)]
pub struct PrefixCache {
    /// Block hash -> the tick it was last used.
    blocks: HashMap<u64, u64>,
    /// Tick -> block hash: the eviction order.
    by_use: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    /// How many leading tokens of a prompt are cached: the longest run of its blocks from the
    /// start that the cache holds, capped at `prompt_tokens - 1`. The blocks found count as used.
    pub fn lookup(&mut self, prompt: &[u64]) -> u64 {
        let mut matched = 0u64;
        for hash in block_hashes(prompt) {
            if !self.blocks.contains_key(&hash) {
                break;
            }
            self.touch(hash);
            matched += BLOCK_TOKENS as u64;
        }
        matched.min((prompt.len() as u64).saturating_sub(1))
    }

    /// Keeps the full blocks of `tokens` (a finished request's prompt and output).
    pub fn insert(&mut self, tokens: &[u64]) {
        for hash in block_hashes(tokens) {
            self.touch(hash);
        }
    }

    /// Evicts least recently used blocks until at most `capacity_tokens` are cached.
    pub fn fit(&mut self, capacity_tokens: u64) {
        let capacity = (capacity_tokens / BLOCK_TOKENS as u64) as usize;
        while self.blocks.len() > capacity {
            let Some((_, hash)) = self.by_use.pop_first() else {
                break;
            };
            self.blocks.remove(&hash);
        }
    }

    /// Tokens held (full blocks).
    pub fn cached_tokens(&self) -> u64 {
        (self.blocks.len() * BLOCK_TOKENS) as u64
    }

    fn touch(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(previous) = self.blocks.insert(hash, self.tick) {
            self.by_use.remove(&previous);
        }
        self.by_use.insert(self.tick, hash);
    }
}

#[cfg(test)]
mod tests;
