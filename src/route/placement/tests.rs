//! Placement by predicted latency. A test whose backends have prompt tokens queued runs on paused
//! time: a queue drains with the clock (`Backend::load`), so on real time a stall of the test
//! between queueing the tokens and placing (a loaded machine gives those) would change what is
//! predicted; paused, the clock does not move while a test runs without waiting.
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::config::{BalanceLoad, PoolConfig};
use crate::route::backend::predict::Outcome;
use crate::route::backend::LoadGuard;
use crate::route::health::{EjectPolicy, Fault};

pub(super) fn pool(n: usize) -> Members {
    let config = PoolConfig {
        name: "p".to_owned(),
        urls: (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect(),
        balance: BalanceLoad::Slo,
        ..PoolConfig::default()
    };
    Members::new(&config, None, None).expect("valid pool")
}

fn slo() -> PoolSlo {
    let mut config = Config::default();
    config.slo.ttft = Duration::from_millis(800);
    config.slo.tpot = Duration::from_millis(35);
    PoolSlo::new(0, "p", &config, false, None)
}

/// A pool of one backend per `(rate, base)`, each taught that it prefills `rate` tokens per
/// second, after a `base` and with no other cost; decoding at 10 ms a token.
pub(super) fn taught(lessons: &[(f64, f64)]) -> Members {
    let pool = pool(lessons.len());
    for (backend, &(rate, base)) in pool.backends().iter().zip(lessons) {
        teach_curve(backend, rate, base, 13, |_| 0.010);
    }
    pool
}

/// Teaches `backend` 400 requests over varied loads (up to `streams - 1` streams in its batch) and
/// prompts: the first token after `base` and the queued and uncached work at `rate` tokens per
/// second, then a token every `tpot(streams)` seconds. The gate's tests teach with it too.
pub(super) fn teach_curve(
    backend: &Backend,
    rate: f64,
    base: f64,
    streams: u64,
    tpot: impl Fn(u64) -> f64,
) {
    for i in 0..400u64 {
        let load = Load {
            queued_tokens: (i * 37) % 9_000,
            streams: i % streams,
        };
        let ask = Ask {
            prompt_tokens: 200 + (i * 91) % 4_000,
            cached_tokens: 0,
        };
        let work = (load.queued_tokens + ask.uncached()) as f64;
        let outcome = Outcome {
            ttft: Duration::from_secs_f64(base + work / rate),
            tpot: Some(Duration::from_secs_f64(tpot(load.streams))),
        };
        backend.learn(200, load, ask, outcome);
    }
}

fn demand(prompt_tokens: u64) -> Demand {
    Demand {
        prompt_tokens,
        waited: Duration::ZERO,
        targets: None,
    }
}

fn label(placed: &Placed) -> &str {
    &placed.backend.target.label
}

/// Places a request of `prompt_tokens` at `now`, against the pool's targets, excluding nothing and
/// with nothing cached.
fn place(pool: &Members, prompt_tokens: u64, now: Instant, rng: &mut StdRng) -> Placed {
    place_by(pool, &slo(), prompt_tokens, now, rng)
}

/// [`place`] by the placement `slo`.
fn place_by(
    pool: &Members,
    slo: &PoolSlo,
    prompt_tokens: u64,
    now: Instant,
    rng: &mut StdRng,
) -> Placed {
    choose(pool, slo, demand(prompt_tokens), now, &[], |_| 0, rng).expect("placed")
}

#[tokio::test(start_paused = true)]
async fn a_cold_pool_goes_by_queued_work() {
    let pool = pool(3);
    let backends = pool.backends();
    let _a = LoadGuard::new(Arc::clone(&backends[0]), 4_000);
    let _b = LoadGuard::new(Arc::clone(&backends[2]), 1_000);
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..20 {
        let placed = place(&pool, 500, Instant::now(), &mut rng);
        assert_eq!(
            label(&placed),
            "127.0.0.1:9001",
            "the idle one, by the priors"
        );
        assert!(placed.met, "an idle backend meets 800 ms with 500 tokens");
        assert_eq!(placed.prediction.queued_tokens, 0);
        assert_eq!(placed.prediction.prompt_tokens, 500);
    }
}

#[tokio::test(start_paused = true)]
async fn a_slower_backend_is_used_only_when_it_has_more_headroom() {
    let pool = taught(&[(10_000.0, 0.02), (2_500.0, 0.02)]);
    let backends = pool.backends();
    let slo = slo();
    let mut rng = StdRng::seed_from_u64(2);
    // Both idle: the fast one (0.12 s against 0.42 s).
    let placed = place(&pool, 1_000, Instant::now(), &mut rng);
    assert_eq!(label(&placed), "127.0.0.1:9000");
    let predicted = placed.prediction.ttft.as_secs_f64();
    assert!((predicted - 0.12).abs() < 0.01, "learned: {predicted}");
    // 4 000 tokens queued on the fast one: 0.52 s there, 0.42 s on the slow one.
    let _queued = LoadGuard::new(Arc::clone(&backends[0]), 4_000);
    let placed = place(&pool, 1_000, Instant::now(), &mut rng);
    assert_eq!(
        label(&placed),
        "127.0.0.1:9001",
        "the slow one has more headroom now"
    );
    assert!(placed.met);
    // A request that waited 500 ms in the proxy meets 800 ms nowhere: it goes where it misses
    // least.
    let late = Demand {
        prompt_tokens: 1_000,
        waited: Duration::from_millis(500),
        targets: None,
    };
    let placed = choose(&pool, &slo, late, Instant::now(), &[], |_| 0, &mut rng).expect("placed");
    assert!(!placed.met, "0.92 s at best");
    assert_eq!(label(&placed), "127.0.0.1:9001");
    assert_eq!(placed.ttft_target, Duration::from_millis(800));
    // The same request of a class held to 1 s meets it there: it is placed against its own
    // targets, not the pool's.
    let batch = Demand {
        targets: Some(SloTargets {
            ttft: Duration::from_secs(1),
            tpot: Duration::from_millis(35),
            max_gap: None,
        }),
        ..late
    };
    let placed = choose(&pool, &slo, batch, Instant::now(), &[], |_| 0, &mut rng).expect("placed");
    assert!(placed.met, "0.92 s within 1 s");
    assert_eq!(placed.ttft_target, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_cached_prefix_is_a_term_not_a_preference() {
    let pool = taught(&[(10_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    let slo = slo();
    let mut rng = StdRng::seed_from_u64(3);
    let holder = |backend: &Backend| {
        if &*backend.target.label == "127.0.0.1:9000" {
            5_000
        } else {
            0
        }
    };
    let place_cached = |rng: &mut StdRng| {
        choose(&pool, &slo, demand(6_000), Instant::now(), &[], holder, rng).expect("placed")
    };
    // 6 000-token prompt, 5 000 cached on 9000, which has 3 000 queued: 0.42 s against 0.62 s.
    let queued = LoadGuard::new(Arc::clone(&backends[0]), 3_000);
    let placed = place_cached(&mut rng);
    assert_eq!(
        label(&placed),
        "127.0.0.1:9000",
        "the cache outweighs its queue"
    );
    assert_eq!(placed.prediction.cached_tokens, 5_000);
    // With 8 000 queued there (0.92 s) the other backend wins, cache or not.
    let _more = LoadGuard::new(Arc::clone(&backends[0]), 5_000);
    let placed = place_cached(&mut rng);
    assert_eq!(label(&placed), "127.0.0.1:9001");
    assert_eq!(placed.prediction.cached_tokens, 0);
    drop(queued);
}

#[test]
fn streams_past_the_tpot_target_count_against_a_backend() {
    let pool = pool(2);
    let backends = pool.backends();
    // 9001 decodes at 30 ms a token plus 1 ms per stream: 10 streams put it past 35 ms.
    for backend in backends.iter() {
        for i in 0..400u64 {
            let load = Load {
                queued_tokens: 0,
                streams: i % 20,
            };
            let outcome = Outcome {
                ttft: Duration::from_millis(50),
                tpot: Some(Duration::from_secs_f64(
                    0.020 + 0.001 * (load.streams + 1) as f64,
                )),
            };
            backend.learn(200, load, Ask::default(), outcome);
        }
    }
    let _guards: Vec<LoadGuard> = (0..16)
        .map(|_| LoadGuard::new(Arc::clone(&backends[0]), 0))
        .collect();
    let mut rng = StdRng::seed_from_u64(4);
    let placed = place(&pool, 100, Instant::now(), &mut rng);
    assert_eq!(
        label(&placed),
        "127.0.0.1:9001",
        "17 streams would decode at 37 ms"
    );
    let tpot = placed.prediction.tpot.as_secs_f64();
    assert!((tpot - 0.021).abs() < 0.002, "{tpot}");
}

/// Ejects `backend` for 10 s from `now`: one connection failure, under a policy that ejects after
/// one.
fn eject(backend: &Backend, now: Instant) {
    let policy = EjectPolicy {
        after: 1,
        base: Duration::from_secs(10),
        max: Duration::from_secs(10),
    };
    backend.on_failure(now, &policy, Fault::Connection);
}

#[test]
fn never_an_ejected_or_excluded_backend() {
    let pool = pool(3);
    let backends = pool.backends();
    let now = Instant::now();
    eject(&backends[1], now);
    let excluded = [Arc::clone(&backends[2])];
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..50 {
        let placed =
            choose(&pool, &slo(), demand(100), now, &excluded, |_| 0, &mut rng).expect("one left");
        assert_eq!(label(&placed), "127.0.0.1:9000");
    }
    let all = [Arc::clone(&backends[0]), Arc::clone(&backends[2])];
    assert!(choose(&pool, &slo(), demand(100), now, &all, |_| 0, &mut rng).is_none());
}

#[test]
fn equal_predictions_spread_over_the_backends() {
    let pool = pool(4);
    let mut rng = StdRng::seed_from_u64(6);
    let mut counts = std::collections::HashMap::new();
    for _ in 0..400 {
        let placed = place(&pool, 100, Instant::now(), &mut rng);
        *counts.entry(label(&placed).to_owned()).or_insert(0) += 1;
    }
    assert_eq!(counts.len(), 4, "every backend is chosen: {counts:?}");
    assert!(counts.values().all(|&n| n > 60), "{counts:?}");
}

#[test]
fn a_backend_that_fits_the_tpot_target_beats_any_that_does_not() {
    let targets = SloTargets {
        ttft: Duration::from_millis(800),
        tpot: Duration::from_millis(40),
        max_gap: None,
    };
    let ms = Duration::from_millis;
    let close = Score::of(targets, ms(400), ms(39));
    assert!(
        close.fits && (close.margin - 0.5).abs() < 1e-9,
        "TTFT headroom alone: {close:?}"
    );
    assert!((close.worst - 0.025).abs() < 1e-9, "{close:?}");
    assert!(close.met());
    let late = Score::of(targets, ms(1_000), ms(10));
    assert!(
        late.fits && !late.met() && (late.margin + 0.25).abs() < 1e-9,
        "{late:?}"
    );
    let crowded = Score::of(targets, ms(100), ms(50));
    assert!(
        !crowded.fits && (crowded.margin + 0.25).abs() < 1e-9,
        "{crowded:?}"
    );
    assert!(late > crowded, "fitting the TPOT target comes first");
    assert!(close > late);
}

#[tokio::test(start_paused = true)]
async fn between_misses_the_fewer_streams_win_then_the_lesser_worse_miss() {
    let pool = pool(2);
    let backends = pool.backends();
    // Both decode at 20 ms + 1 ms per stream (16 streams: 37 ms, past 35) and prefill 10 000
    // tokens/s.
    for backend in backends.iter() {
        teach_curve(backend, 10_000.0, 0.02, 20, |streams| {
            0.020 + 0.001 * (streams + 1) as f64
        });
    }
    let mut rng = StdRng::seed_from_u64(10);
    // 9000: 16 streams decoding, nothing queued: 37 ms a token (a 6 % miss), first token in
    // 0.07 s. 9001: four requests, three of them queued with 10 000 tokens each: first token in
    // 3 s. Both miss; the fewer streams win.
    let _crowded: Vec<LoadGuard> = (0..16)
        .map(|_| LoadGuard::new(Arc::clone(&backends[0]), 0))
        .collect();
    let mut queued: Vec<LoadGuard> = (0..3)
        .map(|_| LoadGuard::new(Arc::clone(&backends[1]), 10_000))
        .collect();
    queued.push(LoadGuard::new(Arc::clone(&backends[1]), 0));
    let placed = place(&pool, 500, Instant::now(), &mut rng);
    assert!(!placed.met);
    assert_eq!(
        label(&placed),
        "127.0.0.1:9001",
        "four streams, not sixteen, though its queue is three seconds"
    );
    // Sixteen streams on each: the lesser worse miss, a TPOT a little past its target rather
    // than three seconds of queue.
    queued.extend((0..12).map(|_| LoadGuard::new(Arc::clone(&backends[1]), 0)));
    for seed in 0..4 {
        let placed = place(&pool, 500, Instant::now(), &mut StdRng::seed_from_u64(seed));
        assert!(!placed.met);
        assert_eq!(label(&placed), "127.0.0.1:9000", "seed {seed}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_prefill_goes_where_it_stalls_the_fewest_streams() {
    let pool = taught(&[(10_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    // 9000: six streams decoding, nothing queued. 9001: two streams and 1 000 tokens queued, so
    // less headroom, but a 6 000-token prefill (0.6 s, a stall past 4 x 35 ms) meets its target
    // there too (0.72 s against max(0.8 s, 1.5 x 0.62 s)).
    let _many: Vec<LoadGuard> = (0..6)
        .map(|_| LoadGuard::new(Arc::clone(&backends[0]), 0))
        .collect();
    let _few = [
        LoadGuard::new(Arc::clone(&backends[1]), 1_000),
        LoadGuard::new(Arc::clone(&backends[1]), 0),
    ];
    let now = Instant::now();
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..10 {
        let placed = place(&pool, 6_000, now, &mut rng);
        assert_eq!(
            label(&placed),
            "127.0.0.1:9001",
            "two streams stalled, not six"
        );
        assert!(placed.met);
        let until = placed
            .stalls_until
            .expect("a stalling prefill marks its backend");
        let after = until - now;
        let expected = placed.prediction.ttft + STALL_LINGER;
        assert!(
            after.abs_diff(expected) < Duration::from_millis(1),
            "{after:?} against {expected:?}"
        );
    }
    // A chat stalls nobody: most headroom wins, and it marks nothing.
    let placed = place(&pool, 500, now, &mut rng);
    assert_eq!(label(&placed), "127.0.0.1:9000");
    assert_eq!(placed.stalls_until, None);
}

#[test]
fn a_chat_avoids_a_stalling_backend_while_another_meets_its_targets() {
    let pool = taught(&[(10_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    let now = Instant::now();
    backends[0].stall_until(now + Duration::from_secs(1));
    // 9001 has 3 000 tokens queued (0.37 s for a chat, against 0.07 s on 9000): it still meets.
    let queued = LoadGuard::new(Arc::clone(&backends[1]), 3_000);
    let mut rng = StdRng::seed_from_u64(8);
    for _ in 0..10 {
        let placed = place(&pool, 500, now, &mut rng);
        assert_eq!(label(&placed), "127.0.0.1:9001", "away from the stall");
        assert!(placed.met);
    }
    // Once the mark has passed, headroom decides again.
    let later = now + Duration::from_millis(1_001);
    assert_eq!(label(&place(&pool, 500, later, &mut rng)), "127.0.0.1:9000");
    // With 9 000 tokens queued, 9001 misses (0.97 s): a stalling backend that meets is better.
    let _more = LoadGuard::new(Arc::clone(&backends[1]), 6_000);
    assert_eq!(label(&place(&pool, 500, now, &mut rng)), "127.0.0.1:9000");
    drop(queued);
}

#[test]
fn an_idle_backend_whose_model_went_stale_is_tried_again() {
    // 9001 learned a bad moment: 300 ms before any prefill, 1 000 tokens/s after.
    let pool = taught(&[(10_000.0, 0.02), (1_000.0, 0.3)]);
    let backends = pool.backends();
    let _busy = LoadGuard::new(Arc::clone(&backends[0]), 0);
    let mut rng = StdRng::seed_from_u64(9);
    let now = Instant::now();
    // 0.07 s on 9000 with its one stream, 0.8 s on 9001: its model rules it out.
    assert_eq!(label(&place(&pool, 500, now, &mut rng)), "127.0.0.1:9000");
    // Ten seconds without a lesson: idle, so the priors speak for it once more.
    let placed = place(
        &pool,
        500,
        now + RELEARN_AFTER + Duration::from_millis(1),
        &mut rng,
    );
    assert_eq!(label(&placed), "127.0.0.1:9001", "explored again");
    assert!(placed.met, "by the priors");
    let predicted = placed.prediction.ttft.as_secs_f64();
    assert!(
        (predicted - 0.8).abs() < 0.02,
        "the prediction recorded is its own model's, to be judged: {predicted}"
    );
}

#[test]
fn a_pool_learns_what_its_handoffs_add_after_the_prefill() {
    let slo = slo();
    assert_eq!(slo.handoff_overhead(), None, "nothing measured yet");
    slo.handed_off(Duration::from_millis(40));
    assert_eq!(slo.handoff_overhead(), Some(Duration::from_millis(40)));
    // A moving mean: one slow handoff moves it a sixteenth of the way.
    slo.handed_off(Duration::from_millis(200));
    assert_eq!(slo.handoff_overhead(), Some(Duration::from_millis(50)));
    for _ in 0..200 {
        slo.handed_off(Duration::from_millis(10));
    }
    let lately = slo.handoff_overhead().expect("measured");
    assert!(
        (Duration::from_millis(10)..Duration::from_micros(10_100)).contains(&lately),
        "{lately:?}: the latest handoffs"
    );
}

/// A pool of two decode replicas at 10 000 tokens/s handing prefills off to a prefill pool of one
/// replica at 40 000 tokens/s (both after 20 ms), whose prefills outlast `timeout` at their
/// peril. 9000 has six streams decoding; 9001 two, and 4 000 prompt tokens queued. Also the
/// prefill pool's backend.
fn handing_off(timeout: Duration) -> (Members, PoolSlo, Vec<LoadGuard>, Arc<Backend>) {
    let decode = taught(&[(10_000.0, 0.02), (10_000.0, 0.02)]);
    let prefill = Arc::new(taught(&[(40_000.0, 0.02)]));
    let prefill_backend = Arc::clone(&prefill.backends()[0]);
    let slo = slo();
    slo.hand_off_to(handed::PrefillPool::new(prefill, timeout));
    let backends = decode.backends();
    let mut load: Vec<LoadGuard> = (0..6)
        .map(|_| LoadGuard::new(Arc::clone(&backends[0]), 0))
        .collect();
    load.push(LoadGuard::new(Arc::clone(&backends[1]), 4_000));
    load.push(LoadGuard::new(Arc::clone(&backends[1]), 0));
    (decode, slo, load, prefill_backend)
}

/// Checks that `placed` was predicted its first token `seconds` after the dispatch, to 10 ms.
#[track_caller]
fn assert_ttft(placed: &Placed, seconds: f64, why: &str) {
    let ttft = placed.prediction.ttft.as_secs_f64();
    assert!((ttft - seconds).abs() < 0.01, "{why}: {ttft}");
}

#[tokio::test(start_paused = true)]
async fn a_document_handed_off_is_placed_by_its_path_through_the_prefill_pool() {
    let (decode, slo, _load, _) = handing_off(Duration::from_secs(10));
    let mut rng = StdRng::seed_from_u64(10);
    let now = Instant::now();
    // An 8 000-token document would stall either replica's streams (0.8 s of prefill): it is
    // handed off. Through the prefill pool its first token comes 0.22 s after the dispatch, then
    // the decode replica's first step: 0.02 s on 9000, 0.42 s on 9001 behind its 4 000 queued
    // tokens. Scored as if it prefilled where it decodes, it went to 9001, fewer streams to stall.
    for _ in 0..10 {
        let placed = place_by(&decode, &slo, 8_000, now, &mut rng);
        assert_eq!(
            label(&placed),
            "127.0.0.1:9000",
            "its first step comes first"
        );
        assert!(placed.met, "0.24 s within 0.8 s");
        assert_ttft(&placed, 0.24, "the path through");
        assert_eq!(placed.stalls_until, None, "its prefill runs elsewhere");
        assert_eq!(placed.ttft_target, Duration::from_millis(800));
    }
    // Once the pool measured what a handoff adds after the prefill (the transfer and a first
    // step, 50 ms), that is the least it adds.
    slo.handed_off(Duration::from_millis(50));
    let placed = place_by(&decode, &slo, 8_000, now, &mut rng);
    assert_ttft(&placed, 0.27, "0.22 + 0.05");
    // A chat stalls nobody and meets its target where it decodes: scored there (0.07 s on 9000),
    // not through the prefill pool.
    let placed = place_by(&decode, &slo, 500, now, &mut rng);
    assert_eq!(label(&placed), "127.0.0.1:9000");
    assert_ttft(&placed, 0.07, "where it decodes");
}

#[tokio::test(start_paused = true)]
async fn a_document_the_prefill_pool_would_time_out_is_placed_where_it_prefills() {
    // The prefill pool's 0.22 s is past a 0.1 s prefill_timeout: the document prefills where it
    // decodes (`local_busy`), so it is placed as in a pool without a prefill pool: where it
    // stalls the fewest streams (9001: 0.02 + 1.2 s, within 1.5 x its 0.82 s alone), marking it.
    let (decode, slo, _load, _) = handing_off(Duration::from_millis(100));
    let mut rng = StdRng::seed_from_u64(11);
    let now = Instant::now();
    for _ in 0..10 {
        let placed = place_by(&decode, &slo, 8_000, now, &mut rng);
        assert_eq!(
            label(&placed),
            "127.0.0.1:9001",
            "two streams stalled, not six"
        );
        assert_ttft(&placed, 1.22, "where it decodes");
        assert!(placed.stalls_until.is_some(), "it stalls the streams there");
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_prefill_pool_down_a_document_is_placed_where_it_prefills() {
    // The prefill pool's one backend failed and is ejected: no path through it, so the document
    // is placed as in a pool without a prefill pool (9001, two streams stalled, not six).
    let (decode, slo, _load, prefill) = handing_off(Duration::from_secs(10));
    let now = Instant::now();
    eject(&prefill, now);
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..10 {
        let placed = place_by(&decode, &slo, 8_000, now, &mut rng);
        assert_eq!(label(&placed), "127.0.0.1:9001", "where it prefills");
        assert_ttft(&placed, 1.22, "where it decodes");
        assert!(placed.stalls_until.is_some(), "it stalls the streams there");
    }
}

#[tokio::test(start_paused = true)]
async fn a_watcher_stops_once_a_reloaded_pool_claims_the_headroom_it_ticked() {
    // The pool before a reload lives on while its requests finish; the signal it kept must be
    // ticked by the new pool's watcher alone, or each reload would add a tick a second.
    let members = Arc::new(pool(1));
    let settings = AutoscaleConfig::default();
    let old = Arc::new(slo().with_headroom("p", settings.clone(), None, None));
    let first = old.headroom().expect("every slo pool has one").claim();
    let old_watcher = tokio::spawn(watch_headroom(
        Arc::downgrade(&old),
        Arc::clone(&members),
        first,
    ));
    tokio::time::sleep(headroom::TICK * 3).await;
    assert!(!old_watcher.is_finished(), "the only watcher ticks");
    let new = Arc::new(slo().with_headroom("p", settings, None, Some(&old)));
    let kept = new.headroom().expect("kept");
    assert!(std::ptr::eq(kept, old.headroom().expect("built")));
    let second = kept.claim();
    let new_watcher = tokio::spawn(watch_headroom(Arc::downgrade(&new), members, second));
    tokio::time::sleep(headroom::TICK * 3).await;
    assert!(old_watcher.is_finished(), "the old pool's watcher stopped");
    assert!(!new_watcher.is_finished(), "the new pool's watcher ticks");
    drop(new);
    tokio::time::sleep(headroom::TICK * 2).await;
    assert!(new_watcher.is_finished(), "a dropped pool's watcher stops");
    drop(old);
}
