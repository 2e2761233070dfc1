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

use super::pools::{Backend, Pool};
use crate::config::BalanceLoad;

/// Chooses a healthy backend of `pool` for one request, or `None` when no candidate is left.
pub fn choose(
    pool: &Pool,
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
pub fn choose_ignoring_health(
    pool: &Pool,
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
    pool: &Pool,
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
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::route::health::{EjectPolicy, Fault};
    use crate::route::pools::LoadGuard;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::time::Duration;

    fn pool(n: usize, balance: BalanceLoad) -> Pool {
        let config = PoolConfig {
            name: "p".to_owned(),
            urls: (0..n)
                .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
                .collect(),
            balance,
            ..PoolConfig::default()
        };
        Pool::new(&config, None).expect("valid pool")
    }

    fn policy() -> EjectPolicy {
        EjectPolicy {
            after: 1,
            base: Duration::from_secs(10),
            max: Duration::from_secs(10),
        }
    }

    #[test]
    fn never_chooses_an_ejected_or_excluded_backend() {
        let pool = pool(4, BalanceLoad::Streams);
        let backends = pool.backends();
        let now = Instant::now();
        backends[1].on_failure(now, &policy(), Fault::Connection);
        backends[2].on_failure(now, &policy(), Fault::Connection);
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..500 {
            let chosen = choose(&pool, now, &[], &mut rng).expect("two are healthy");
            let label = &*chosen.target.label;
            assert!(
                label == "127.0.0.1:9000" || label == "127.0.0.1:9003",
                "an ejected backend was chosen: {label}"
            );
        }
        let excluded = [Arc::clone(&backends[0])];
        for _ in 0..50 {
            let chosen = choose(&pool, now, &excluded, &mut rng).expect("one left");
            assert_eq!(
                &*chosen.target.label, "127.0.0.1:9003",
                "the only candidate"
            );
        }
        backends[3].on_failure(now, &policy(), Fault::Connection);
        assert!(
            choose(&pool, now, &excluded, &mut rng).is_none(),
            "no candidate left"
        );
        for _ in 0..50 {
            let chosen =
                choose_ignoring_health(&pool, &excluded, &mut rng).expect("panic mode has three");
            assert!(
                !Arc::ptr_eq(&chosen, &backends[0]),
                "panic mode still never repeats a tried backend"
            );
        }
        let all: Vec<_> = backends.iter().cloned().collect();
        assert!(
            choose_ignoring_health(&pool, &all, &mut rng).is_none(),
            "every backend tried: none"
        );
    }

    #[test]
    fn the_less_loaded_of_two_wins() {
        let pool = pool(2, BalanceLoad::Streams);
        let backends = pool.backends();
        let _busy: Vec<LoadGuard> = (0..3)
            .map(|_| LoadGuard::new(Arc::clone(&backends[0]), 0))
            .collect();
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let chosen = choose(&pool, Instant::now(), &[], &mut rng).expect("healthy");
            assert!(
                Arc::ptr_eq(&chosen, &backends[1]),
                "with two backends both are always drawn: the idle one wins"
            );
        }
    }

    #[test]
    fn prompt_token_pools_balance_on_queued_tokens() {
        let pool = pool(2, BalanceLoad::PromptTokens);
        let backends = pool.backends();
        // Backend 0: one long prompt still in prefill. Backend 1: three streams past prefill.
        let _long = LoadGuard::new(Arc::clone(&backends[0]), 8000);
        let decoding: Vec<LoadGuard> = (0..3)
            .map(|_| LoadGuard::new(Arc::clone(&backends[1]), 100))
            .collect();
        for guard in &decoding {
            crate::upstream::BodyGuard::first_frame(guard);
        }
        let mut rng = StdRng::seed_from_u64(3);
        let chosen = choose(&pool, Instant::now(), &[], &mut rng).expect("healthy");
        assert!(
            Arc::ptr_eq(&chosen, &backends[1]),
            "fewer queued prompt tokens wins even with more streams"
        );
    }

    #[test]
    fn p2c_spreads_equal_load_over_every_backend() {
        let pool = pool(3, BalanceLoad::Streams);
        let mut rng = StdRng::seed_from_u64(11);
        let mut counts = [0u32; 3];
        let backends = pool.backends();
        for _ in 0..300 {
            let chosen = choose(&pool, Instant::now(), &[], &mut rng).expect("healthy");
            let i = backends
                .iter()
                .position(|b| Arc::ptr_eq(b, &chosen))
                .expect("a pool member");
            counts[i] += 1;
        }
        assert!(
            counts.iter().all(|&c| c >= 50),
            "every backend gets a fair share at equal load: {counts:?}"
        );
    }

    #[test]
    fn round_robin_cycles() {
        let pool = pool(3, BalanceLoad::RoundRobin);
        let mut rng = StdRng::seed_from_u64(0);
        let picks: Vec<String> = (0..6)
            .map(|_| {
                choose(&pool, Instant::now(), &[], &mut rng)
                    .expect("healthy")
                    .target
                    .label
                    .to_string()
            })
            .collect();
        assert_eq!(
            picks,
            vec![
                "127.0.0.1:9000",
                "127.0.0.1:9001",
                "127.0.0.1:9002",
                "127.0.0.1:9000",
                "127.0.0.1:9001",
                "127.0.0.1:9002"
            ],
            "in order, wrapping"
        );
    }
}
