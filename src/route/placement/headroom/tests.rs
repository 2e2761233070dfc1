//! The headroom signal on backends whose models sit exactly at the priors: taught requests
//! whose outcomes are the priors' own predictions, they count as learned and their coefficients
//! do not move, so each one's capacity is [`capacity::sustained`] of a model at the priors.
use std::time::Duration;

use super::*;
use crate::route::backend::predict::{Ask, LatencyModel, Load, Outcome};
use crate::route::health::EjectPolicy;
use crate::route::members::Members;
use crate::route::placement::tests::pool;

const MEMORY: u32 = 1000;

fn targets() -> SloTargets {
    SloTargets {
        ttft: Duration::from_millis(800),
        tpot: Duration::from_millis(35),
        max_gap: None,
    }
}

/// Teaches `backend` `n` requests at the priors' own predictions.
fn learn_priors(backend: &Backend, n: u64) {
    let model = LatencyModel::new(MEMORY);
    for i in 0..n {
        let load = Load {
            queued_tokens: (i * 997) % 5_000,
            streams: i % 17,
        };
        let ask = Ask {
            prompt_tokens: 200 + (i * 131) % 3_000,
            cached_tokens: 0,
        };
        let predicted = model.predict(load, ask);
        let outcome = Outcome {
            ttft: predicted.ttft,
            tpot: Some(predicted.tpot),
        };
        backend.learn(MEMORY, load, ask, outcome);
    }
}

/// A pool of `n` backends, each taught 50 requests at the priors.
fn learned(n: usize) -> Members {
    let pool = pool(n);
    for backend in pool.backends().iter() {
        learn_priors(backend, 50);
    }
    pool
}

fn settings() -> AutoscaleConfig {
    AutoscaleConfig {
        headroom: 1.25,
        min_replicas: 1,
        max_replicas: 64,
        window: Duration::from_secs(10),
        scale_down_after: Duration::from_secs(60),
        // No forecast and no tolerance, but where a test sets them: the count is the load's now.
        cold_start: Duration::ZERO,
        tolerance: 0.0,
        objective: 0.95,
    }
}

/// What one backend at the priors sustains at 1 160 uncached prompt tokens and 150 output
/// tokens a request against 800 ms / 35 ms.
fn one_backend() -> f64 {
    let mix = Mix {
        uncached: 1.16,
        square: 1.16 * 1.16,
        output: 150.0,
    };
    let limits = Limits {
        ttft: 0.8 / capacity::TTFT_TAIL,
        tpot: 0.035,
    };
    capacity::sustained(&LatencyModel::new(MEMORY), mix, limits)
}

/// Offers `requests` of 1 160 uncached tokens and finishes as many of 150 output tokens.
fn serve(headroom: &Headroom, requests: u64) {
    for _ in 0..requests {
        headroom.offered(1_160);
        headroom.finished(150);
    }
}

/// Ticks at `t0`, then twice 10 s (the `window`) apart with `requests` offered and finished before
/// each: the mix is known at the second tick but not yet warm (nothing asked from it), and warm at
/// the third, whose reading is returned with its instant. The rate is `requests / 10` a second
/// throughout, so every average equals it.
fn loaded(
    headroom: &Headroom,
    backends: &[Arc<Backend>],
    t0: Instant,
    requests: u64,
) -> (Reading, Instant) {
    headroom.tick(backends, targets(), t0);
    serve(headroom, requests);
    let first = headroom.tick(backends, targets(), t0 + Duration::from_secs(10));
    assert_eq!(
        first.capacity, None,
        "not before a window of the mix: {first:?}"
    );
    serve(headroom, requests);
    let at = t0 + Duration::from_secs(20);
    (headroom.tick(backends, targets(), at), at)
}

#[test]
fn before_the_models_and_the_mix_are_known_the_count_holds_at_the_replicas_available() {
    let pool = pool(3);
    let headroom = Headroom::new(settings(), None);
    let t0 = Instant::now();
    let first = headroom.tick(&pool.backends(), targets(), t0);
    assert_eq!(first.capacity, None);
    assert_eq!(first.headroom, None);
    assert_eq!(first.desired, 3);
    assert_eq!(first.ready, 3);
    // A load, but no model learned yet: still nothing known, and no count asked from it.
    serve(&headroom, 100);
    let second = headroom.tick(&pool.backends(), targets(), t0 + Duration::from_secs(10));
    assert!((second.offered - 10.0).abs() < 1e-9, "{second:?}");
    assert_eq!(second.capacity, None);
    assert_eq!(second.desired, 3);
}

#[test]
fn the_capacity_is_each_learned_backends_and_the_count_keeps_the_headroom_target() {
    let pool = learned(3);
    let headroom = Headroom::new(settings(), None);
    // 20 requests a second.
    let (reading, _) = loaded(&headroom, &pool.backends(), Instant::now(), 200);
    let each = one_backend();
    let capacity = reading.capacity.expect("known");
    assert!(
        (capacity - 3.0 * each).abs() < 1e-6 * capacity,
        "{capacity} vs 3 x {each}"
    );
    let ratio = reading.headroom.expect("known");
    assert!((ratio - capacity / 20.0).abs() < 1e-9, "{reading:?}");
    // ⌈20 x 1.25 / each⌉ replicas, each sustaining 9.8 a second: 3.
    let desired = (20.0 * 1.25 / each).ceil() as u32;
    assert_eq!(desired, 3);
    assert_eq!(reading.desired, desired);
}

#[test]
fn a_backend_not_yet_learned_counts_as_the_learned_ones_mean() {
    let pool = pool(3);
    let backends = pool.backends();
    learn_priors(&backends[0], 50);
    learn_priors(&backends[1], 50);
    learn_priors(&backends[2], LEARNED - 1);
    let headroom = Headroom::new(settings(), None);
    let (reading, _) = loaded(&headroom, &backends, Instant::now(), 100);
    let capacity = reading.capacity.expect("known");
    assert!((capacity - 3.0 * one_backend()).abs() < 1e-6 * capacity);
}

#[test]
fn the_count_rises_at_once_and_falls_only_after_scale_down_after() {
    let pool = learned(2);
    let each = one_backend();
    let headroom = Headroom::new(settings(), None);
    // 40 requests a second: ⌈40 x 1.25 / 9.8⌉ = 6 replicas asked at once.
    let (busy, mut now) = loaded(&headroom, &pool.backends(), Instant::now(), 400);
    assert_eq!(busy.desired, (40.0 * 1.25 / each).ceil() as u32);
    assert_eq!(busy.desired, 6);
    // The load stops: the average decays, and the count holds for the 60 s of scale_down_after.
    let mut fell_at = None;
    for second in 1..=120 {
        now += Duration::from_secs(1);
        let reading = headroom.tick(&pool.backends(), targets(), now);
        if reading.desired < 6 && fell_at.is_none() {
            fell_at = Some(second);
            // Down to the highest count asked within the last 60 s, not at once to the least.
            assert!(reading.desired > 1, "{reading:?}");
        }
    }
    let fell_at = fell_at.expect("the count falls once the load has stayed low");
    assert!((60..=62).contains(&fell_at), "fell after {fell_at} s");
    // Two minutes idle: the offered average is near zero, the count at the minimum.
    let idle = headroom.tick(&pool.backends(), targets(), now + Duration::from_secs(61));
    assert_eq!(idle.desired, 1);
    assert_eq!(idle.headroom, Some(MOST_RATIO));
}

#[test]
fn with_every_backend_ejected_the_count_holds_where_it_was() {
    let pool = learned(2);
    // No stabilising window: what holds the count is the hold itself.
    let headroom = Headroom::new(
        AutoscaleConfig {
            scale_down_after: Duration::ZERO,
            ..settings()
        },
        None,
    );
    let (busy, mut now) = loaded(&headroom, &pool.backends(), Instant::now(), 400);
    assert_eq!(busy.desired, 6);
    for backend in pool.backends().iter() {
        let policy = EjectPolicy {
            after: 1,
            base: Duration::from_secs(30),
            max: Duration::from_secs(30),
        };
        backend.eject(now, &policy);
    }
    // Nothing is known now, and what is not known asks for no fewer.
    now += Duration::from_secs(1);
    let reading = headroom.tick(&pool.backends(), targets(), now);
    assert_eq!(reading.ready, 0);
    assert_eq!(reading.capacity, None);
    assert_eq!(reading.desired, 6);
}

#[test]
fn the_count_stays_within_its_bounds() {
    let pool = learned(2);
    let headroom = Headroom::new(
        AutoscaleConfig {
            min_replicas: 2,
            max_replicas: 4,
            ..settings()
        },
        None,
    );
    let (flood, _) = loaded(&headroom, &pool.backends(), Instant::now(), 4_000);
    assert_eq!(flood.desired, 4);
    assert!(flood.headroom.expect("known") < 0.1, "{flood:?}");
}

#[test]
fn the_moving_average_follows_a_step_with_its_time_constant() {
    let mut average = Average::default();
    let window = Duration::from_secs(10);
    assert_eq!(average.update(5.0, Duration::ZERO, window), 5.0);
    for _ in 0..100 {
        average.update(5.0, Duration::from_secs(1), window);
    }
    // A step to 15: after one time constant, 1 - 1/e of the way there.
    let mut value = 0.0;
    for _ in 0..10 {
        value = average.update(15.0, Duration::from_secs(1), window);
    }
    let expected = 15.0 - 10.0 * (-1.0_f64).exp();
    assert!((value - expected).abs() < 1e-9, "{value} vs {expected}");
}

#[test]
fn the_moving_average_starts_as_the_mean_of_what_it_has_seen() {
    // A first second unlike the rest (a document among chats) weighs a second's share, not all
    // of it: taken whole it would still weigh e^-1 of the average after a time constant.
    let mut average = Average::default();
    let window = Duration::from_secs(15);
    assert_eq!(average.update(30.0, Duration::from_secs(1), window), 30.0);
    let mut value = 30.0;
    for _ in 0..14 {
        value = average.update(10.0, Duration::from_secs(1), window);
    }
    let mean = (30.0 + 14.0 * 10.0) / 15.0;
    assert!((value - mean).abs() < 1e-9, "{value} vs {mean}");
    // Past a time constant it moves as the exponential average: a step covers 1 - 1/e of the
    // way in one more.
    for _ in 0..200 {
        average.update(10.0, Duration::from_secs(1), window);
    }
    for _ in 0..15 {
        value = average.update(20.0, Duration::from_secs(1), window);
    }
    let expected = 20.0 - 10.0 * (-1.0_f64).exp();
    assert!((value - expected).abs() < 1e-4, "{value} vs {expected}");
}

/// Offers and finishes `requests` as [`serve`] does, `met` of them within their targets.
fn serve_judged(headroom: &Headroom, requests: u64, met: u64) {
    serve(headroom, requests);
    for k in 0..requests {
        headroom.judged(k < met);
    }
}

/// Two learned backends at the priors, and a headroom ticked once to start.
fn calibrated_pool() -> (Members, Headroom, Instant) {
    let pool = learned(2);
    let headroom = Headroom::new(settings(), None);
    let now = Instant::now();
    headroom.tick(&pool.backends(), targets(), now);
    (pool, headroom, now)
}

#[test]
fn a_load_that_misses_the_objective_calibrates_the_capacity_down_to_what_was_sustained() {
    let (pool, headroom, mut now) = calibrated_pool();
    let modelled = 2.0 * one_backend();
    // 12 requests a second, 60 % of what the models say the two sustain, 80 % of them met
    // (the objective is 95 %): the pool sustains 0.6 x 0.8 / 0.95 = 51 % of the models' rate.
    let mut reading = None;
    for _ in 0..300 {
        serve_judged(&headroom, 12, 10);
        // 10 of 12 is 83 %: the calibration's target is 0.6 x 0.833 / 0.95.
        now += Duration::from_secs(1);
        reading = Some(headroom.tick(&pool.backends(), targets(), now));
    }
    let reading = reading.expect("ticked");
    let load = 12.0 / modelled;
    let expected = load * (10.0 / 12.0) / 0.95;
    assert!(
        (reading.calibration - expected).abs() < 0.01,
        "{reading:?}: expected {expected}"
    );
    let capacity = reading.capacity.expect("known");
    assert!(
        (capacity - expected * modelled).abs() < 0.02 * capacity,
        "{reading:?}"
    );
    // Below the load it missed at: the pool asks for more replicas than the models alone would.
    assert!(reading.headroom.expect("known") < 1.0, "{reading:?}");
    assert!(reading.desired > 2, "{reading:?}");
}

#[test]
fn a_load_met_above_the_calibration_raises_it_and_one_met_below_does_not() {
    let (pool, headroom, mut now) = calibrated_pool();
    let modelled = 2.0 * one_backend();
    // A breach first: 12 a second, half of them met, for three minutes.
    for _ in 0..180 {
        serve_judged(&headroom, 12, 6);
        now += Duration::from_secs(1);
        headroom.tick(&pool.backends(), targets(), now);
    }
    let low = headroom.tick(&pool.backends(), targets(), now).calibration;
    assert!(low < 0.4, "{low}");
    // Then 4 a second, all met, for five minutes: below the calibration's load, no evidence that
    // the pool sustains more than it was calibrated to.
    for _ in 0..300 {
        serve_judged(&headroom, 4, 4);
        now += Duration::from_secs(1);
        headroom.tick(&pool.backends(), targets(), now);
    }
    let held = headroom.tick(&pool.backends(), targets(), now).calibration;
    // (The first second of the fall still reads as a steady load in breach: a nudge of 1e-3.)
    assert!((held - low).abs() < 5e-3, "{held} against {low}");
    // Then 14 a second, all met: the pool sustains that, so the calibration rises to it.
    let mut raised = held;
    for _ in 0..180 {
        serve_judged(&headroom, 14, 14);
        now += Duration::from_secs(1);
        raised = headroom.tick(&pool.backends(), targets(), now).calibration;
    }
    let load = 14.0 / modelled;
    assert!(
        raised > held && raised <= load + 1e-9,
        "{raised}: load {load}"
    );
    assert!(raised > 0.95 * load, "{raised}: load {load}");
}

#[test]
fn without_evidence_the_models_speak_alone_and_a_shed_request_is_a_miss() {
    let (pool, headroom, mut now) = calibrated_pool();
    // Half a request a second, none met: 5 judgements in the 10 s window, under the 30 that
    // count (a minute's 30 do count, but only to raise the calibration, which misses do not).
    // (At 2.5 % of the models' capacity, misses would not count anyway: see the next test.)
    for k in 0..240u64 {
        if k % 2 == 0 {
            serve_judged(&headroom, 1, 0);
        }
        now += Duration::from_secs(1);
        headroom.tick(&pool.backends(), targets(), now);
    }
    let alone = headroom.tick(&pool.backends(), targets(), now);
    assert_eq!(alone.calibration, 1.0, "{alone:?}");
    // Twelve a second (61 % of the models' capacity), every one shed: evidence of misses at a
    // load, and the calibration falls (for four minutes: eight of its time constants).
    for _ in 0..240 {
        for _ in 0..12 {
            headroom.offered(1_160);
            headroom.shed();
        }
        now += Duration::from_secs(1);
        headroom.tick(&pool.backends(), targets(), now);
    }
    let shed = headroom.tick(&pool.backends(), targets(), now);
    // None met is read as half met (deep in an overload the share met says how long the queue
    // grew): 0.61 x 0.5 / 0.95 = 0.32, not the least bound.
    let floor = 12.0 / (2.0 * one_backend()) * 0.5 / 0.95;
    assert!((shed.calibration - floor).abs() < 0.02, "{shed:?}: {floor}");
}

#[test]
fn misses_at_a_light_load_or_within_the_objectives_noise_leave_the_calibration_alone() {
    let (pool, headroom, mut now) = calibrated_pool();
    // 4 a second (20 % of the models' capacity), three quarters met: the misses are not the
    // load's.
    for _ in 0..120 {
        serve_judged(&headroom, 4, 3);
        now += Duration::from_secs(1);
        headroom.tick(&pool.backends(), targets(), now);
    }
    let light = headroom.tick(&pool.backends(), targets(), now);
    assert_eq!(light.calibration, 1.0, "{light:?}");
    // 12 a second (61 %), 93 % met: 120 judgements a window, whose noise at 95 % is 4 points.
    for k in 0..200u64 {
        // 56 met of 60 every five seconds: 93.3 %.
        let met = if k % 5 >= 3 { 10 } else { 12 };
        serve_judged(&headroom, 12, met);
        now += Duration::from_secs(1);
        headroom.tick(&pool.backends(), targets(), now);
    }
    let noisy = headroom.tick(&pool.backends(), targets(), now);
    assert_eq!(noisy.calibration, 1.0, "{noisy:?}");
}

#[test]
fn a_backend_counts_as_learned_when_the_placement_stops_exploring_it() {
    assert_eq!(LEARNED, crate::route::placement::EXPLORE);
}

/// Ticks `headroom` each second from `start` to `end` (exclusive) after `t0`, `rate(second)`
/// requests offered and finished before each; returns each tick's reading.
fn paced(
    headroom: &Headroom,
    backends: &[Arc<Backend>],
    t0: Instant,
    seconds: std::ops::Range<u64>,
    rate: impl Fn(u64) -> u64,
) -> Vec<Reading> {
    seconds
        .map(|second| {
            serve(headroom, rate(second));
            headroom.tick(backends, targets(), t0 + Duration::from_secs(second))
        })
        .collect()
}

#[test]
fn a_rising_load_is_asked_for_one_cold_start_ahead_and_a_flat_one_as_it_is() {
    let pool = learned(2);
    let cold_start = Duration::from_secs(30);
    let ahead = Headroom::new(
        AutoscaleConfig {
            cold_start,
            ..settings()
        },
        None,
    );
    let now = Headroom::new(settings(), None);
    let backends = pool.backends();
    let t0 = Instant::now();
    // Idle for 5 s, 6 a second until two minutes, then up by one every 4 s (0.25 a second per
    // second).
    let rate = |second: u64| {
        if second < 5 {
            0
        } else {
            6 + second.saturating_sub(120) / 4
        }
    };
    ahead.tick(&backends, targets(), t0);
    now.tick(&backends, targets(), t0);
    let flat = paced(&ahead, &backends, t0, 1..120, rate);
    let flat_now = paced(&now, &backends, t0, 1..120, rate);
    // Flat: the forecast is the load offered, and both ask the same, from the first second (the
    // pool's own start, a step from nothing, is no rise: the trend is fitted once it is warm).
    for (a, b) in flat.iter().zip(&flat_now) {
        assert_eq!(a.forecast, a.offered, "{a:?}");
        assert_eq!(a.desired, b.desired);
    }
    let ramp = paced(&ahead, &backends, t0, 120..240, rate);
    let ramp_now = paced(&now, &backends, t0, 120..240, rate);
    // The rise is seen within 30 s of the ramp's start.
    let seen = ramp
        .iter()
        .position(|r| r.forecast > r.offered)
        .expect("the rise is seen");
    assert!(seen <= 30, "seen {seen} s into the ramp");
    // A minute in (the average's lag behind the ramp undone), the forecast is the rate a cold
    // start later, within 10 %.
    let at = 60;
    let later = rate(120 + at as u64 + cold_start.as_secs()) as f64;
    let forecast = ramp[at].forecast;
    assert!(
        (forecast - later).abs() < 0.1 * later,
        "forecast {forecast} vs {later} a cold start later: {:?}",
        ramp[at]
    );
    // The count rises sooner: the first count above the flat load's at least 10 s earlier than
    // without the forecast (while the fit still holds some of the flat minute: 26 s against
    // 40 s), the next ones at least 25 s earlier (30 and 29 s: about a cold start).
    let first = |readings: &[Reading], count: u32| readings.iter().position(|r| r.desired >= count);
    let top = ramp_now.last().expect("ticks").desired;
    assert!(top >= 4, "{:?}", ramp_now.last());
    for count in 3..=top {
        let (sooner, later) = (first(&ramp, count), first(&ramp_now, count));
        let (Some(sooner), Some(later)) = (sooner, later) else {
            panic!("{count} replicas asked: {sooner:?} with the forecast, {later:?} without");
        };
        let by = if count == 3 { 10 } else { 25 };
        assert!(
            sooner + by <= later,
            "{count} replicas: {sooner} s vs {later} s"
        );
    }
}

#[test]
fn a_load_at_the_edge_between_two_counts_does_not_move_it_down() {
    let pool = learned(2);
    let each = one_backend();
    let headroom = Headroom::new(
        AutoscaleConfig {
            tolerance: 0.1,
            ..settings()
        },
        None,
    );
    let backends = pool.backends();
    let t0 = Instant::now();
    let count = |load: f64, margin: f64| (load * margin / each).ceil() as u32;
    // 20 a second: 3 replicas.
    let high: u32 = 20;
    assert_eq!(count(f64::from(high), 1.25), 3);
    // 15 a second: 2 replicas at 1.25x, but 3 at 1.375x; 13 a second: 2 at either.
    let (edge, low): (u32, u32) = (15, 13);
    assert_eq!(count(f64::from(edge), 1.25), 2);
    assert_eq!(count(f64::from(edge), 1.375), 3);
    assert_eq!(count(f64::from(low), 1.375), 2);
    headroom.tick(&backends, targets(), t0);
    let busy = paced(&headroom, &backends, t0, 1..60, |_| u64::from(high));
    assert_eq!(busy.last().map(|r| r.desired), Some(3));
    // At the edge for three minutes (three times scale_down_after): the count holds.
    let at_edge = paced(&headroom, &backends, t0, 60..240, |_| u64::from(edge));
    assert!(
        at_edge.iter().all(|r| r.desired == 3),
        "{:?}",
        at_edge.last()
    );
    // Lower: it falls, once scale_down_after has passed.
    let lower = paced(&headroom, &backends, t0, 240..400, |_| u64::from(low));
    let fell = lower
        .iter()
        .position(|r| r.desired == 2)
        .expect("the count falls at a load clear of the edge");
    assert!(
        (60..=90).contains(&fell),
        "fell {fell} s after the load did"
    );
    assert!(lower[fell..].iter().all(|r| r.desired == 2));
}

#[test]
fn a_replica_that_joins_adds_its_capacity_at_once_and_asks_for_no_more() {
    let pool = learned(4);
    let each = one_backend();
    let headroom = Headroom::new(settings(), None);
    let all = pool.backends();
    let (two, four) = (&all[..2], &all[..]);
    let t0 = Instant::now();
    // 15 a second on two replicas: two asked (⌈15 x 1.25 / 9.8⌉), as an autoscaler would run.
    headroom.tick(two, targets(), t0);
    let before = paced(&headroom, two, t0, 1..60, |_| 15);
    let settled = before.last().expect("ticks");
    assert_eq!(settled.desired, 2, "{settled:?}");
    // Two more join (a reload, or DNS): the capacity doubles at the next tick, and the count
    // asked stays.
    let after = paced(&headroom, four, t0, 60..120, |_| 15);
    let joined = after[0];
    let capacity = joined.capacity.expect("known");
    assert!(
        (capacity - 4.0 * each).abs() < 1e-6 * capacity,
        "{joined:?}"
    );
    assert!(
        after.iter().all(|r| r.desired == 2),
        "{:?}",
        after.iter().map(|r| r.desired).collect::<Vec<_>>()
    );
}

#[test]
fn the_misses_of_a_shortage_are_judged_against_the_pool_that_had_it() {
    let pool = pool(2);
    for backend in pool.backends().iter() {
        learn_priors(backend, 50);
    }
    let headroom = Headroom::new(settings(), None);
    let all = pool.backends();
    let (one, two) = (&all[..1], &all[..]);
    let t0 = Instant::now();
    headroom.tick(one, targets(), t0);
    // 14 a second on one replica (1.4x what it sustains), 80 % met: short, and at that load the
    // misses say nothing against the models (1.4 x 0.8 / 0.95 is above 1).
    let tick = |backends: &[Arc<Backend>], second: u64| {
        serve_judged(&headroom, 14, 11);
        headroom.tick(backends, targets(), t0 + Duration::from_secs(second))
    };
    for second in 1..60 {
        assert_eq!(tick(one, second).calibration, 1.0, "second {second}");
    }
    // A second replica joins; the requests that finish over the next window queued on one, and
    // still miss: judged against the one replica they were placed on, not the two.
    for second in 60..70 {
        assert_eq!(tick(two, second).calibration, 1.0, "second {second}");
    }
    // Misses at that load a window after the join are the two replicas' own (0.7x what the
    // models say they sustain): the calibration falls.
    let mut calibration = 1.0;
    for second in 70..100 {
        calibration = tick(two, second).calibration;
    }
    assert!(calibration < 0.9, "{calibration}");
}

#[test]
fn a_minute_met_raises_the_calibration_only_once_watched_whole_and_against_the_models_most() {
    let (pool, headroom, mut now) = calibrated_pool();
    let modelled = 2.0 * one_backend();
    let all = pool.backends();
    // 1.2x what the models say the two sustain, every request met: the pool sustains more than
    // its models. But not before the calibration has watched a whole minute: a pool's first
    // seconds read a minute's averages from a few ticks.
    let rate = (1.2 * modelled).round() as u64;
    for second in 1..60 {
        serve_judged(&headroom, rate, rate);
        now += Duration::from_secs(1);
        let reading = headroom.tick(&all, targets(), now);
        assert_eq!(reading.calibration, 1.0, "second {second}: {reading:?}");
    }
    let mut raised = 1.0;
    for _ in 0..60 {
        serve_judged(&headroom, rate, rate);
        now += Duration::from_secs(1);
        raised = headroom.tick(&all, targets(), now).calibration;
    }
    let load = rate as f64 / modelled;
    assert!((raised - load).abs() < 0.02, "{raised}: load {load}");
    // A replica out for a tick halves what the models say for it; the minute met is read
    // against the most they said over it, so the calibration does not take the dip for a
    // pool that sustained twice its models.
    serve_judged(&headroom, rate, rate);
    now += Duration::from_secs(1);
    let dipped = headroom.tick(&all[..1], targets(), now);
    assert_eq!(dipped.ready, 1);
    assert!(
        (dipped.calibration - raised).abs() < 1e-9,
        "{dipped:?}: {raised}"
    );
}
