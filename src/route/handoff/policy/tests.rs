use std::time::Duration;

use super::*;
use crate::config::HandoffProtocol;

fn handoff(min: u64, short_queue: u64) -> PoolHandoff {
    PoolHandoff {
        prefill: 1,
        protocol: HandoffProtocol::Vllm,
        min_prompt_tokens: min,
        short_queue_tokens: short_queue,
        spill_queue_tokens: 0,
        prefill_timeout: Duration::from_secs(1),
        slot_dir: None,
        slot_wait: Duration::ZERO,
    }
}

fn input(prompt: u64, uncached: u64, queue: Option<u64>) -> PolicyInput {
    PolicyInput {
        prompt_tokens: prompt,
        uncached_tokens: uncached,
        prefill_queue: queue,
    }
}

/// Checks [`decide`] under `handoff` on each case: the input, the choice expected, and why.
#[track_caller]
fn assert_decides(handoff: &PoolHandoff, cases: &[(PolicyInput, Choice, &str)]) {
    for &(input, expected, why) in cases {
        assert_eq!(decide(handoff, input), expected, "{why} ({input:?})");
    }
}

/// Checks [`decide_predicted`] on each case: the forecast and the choice expected.
#[track_caller]
fn assert_predicted(cases: &[(Forecast, Choice)]) {
    for &(forecast, expected) in cases {
        assert_eq!(decide_predicted(forecast), expected, "{forecast:?}");
    }
}

#[test]
fn a_long_uncached_prompt_prefills_on_the_prefill_pool_however_queued() {
    assert_decides(
        &handoff(512, 0),
        &[
            (input(512, 512, Some(0)), Choice::Remote, ""),
            (input(4000, 4000, Some(1_000_000)), Choice::Remote, ""),
        ],
    );
}

#[test]
fn a_long_prompt_without_a_prefill_backend_prefills_where_it_decodes() {
    let h = handoff(512, 1000);
    assert_eq!(
        decide(&h, input(4000, 4000, None)),
        Choice::Local(HandoffResult::PrefillUnavailable)
    );
}

#[test]
fn a_follow_up_the_decode_backend_holds_prefills_there() {
    let h = handoff(512, 1000);
    assert_eq!(
        decide(&h, input(4000, 300, Some(0))),
        Choice::Local(HandoffResult::LocalCached),
        "cached beats an idle prefill pool: moving the cache to save 300 tokens is a loss"
    );
}

#[test]
fn a_short_follow_up_the_decode_backend_holds_part_of_prefills_there_even_when_idle() {
    assert_decides(
        &handoff(512, 1000),
        &[
            (
                input(400, 120, Some(0)),
                Choice::Local(HandoffResult::LocalCached),
                "handing it off recomputes all 400 tokens to save the decode backend 120",
            ),
            (input(400, 400, Some(0)), Choice::Remote, ""),
        ],
    );
}

#[test]
fn a_short_prompt_is_handed_off_only_below_the_queue_bound() {
    let short = Choice::Local(HandoffResult::LocalShort);
    assert_decides(
        &handoff(512, 1000),
        &[
            (input(100, 100, Some(999)), Choice::Remote, ""),
            (input(100, 100, Some(1000)), short, ""),
            (
                input(100, 100, None),
                short,
                "no prefill backend: a short prompt was never going to wait for one",
            ),
        ],
    );
    assert_decides(
        &handoff(512, 0),
        &[(
            input(100, 100, Some(0)),
            short,
            "short_queue_tokens = 0: short prompts always prefill where they decode",
        )],
    );
}

#[test]
fn the_uncached_part_is_the_uncached_share_of_the_bytes() {
    assert_eq!(uncached(1000, 4000, None), 1000);
    assert_eq!(uncached(1000, 4000, Some(0)), 1000);
    assert_eq!(uncached(1000, 4000, Some(3000)), 250);
    assert_eq!(uncached(1000, 4000, Some(4000)), 0);
    assert_eq!(uncached(1000, 4000, Some(9000)), 0, "clamped to the prompt");
    assert_eq!(
        uncached(1000, 0, Some(100)),
        1000,
        "token-id prompts: no text"
    );
    assert_eq!(
        uncached(3, 4000, Some(1)),
        3,
        "rounded up: never under-counted"
    );
}

#[test]
fn a_long_prompt_spills_to_its_decode_backend_past_the_spill_bound() {
    let mut h = handoff(512, 0);
    h.spill_queue_tokens = 20_000;
    assert_decides(
        &h,
        &[
            (input(8000, 8000, Some(20_000)), Choice::Remote, ""),
            (
                input(8000, 8000, Some(20_001)),
                Choice::Local(HandoffResult::LocalBusy),
                "",
            ),
        ],
    );
}

fn forecast(local: u64, stalls: bool, remote: Option<u64>, cached: bool) -> Forecast {
    let ms = Duration::from_millis;
    Forecast {
        local: ms(local),
        local_stalls: stalls,
        remote: remote.map(ms),
        remote_times_out: false,
        budget: ms(800),
        cached,
    }
}

#[test]
fn by_prediction_a_prefill_that_stalls_the_decode_streams_goes_to_the_prefill_pool() {
    assert_predicted(&[
        // A document: 450 ms where it decodes, 600 ms through the prefill pool: both meet
        // 800 ms, and only the remote one spares the streams.
        (forecast(450, true, Some(600), false), Choice::Remote),
        // Both miss: the decode streams are still spared.
        (forecast(2_000, true, Some(3_000), false), Choice::Remote),
        // Even when the prefill pool's queue makes it late and the decode backend would not:
        // the streams' gaps are targets too.
        (forecast(450, true, Some(1_500), false), Choice::Remote),
    ]);
}

#[test]
fn by_prediction_a_prefill_that_does_not_stall_stays_unless_only_the_prefill_pool_meets_it() {
    let short = Choice::Local(HandoffResult::LocalShort);
    assert_predicted(&[
        // A chat meeting its target where it decodes: no transfer to pay for.
        (forecast(90, false, Some(60), false), short),
        // A follow-up whose prefix the decode backend holds.
        (
            forecast(90, false, Some(60), true),
            Choice::Local(HandoffResult::LocalCached),
        ),
        // Behind a long queue on its decode backend, the prefill pool meets it.
        (forecast(1_200, false, Some(300), false), Choice::Remote),
        // Neither meets it: the sooner.
        (forecast(1_200, false, Some(1_900), false), short),
        (forecast(1_900, false, Some(1_200), false), Choice::Remote),
    ]);
}

#[test]
fn by_prediction_without_a_prefill_backend_it_prefills_where_it_decodes() {
    assert_eq!(
        decide_predicted(forecast(2_000, true, None, false)),
        Choice::Local(HandoffResult::PrefillUnavailable)
    );
}

#[test]
fn by_prediction_a_prefill_predicted_past_the_timeout_stays_where_it_decodes() {
    // It would stall the decode streams, and the prefill pool would meet its target: still, a
    // prefill predicted to outlast `prefill_timeout` would be abandoned there and done here
    // anyway, after the timeout.
    let late = Forecast {
        remote_times_out: true,
        ..forecast(450, true, Some(600), false)
    };
    assert_eq!(
        decide_predicted(late),
        Choice::Local(HandoffResult::LocalBusy)
    );
    assert_eq!(
        decide_predicted(Forecast {
            remote_times_out: false,
            ..late
        }),
        Choice::Remote,
        "the same forecast within the timeout goes remote"
    );
}
