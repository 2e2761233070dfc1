//! Power of two choices: pick two distinct healthy backends at random, send to the less loaded.
//!
//! It needs no global view and avoids both the herd effect of always-least-loaded (every proxy
//! instance piling onto the same idle replica) and the blindness of round-robin to long requests.
//! The load is the pool's ([`BalanceLoad`]): streams in flight for decode pools, queued prompt
//! tokens for prefill pools. Ejected backends and those already tried for this request are never
//! candidates, except in panic mode ([`choose_ignoring_health`]).
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::Rng;
use tokio::time::Instant;

use super::backend::Backend;
use super::members::Members;
use crate::config::BalanceLoad;

/// Chooses a healthy backend of `pool` for one request, or `None` when no candidate is left.
pub fn choose(
    pool: &Members,
    now: Instant,
    exclude: &[Arc<Backend>],
    rng: &mut impl Rng,
) -> Option<Arc<Backend>> {
    choose_among(pool, |b| b.available(now) && !excluded(exclude, b), rng)
}

/// Panic mode, as Envoy's panic threshold: when every backend the request could go to is ejected,
/// passive health is more likely wrong (a burst of errors, a restart just finished) than every
/// replica dead, and a refused connection costs as little as a 503. So the request is balanced over
/// the pool's backends whatever their health, still never twice to the same one.
pub(crate) fn choose_ignoring_health(
    pool: &Members,
    exclude: &[Arc<Backend>],
    rng: &mut impl Rng,
) -> Option<Arc<Backend>> {
    choose_among(pool, |b| !excluded(exclude, b), rng)
}

fn excluded(exclude: &[Arc<Backend>], backend: &Arc<Backend>) -> bool {
    exclude.iter().any(|x| Arc::ptr_eq(x, backend))
}

/// P2C (or round-robin) over the backends for which `eligible` holds.
fn choose_among(
    pool: &Members,
    eligible: impl Fn(&Arc<Backend>) -> bool,
    rng: &mut impl Rng,
) -> Option<Arc<Backend>> {
    let backends = pool.backends();
    let eligible = |b: &&Arc<Backend>| eligible(b);
    // Counted, then indexed, so a pick allocates nothing.
    let n = backends.iter().filter(eligible).count();
    let nth = |k: usize| backends.iter().filter(eligible).nth(k).cloned();
    match n {
        0 => None,
        1 => nth(0),
        _ if pool.balance == BalanceLoad::RoundRobin => {
            nth(pool.next.fetch_add(1, Ordering::Relaxed) % n)
        }
        _ => {
            let i = rng.gen_range(0..n);
            let mut j = rng.gen_range(0..n - 1);
            if j >= i {
                j += 1;
            }
            let (a, b) = (nth(i)?, nth(j)?);
            // Ties go to the first draw, which is itself random.
            if b.score(pool.balance) < a.score(pool.balance) {
                Some(b)
            } else {
                Some(a)
            }
        }
    }
}

#[cfg(test)]
mod tests;
