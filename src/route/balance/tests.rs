use super::*;
use crate::config::PoolConfig;
use crate::route::backend::LoadGuard;
use crate::route::health::{EjectPolicy, Fault};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Duration;

fn pool(n: usize, balance: BalanceLoad) -> Members {
    let config = PoolConfig {
        name: "p".to_owned(),
        urls: (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect(),
        balance,
        ..PoolConfig::default()
    };
    Members::new(&config, None, None).expect("valid pool")
}

fn policy() -> EjectPolicy {
    EjectPolicy {
        after: 1,
        base: Duration::from_secs(10),
        max: Duration::from_secs(10),
    }
}

/// The index of the backend [`choose`] picks now, with nothing tried yet.
fn pick(pool: &Members, rng: &mut StdRng) -> usize {
    let chosen = choose(pool, Instant::now(), &[], rng).expect("healthy");
    pool.backends()
        .iter()
        .position(|b| Arc::ptr_eq(b, &chosen))
        .expect("a pool member")
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
        assert_eq!(
            pick(&pool, &mut rng),
            1,
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
    assert_eq!(
        pick(&pool, &mut rng),
        1,
        "fewer queued prompt tokens wins even with more streams"
    );
}

#[test]
fn p2c_spreads_equal_load_over_every_backend() {
    let pool = pool(3, BalanceLoad::Streams);
    let mut rng = StdRng::seed_from_u64(11);
    let mut counts = [0u32; 3];
    for _ in 0..300 {
        counts[pick(&pool, &mut rng)] += 1;
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
