//! The designation: its steps on replicas described by hand, its refresh on a pool of taught
//! backends, and what a placement does with the roles it sets.
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::config::{Config, SloTargets};
use crate::route::backend::LoadGuard;
use crate::route::health::EjectPolicy;
use crate::route::placement::tests::taught;
use crate::route::placement::{choose, Demand as Ask, PoolSlo};

/// Replicas of `(prefill rate, streams)`, none designated.
fn replicas(of: &[(f64, u64)]) -> Vec<Replica> {
    of.iter()
        .map(|&(rate, streams)| Replica {
            rate,
            streams,
            prefilling: false,
            heavy: false,
            expected_stall: Duration::ZERO,
        })
        .collect()
}

/// A measured demand of `tokens` uncached tokens in `prompts` long prompts per second, the last
/// long prompt seen at `now`.
fn demand(tokens: f64, prompts: f64, now: Instant) -> Demand {
    Demand {
        tokens,
        prompts,
        last_long: Some(now),
        ..Demand::default()
    }
}

fn heavy(replicas: &[Replica]) -> Vec<bool> {
    replicas.iter().map(|r| r.heavy).collect()
}

#[test]
fn the_first_long_prompt_designates_the_fastest_replica_with_the_fewest_streams() {
    let now = Instant::now();
    let mut fleet = replicas(&[(10_000.0, 0), (20_000.0, 5), (20_500.0, 1), (20_000.0, 0)]);
    demand(1_000.0, 0.2, now).step(&mut fleet, now);
    assert_eq!(
        heavy(&fleet),
        [false, false, false, true],
        "20 000 is as fast as 20 500 (within 10 %), and it has no stream to stall"
    );
}

#[test]
fn demand_past_the_designated_rate_designates_the_slowest_replica_that_covers_it() {
    let now = Instant::now();
    let fleet = || replicas(&[(10_000.0, 0), (20_000.0, 5), (20_500.0, 1), (20_000.0, 0)]);
    let designated = |tokens: f64| {
        let mut fleet = fleet();
        demand(tokens, tokens / 8_000.0, now).step(&mut fleet, now);
        heavy(&fleet)
    };
    assert_eq!(designated(20_000.0), [false, false, false, true], "covered");
    assert_eq!(
        designated(25_000.0),
        [true, false, false, true],
        "5 000 short: the slow replica covers it"
    );
    assert_eq!(
        designated(45_000.0),
        [true, true, false, true],
        "25 000 short: no one covers it, the slowest; then 15 000 short, the slowest that covers it"
    );
    assert_eq!(
        designated(130_000.0),
        [true, true, false, true],
        "all but one: the slowest first, the fastest left to the chats"
    );
}

#[test]
fn another_replica_is_designated_only_where_the_chats_can_spare_it() {
    let now = Instant::now();
    // Two fast replicas and two at half speed; 25 600 document tokens a second (3.2 documents).
    let designated = |chat_tokens: f64| {
        let mut fleet = replicas(&[(20_000.0, 9), (20_000.0, 9), (10_000.0, 4), (10_000.0, 4)]);
        let mut measured = demand(25_600.0, 3.2, now);
        measured.chat_tokens = chat_tokens;
        measured.step(&mut fleet, now);
        heavy(&fleet)
    };
    assert_eq!(
        designated(6_000.0),
        [true, false, true, false],
        "5 600 short: a slow replica covers it, and 6 000 chat tokens take 20 % of the 30 000 left"
    );
    assert_eq!(
        designated(15_000.0),
        [true, false, true, false],
        "15 000 chat tokens: 50 % of the 30 000 left, as much as they may take"
    );
    assert_eq!(
        designated(15_001.0),
        [true, false, false, false],
        "any more, and no replica is taken from the chats: the documents the designated one cannot \
         take in time are shed"
    );
    assert_eq!(
        designated(0.0),
        [true, false, true, false],
        "a burst with the chats quiet"
    );
    let mut fleet = replicas(&[(20_000.0, 9), (20_000.0, 9), (10_000.0, 4), (10_000.0, 4)]);
    let mut measured = demand(45_000.0, 5.6, now);
    measured.chat_tokens = 9_000.0;
    measured.step(&mut fleet, now);
    assert_eq!(
        heavy(&fleet),
        [true, false, true, true],
        "25 000 short: no replica covers it, so the slowest, twice; the fast one left keeps the \
         chats within 45 %"
    );
}

#[test]
fn chats_that_miss_their_targets_keep_their_replicas_and_take_one_back() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let fleet = || replicas(&[(20_000.0, 9), (20_000.0, 9), (10_000.0, 4), (10_000.0, 4)]);
    // 25 600 document tokens a second, and 28.8 chats of 6 000 tokens a second in all: their
    // prompts fit any replicas left to them; whether they are served in time is what decides.
    let measured = |misses: f64| Demand {
        chat_tokens: 6_000.0,
        chats: 28.8,
        chat_misses: misses,
        ..demand(25_600.0, 3.2, start)
    };
    let designated = |misses: f64| {
        let mut fleet = fleet();
        measured(misses).step(&mut fleet, start);
        heavy(&fleet)
    };
    assert_eq!(designated(1.44), [true, false, true, false], "5 % waited");
    assert_eq!(
        designated(1.45),
        [true, false, false, false],
        "more than 5 % waited: no replica is taken from the chats"
    );
    let mut fleet = fleet();
    let mut measured = measured(0.0);
    measured.step(&mut fleet, start);
    assert_eq!(heavy(&fleet), [true, false, true, false]);
    measured.chat_misses = 2.9;
    measured.step(&mut fleet, at(1_000));
    measured.step(&mut fleet, at(1_000 + 4_999));
    assert_eq!(heavy(&fleet), [true, false, true, false], "held");
    measured.step(&mut fleet, at(1_000 + 5_000));
    assert_eq!(
        heavy(&fleet),
        [true, false, false, false],
        "10 % of the chats waited for 5 s: the slow one goes back to them"
    );
}

#[test]
fn crowded_chats_take_a_designated_replica_back_after_holding() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut fleet = replicas(&[(20_000.0, 9), (20_000.0, 9), (10_000.0, 4), (10_000.0, 4)]);
    let mut measured = demand(25_600.0, 3.2, start);
    measured.chat_tokens = 6_000.0;
    measured.step(&mut fleet, start);
    assert_eq!(heavy(&fleet), [true, false, true, false]);
    // The chats grow to 20 000 tokens a second: 67 % of the 30 000 they have, within the 83 %
    // (CHAT_SHARE / LOW) that takes a replica back.
    measured.chat_tokens = 20_000.0;
    measured.step(&mut fleet, at(1_000));
    measured.step(&mut fleet, at(7_000));
    assert_eq!(
        heavy(&fleet),
        [true, false, true, false],
        "crowded, not over"
    );
    measured.chat_tokens = 26_000.0;
    measured.step(&mut fleet, at(8_000));
    measured.step(&mut fleet, at(8_000 + 4_999));
    assert_eq!(heavy(&fleet), [true, false, true, false], "held");
    measured.step(&mut fleet, at(8_000 + 5_000));
    assert_eq!(
        heavy(&fleet),
        [true, false, false, false],
        "83 % past for 5 s: the slow one goes back to the chats"
    );
}

#[test]
fn a_replica_half_as_fast_gives_its_role_to_a_faster_one() {
    let now = Instant::now();
    // Designated by the priors (all alike), then 9000 learned it prefills at half the rate.
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 4), (20_000.0, 9)]);
    let mut measured = demand(5_000.0, 0.6, now);
    measured.step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false, false]);
    fleet[0].rate = 14_000.0;
    measured.step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false, false], "1.43x is noise");
    fleet[0].rate = 10_000.0;
    measured.step(&mut fleet, now);
    assert_eq!(
        heavy(&fleet),
        [false, true, false],
        "twice as fast: the one with fewer streams of the two"
    );
}

#[test]
fn two_slow_replicas_designated_give_the_slower_role_to_a_fast_one() {
    let now = Instant::now();
    // The priors designated 0 and 1 (all alike); then both learned to be half-speed.
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 1), (20_000.0, 9), (20_000.0, 4)]);
    let mut measured = demand(21_000.0, 2.6, now);
    measured.step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, true, false, false]);
    // Still enough for the demand together: nothing added, and the fast ones are 1.67x and
    // 2x as fast.
    fleet[0].rate = 10_000.0;
    fleet[1].rate = 12_000.0;
    measured.step(&mut fleet, now);
    assert_eq!(
        heavy(&fleet),
        [false, true, false, true],
        "the slower designated goes, the fast one with fewer streams comes"
    );
    measured.step(&mut fleet, now);
    assert_eq!(
        heavy(&fleet),
        [false, true, false, true],
        "a fast one and a half-speed one: the split as it should be, kept"
    );
}

#[test]
fn a_fast_replica_designated_second_gives_its_role_to_a_slow_one_that_covers_the_demand() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    // By the priors (all alike) the first and the second designated are the two fast replicas.
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 1), (20_000.0, 9), (20_000.0, 8)]);
    let mut measured = demand(21_000.0, 2.6, start);
    measured.step(&mut fleet, start);
    assert_eq!(heavy(&fleet), [true, true, false, false]);
    // Learned: 2 and 3 prefill at half the rate. A fast one and a slow one still cover 21 000.
    fleet[2].rate = 10_000.0;
    fleet[3].rate = 10_000.0;
    measured.step(&mut fleet, at(250));
    assert_eq!(
        heavy(&fleet).iter().filter(|&&h| h).count(),
        2,
        "one for one: {fleet:?}"
    );
    assert!(
        (fleet[0].heavy || fleet[1].heavy) && fleet[3].heavy && !fleet[2].heavy,
        "a fast one stays, the slow one with fewer streams comes: {fleet:?}"
    );
    let traded = heavy(&fleet);
    measured.step(&mut fleet, at(500));
    assert_eq!(heavy(&fleet), traded, "kept");

    // Where the slow one would not cover the demand, the fast ones stay.
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 1), (20_000.0, 9), (20_000.0, 8)]);
    let mut measured = demand(35_000.0, 4.4, start);
    measured.step(&mut fleet, start);
    assert_eq!(heavy(&fleet), [true, true, false, false]);
    fleet[2].rate = 10_000.0;
    fleet[3].rate = 10_000.0;
    measured.step(&mut fleet, at(250));
    assert_eq!(heavy(&fleet), [true, true, false, false], "30 000 < 35 000");
}

#[test]
fn roles_are_traded_at_most_once_per_hold() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 4), (20_000.0, 9)]);
    let mut measured = demand(5_000.0, 0.6, start);
    measured.step(&mut fleet, start);
    assert_eq!(heavy(&fleet), [true, false, false]);
    // The designated one reads half as fast (its documents queued): traded.
    fleet[0].rate = 10_000.0;
    measured.step(&mut fleet, at(250));
    assert_eq!(heavy(&fleet), [false, true, false]);
    // Now the new one reads slower than the first's priors-like rate: not yet traded back.
    fleet[0].rate = 20_000.0;
    fleet[1].rate = 12_000.0;
    measured.step(&mut fleet, at(250 + 4_999));
    assert_eq!(heavy(&fleet), [false, true, false], "resting");
    measured.step(&mut fleet, at(250 + 5_000));
    assert_eq!(heavy(&fleet), [true, false, false], "after HOLD");
}

#[test]
fn a_lull_lets_a_replica_go_only_after_holding() {
    let start = Instant::now();
    let mut fleet = replicas(&[(20_000.0, 3), (20_000.0, 0), (20_000.0, 7)]);
    let mut measured = demand(26_000.0, 3.2, start);
    measured.step(&mut fleet, start);
    assert_eq!(heavy(&fleet), [true, true, false]);
    // 11 000 tokens/s: below 60 % of the one that would stay (12 000), but not yet for HOLD.
    measured.tokens = 11_000.0;
    let at = |ms: u64| start + Duration::from_millis(ms);
    measured.step(&mut fleet, at(1_000));
    measured.step(&mut fleet, at(1_000 + 4_999));
    assert_eq!(heavy(&fleet), [true, true, false], "held");
    // Back above the mark for a moment: the hold starts again.
    measured.tokens = 12_500.0;
    measured.step(&mut fleet, at(6_000));
    measured.tokens = 11_000.0;
    measured.step(&mut fleet, at(6_250));
    measured.step(&mut fleet, at(6_250 + 4_999));
    assert_eq!(heavy(&fleet), [true, true, false], "held again");
    measured.step(&mut fleet, at(6_250 + 5_000));
    assert_eq!(
        heavy(&fleet),
        [false, true, false],
        "let go after 5 s: the one with more streams of two as fast (it already serves chats)"
    );
    // One is kept however low the demand, while long prompts come.
    measured.tokens = 10.0;
    measured.step(&mut fleet, at(30_000));
    assert_eq!(heavy(&fleet), [false, true, false]);
}

#[test]
fn no_long_prompt_for_a_while_or_one_replica_designates_none() {
    let now = Instant::now();
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 0)]);
    let mut measured = demand(13_000.0, 1.6, now);
    measured.step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false]);
    measured.step(&mut fleet, now + FORGET);
    assert_eq!(heavy(&fleet), [true, false], "30 s is not yet past");
    measured.step(&mut fleet, now + FORGET + Duration::from_millis(1));
    assert_eq!(heavy(&fleet), [false, false], "forgotten");
    assert!(fleet.iter().all(|r| r.expected_stall.is_zero()));
    let mut alone = replicas(&[(20_000.0, 0)]);
    demand(130_000.0, 16.0, now).step(&mut alone, now);
    assert_eq!(
        heavy(&alone),
        [false],
        "one replica takes everything anyway"
    );
}

#[test]
fn a_designated_replica_expects_a_stall_only_where_long_prompts_come_often() {
    let now = Instant::now();
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 0), (10_000.0, 0), (10_000.0, 0)]);
    // 3.75 documents of 8 000 tokens a second over two designated replicas: 3.75 each within a
    // stream's life of 2 s.
    demand(30_000.0, 3.75, now).step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false, true, false]);
    let stalls: Vec<Duration> = fleet.iter().map(|r| r.expected_stall).collect();
    assert_eq!(
        stalls,
        [
            Duration::from_millis(400),
            Duration::ZERO,
            Duration::from_millis(800),
            Duration::ZERO
        ],
        "8 000 tokens at 20 000 and 10 000 a second"
    );
    // One document every 40 s: 0.05 within a stream's life, so a chat may start there.
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 0)]);
    demand(200.0, 0.025, now).step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false]);
    assert!(fleet.iter().all(|r| r.expected_stall.is_zero()));
}

#[test]
fn the_first_designation_takes_the_replica_already_prefilling_between_equals() {
    let now = Instant::now();
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 2), (19_000.0, 3)]);
    demand(8_000.0, 1.0, now).step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false, false], "the fewest streams");
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 2), (19_000.0, 3)]);
    fleet[2].prefilling = true;
    demand(8_000.0, 1.0, now).step(&mut fleet, now);
    assert_eq!(
        heavy(&fleet),
        [false, false, true],
        "its chats meet the stall anyway"
    );
    let mut fleet = replicas(&[(40_000.0, 0), (20_000.0, 3)]);
    fleet[1].prefilling = true;
    demand(8_000.0, 1.0, now).step(&mut fleet, now);
    assert_eq!(heavy(&fleet), [true, false], "not one twice as slow");
}

#[test]
fn the_slow_rate_is_the_rate_so_far_until_its_window_has_passed() {
    let start = Instant::now();
    let mut measured = Demand::default();
    measured.measure(start, 0, 0, Chats::default());
    // Two documents in the next 10 s, at 4 s and 8 s.
    let mut at = start;
    for look in 1..=40 {
        at += REFRESH;
        let document = look % 16 == 0;
        measured.measure(
            at,
            if document { 8_000 } else { 0 },
            u64::from(document),
            Chats::default(),
        );
    }
    let sparse = measured.sparse_prompts();
    assert!(sparse > 0.15 && sparse < 0.25, "about 2 in 10 s: {sparse}");
}

#[test]
fn documents_seconds_apart_keep_their_stall_expected_between_them() {
    // A document of 8 000 tokens every 8 s for two minutes, looked at every 250 ms.
    let start = Instant::now();
    let mut measured = Demand::default();
    let mut fleet = replicas(&[(20_000.0, 0), (20_000.0, 0)]);
    let mut at = start;
    for look in 1..=479 {
        at += REFRESH;
        let document = look % 32 == 0;
        measured.measure(
            at,
            if document { 8_000 } else { 0 },
            u64::from(document),
            Chats::default(),
        );
        measured.step(&mut fleet, at);
    }
    // The last look came 7.75 s after the last document: the 2 s rate has all but forgotten it,
    assert!(
        measured.prompts * STREAM_LIFE.as_secs_f64() < LIKELY,
        "{}",
        measured.prompts
    );
    // the slow one has not (one per 8 s, a quarter of its window's decay since the last).
    let sparse = measured.sparse_prompts();
    assert!(sparse > 0.1 && sparse < 0.15, "{sparse}");
    assert_eq!(heavy(&fleet), [true, false]);
    assert_eq!(
        fleet[0].expected_stall,
        Duration::from_millis(400),
        "8 000 tokens at 20 000 a second, still expected"
    );
    assert_eq!(fleet[1].expected_stall, Duration::ZERO);
}

#[test]
fn the_demand_is_a_moving_rate_of_the_long_prompts() {
    let start = Instant::now();
    let mut measured = Demand::default();
    measured.measure(start, 0, 0, Chats::default());
    assert_eq!(measured.last_long, None);
    // 1 000 tokens in one prompt every 250 ms, for 20 s: 4 000 tokens and 4 prompts a second.
    let mut at = start;
    for _ in 0..80 {
        at += REFRESH;
        measured.measure(at, 1_000, 1, Chats::default());
    }
    assert!(
        (measured.tokens - 4_000.0).abs() < 4_000.0 * 0.01,
        "{}",
        measured.tokens
    );
    assert!(
        (measured.prompts - 4.0).abs() < 0.04,
        "{}",
        measured.prompts
    );
    assert_eq!(measured.last_long, Some(at));
    // Then 10 s of none: five windows, e⁻⁵ of it is left.
    for _ in 0..40 {
        at += REFRESH;
        measured.measure(at, 0, 0, Chats::default());
    }
    let left = 4_000.0 * (-5.0f64).exp();
    assert!((measured.tokens - left).abs() < 1.0, "{}", measured.tokens);
}

#[tokio::test(start_paused = true)]
async fn a_refresh_designates_from_the_placed_prompts_and_replaces_a_failed_replica() {
    // Two replicas taught to prefill 20 000 tokens/s, one 10 000.
    let pool = taught(&[(20_000.0, 0.02), (20_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    let designation = Designation::new();
    let now = Instant::now();
    // Six documents of 8 000 tokens over the first look's window of 2 s: 24 000 tokens/s.
    for _ in 0..6 {
        designation.long_prompt(8_000);
    }
    designation.refresh(&pool, now, None);
    let roles = || -> Vec<bool> { backends.iter().map(|b| b.role().prefill_heavy()).collect() };
    assert_eq!(
        roles(),
        [true, false, true],
        "a fast replica, and the slow one covers the 4 000 left"
    );
    assert_eq!(designation.demand().tokens, 24_000.0);
    // Not due again before REFRESH: nothing changes even though a replica failed.
    let policy = EjectPolicy {
        after: 1,
        base: Duration::from_secs(30),
        max: Duration::from_secs(30),
    };
    backends[0].eject(now, &policy);
    designation.refresh(&pool, now + REFRESH - Duration::from_millis(1), None);
    assert_eq!(roles(), [true, false, true]);
    designation.refresh(&pool, now + REFRESH, None);
    assert_eq!(
        roles(),
        [false, true, false],
        "the failed one lost its role; of the two left one stays for the chats, and the faster \
         takes the documents"
    );
}

#[tokio::test(start_paused = true)]
async fn in_a_fleet_it_measures_the_others_prompts_too_and_follows_the_leaders_choice() {
    let pool = taught(&[(20_000.0, 0.02), (20_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    let designation = Designation::new();
    let now = Instant::now();
    designation.long_prompt(8_000);
    designation.others_offered(Counts {
        tokens: 40_000,
        prompts: 5,
        ..Counts::default()
    });
    assert_eq!(
        designation.own_counts().tokens,
        8_000,
        "it publishes what it offered, not the others'"
    );
    let leader = backends[1].target.label.to_string();
    designation.follow(Some(vec![leader]));
    designation.refresh(&pool, now, None);
    assert_eq!(
        designation.demand().tokens,
        24_000.0,
        "the fleet's 48 000 tokens over the first look's 2 s"
    );
    let roles = || -> Vec<bool> { backends.iter().map(|b| b.role().prefill_heavy()).collect() };
    assert_eq!(
        roles(),
        [false, true, false],
        "the leader's one replica, though this demand alone would designate two"
    );
    let stall = backends[1].role().expected_stall().as_secs_f64();
    assert!(
        (stall - 0.4).abs() < 0.001,
        "the mean document (8 000 tokens) at 20 000 tokens/s: {stall}"
    );
    designation.follow(None);
    designation.refresh(&pool, now + REFRESH, None);
    assert_eq!(
        roles(),
        [false, true, true],
        "leading, it designates from the demand, keeping the replica it followed and adding the \
         slow one for the 1 200 tokens/s it lacks"
    );
}

/// The pool's targets: 800 ms and 35 ms, so a prefill past 140 ms stalls.
fn targets() -> PoolSlo {
    let mut config = Config::default();
    config.slo.ttft = Duration::from_millis(800);
    config.slo.tpot = Duration::from_millis(35);
    PoolSlo::new(0, "p", &config, false, None)
}

fn ask(prompt_tokens: u64) -> Ask {
    Ask {
        prompt_tokens,
        waited: Duration::ZERO,
        targets: None,
    }
}

/// Where a request of `prompt_tokens` goes.
fn placed_on(pool: &Members, prompt_tokens: u64, rng: &mut StdRng) -> String {
    let placed = choose(
        pool,
        &targets(),
        ask(prompt_tokens),
        Instant::now(),
        &[],
        |_| 0,
        rng,
    )
    .expect("placed");
    placed.backend.target.label.to_string()
}

/// `n` streams with `queued` prompt tokens among them on `backend`.
fn streams(backend: &Arc<Backend>, n: usize, queued: u64) -> Vec<LoadGuard> {
    (0..n)
        .map(|k| LoadGuard::new(Arc::clone(backend), if k == 0 { queued } else { 0 }))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_long_prompt_goes_to_a_prefill_heavy_replica_or_one_with_no_stream_to_stall() {
    let pool = taught(&[(10_000.0, 0.02), (10_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    let mut rng = StdRng::seed_from_u64(11);
    // 9000: one chat. 9001: two. 9002, designated: three and 1 000 tokens queued, so the least
    // headroom, yet a 6 000-token document (0.6 s alone, a stall past 140 ms) meets there too.
    let _a = streams(&backends[0], 1, 0);
    let _b = streams(&backends[1], 2, 0);
    let _c = streams(&backends[2], 3, 1_000);
    assert_eq!(
        placed_on(&pool, 6_000, &mut rng),
        "127.0.0.1:9000",
        "undesignated, the fewest streams to stall"
    );
    backends[2].designate(true, Duration::ZERO);
    for _ in 0..10 {
        assert_eq!(placed_on(&pool, 6_000, &mut rng), "127.0.0.1:9002");
    }
    // A chat is not held to it: most headroom.
    assert_eq!(placed_on(&pool, 500, &mut rng), "127.0.0.1:9000");
    // A replica with nothing to stall is let take a document only when no designated one meets
    // its targets: it would repel the chats for a while after.
    drop(_b);
    assert_eq!(placed_on(&pool, 6_000, &mut rng), "127.0.0.1:9002");
    let _full = streams(&backends[2], 1, 6_000);
    for _ in 0..10 {
        assert_eq!(
            placed_on(&pool, 6_000, &mut rng),
            "127.0.0.1:9001",
            "7 000 tokens queued on 9002: 1.3 s, past max(0.8 s, 1.5 x 0.62 s)"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_chat_starts_where_no_stall_is_expected_while_another_meets_its_targets() {
    let pool = taught(&[(10_000.0, 0.02), (10_000.0, 0.02)]);
    let backends = pool.backends();
    let mut rng = StdRng::seed_from_u64(12);
    // 9001 has 3 000 tokens queued (0.37 s for a chat, 0.07 s on the idle 9000): it still meets.
    let _queued = streams(&backends[1], 1, 3_000);
    backends[0].designate(true, Duration::ZERO);
    assert_eq!(
        placed_on(&pool, 500, &mut rng),
        "127.0.0.1:9000",
        "designated, but no long prompt expected within a chat's life: most headroom"
    );
    backends[0].designate(true, Duration::from_millis(400));
    for _ in 0..10 {
        assert_eq!(placed_on(&pool, 500, &mut rng), "127.0.0.1:9001");
    }
    // Where 9001 misses (9 000 tokens queued: 0.97 s), the replica that meets takes it, and the
    // stall it expects is in the gap predicted.
    let _more = streams(&backends[1], 1, 6_000);
    let placed = choose(
        &pool,
        &targets(),
        ask(500),
        Instant::now(),
        &[],
        |_| 0,
        &mut rng,
    )
    .expect("placed");
    assert_eq!(&*placed.backend.target.label, "127.0.0.1:9000");
    assert!(placed.met);
    assert_eq!(
        placed.prediction.gap,
        placed.prediction.tpot + Duration::from_millis(400)
    );
}

#[test]
fn a_prefill_stalls_past_three_quarters_of_the_gap_limit() {
    let targets = SloTargets {
        ttft: Duration::from_millis(800),
        tpot: Duration::from_millis(35),
        max_gap: Some(Duration::from_millis(250)),
    };
    assert_eq!(
        super::super::stall_limit(targets),
        Duration::from_micros(187_500)
    );
    let stalls = |ms| super::super::stalls(Duration::from_millis(ms), targets);
    assert!(
        stalls(240),
        "predicted under the 250 ms target, as the fleet's 6 700-token documents were"
    );
    assert!(stalls(188));
    assert!(
        !stalls(187),
        "a chat's prompt, or a short document on a fast replica"
    );
}

#[test]
fn the_gap_limit_is_the_gap_target_else_four_tpot_targets() {
    let targets = SloTargets {
        ttft: Duration::from_millis(800),
        tpot: Duration::from_millis(35),
        max_gap: None,
    };
    assert_eq!(super::super::gap_limit(targets), Duration::from_millis(140));
    let with_gap = SloTargets {
        max_gap: Some(Duration::from_millis(250)),
        ..targets
    };
    assert_eq!(
        super::super::gap_limit(with_gap),
        Duration::from_millis(250)
    );
}
