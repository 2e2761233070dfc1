use std::time::Duration;

use super::*;
use crate::testbed::bench::{Ending, RequestRecord, Slo};

const EPS: f64 = 1e-12;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < EPS
}

#[test]
fn percentile_matches_numpy_linear() {
    let v = [1.0, 2.0, 3.0, 4.0];
    assert!(close(percentile(&v, 0.5), 2.5), "p50 of 1..4 is 2.5");
    assert!(
        close(percentile(&v, 0.9), 3.7),
        "p90 of 1..4 is 3.7, got {}",
        percentile(&v, 0.9)
    );
    assert!(
        close(percentile(&v, 0.99), 3.97),
        "p99 of 1..4 is 3.97, got {}",
        percentile(&v, 0.99)
    );
    assert!(close(percentile(&v, 0.0), 1.0), "p0 is the minimum");
    assert!(close(percentile(&v, 1.0), 4.0), "p100 is the maximum");
    // numpy.percentile([10, 20, 40], 25) == 15.0
    assert!(
        close(percentile(&[10.0, 20.0, 40.0], 0.25), 15.0),
        "rank 0.5 interpolates halfway"
    );
}

#[test]
fn percentile_of_one_value_is_that_value() {
    for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
        assert_eq!(
            percentile(&[0.125], q),
            0.125,
            "any quantile of one value is the value"
        );
    }
}

#[test]
fn percentile_of_nothing_is_nan() {
    assert!(
        percentile(&[], 0.5).is_nan(),
        "numpy raises on empty input; we return NaN"
    );
}

#[test]
fn summary_sorts_and_summarises() {
    let s = Summary::of(vec![4.0, 1.0, 3.0, 2.0]);
    assert_eq!(s.count, 4, "count");
    assert!(close(s.mean, 2.5), "mean");
    assert_eq!((s.min, s.max), (1.0, 4.0), "min and max");
    assert!(
        close(s.p50, 2.5) && close(s.p90, 3.7) && close(s.p99, 3.97),
        "percentiles: {s:?}"
    );
}

#[test]
fn empty_summary_is_all_zero() {
    assert_eq!(
        Summary::of(vec![]),
        Summary::default(),
        "no samples: zeros with count 0"
    );
    assert_eq!(Summary::of(vec![f64::NAN]).count, 0, "NaNs are dropped");
}

fn record(class: &str, outcome: Ending, ttft: f64, tpot: Option<f64>, n_out: u64) -> RequestRecord {
    RequestRecord {
        index: 0,
        class: class.into(),
        prompt_words: 10,
        max_tokens: n_out as u32,
        start_s: 0.0,
        outcome,
        status: Some(200),
        error: None,
        ttft_s: Some(ttft),
        itl_s: vec![0.01; n_out.saturating_sub(1) as usize],
        tpot_s: tpot,
        e2e_s: ttft + 0.01 * n_out as f64,
        token_events: n_out,
        output_tokens: n_out,
        usage_prompt_tokens: None,
        usage_completion_tokens: Some(n_out),
        usage_cached_tokens: None,
        session: None,
        turn: None,
    }
}

#[test]
fn class_stats_count_goodput_and_errors() {
    let slo = Slo {
        ttft: Duration::from_millis(800),
        tpot: Duration::from_millis(35),
        max_gap: None,
    };
    let rs = vec![
        record("a", Ending::Ok, 0.5, Some(0.02), 10),  // meets
        record("a", Ending::Ok, 0.9, Some(0.02), 10),  // TTFT too slow
        record("a", Ending::Ok, 0.5, Some(0.05), 10),  // TPOT too slow
        record("a", Ending::Ok, 0.5, None, 1),         // N_out < 2: TTFT only, meets
        record("a", Ending::Http, 0.1, Some(0.01), 0), // error
        record("a", Ending::ErrorEvent, 0.1, None, 1), // error
    ];
    let s = ClassStats::from_records("a", &rs, 2.0, &slo);
    assert_eq!(
        (s.requests, s.ok, s.errors),
        (6, 4, 2),
        "requests, ok, errors"
    );
    assert_eq!(s.slo_met, 2, "two successful requests meet the SLO");
    assert!(close(s.goodput, 1.0), "2 good requests over 2 s");
    assert!(close(s.request_throughput, 2.0), "4 ok requests over 2 s");
    assert_eq!(s.output_tokens_total, 31, "tokens of ok requests only");
    assert!(close(s.output_throughput, 15.5), "31 tokens over 2 s");
    assert_eq!(s.ttft.count, 4, "TTFT from ok requests only");
    assert_eq!(
        s.itl.count, 27,
        "ITL gaps pooled over ok requests (9+9+9+0)"
    );
    assert_eq!(s.tpot.count, 3, "TPOT only where defined");
    assert_eq!(
        s.error_kinds.get("http"),
        Some(&1),
        "http errors counted by kind"
    );
    assert_eq!(
        s.error_kinds.get("error_event"),
        Some(&1),
        "error events counted by kind"
    );
}

#[test]
fn a_gap_target_counts_the_largest_gap_and_keeps_vllms_goodput_beside() {
    let mut stalled = record("a", Ending::Ok, 0.5, Some(0.02), 10);
    stalled.itl_s[4] = 0.4; // one stall of 400 ms among 9 gaps: TPOT stays within 35 ms
    let smooth = record("a", Ending::Ok, 0.5, Some(0.02), 10);
    let one_token = record("a", Ending::Ok, 0.5, None, 1); // no gap to judge
    let failed = record("a", Ending::Http, 0.1, Some(0.01), 0);
    let rs = vec![stalled, smooth, one_token, failed];
    let slo = |max_gap| Slo {
        ttft: Duration::from_millis(800),
        tpot: Duration::from_millis(35),
        max_gap,
    };
    let judged = ClassStats::from_records("a", &rs, 2.0, &slo(Some(Duration::from_millis(250))));
    assert_eq!(
        judged.slo_met, 2,
        "the stalled request misses the gap target"
    );
    assert!(close(judged.goodput, 1.0), "2 good requests over 2 s");
    assert_eq!(
        judged.goodput_ttft_tpot.map(|g| (g * 100.0).round()),
        Some(150.0),
        "vLLM's goodput beside it: 3 requests meet TTFT and TPOT"
    );
    assert_eq!(
        judged.max_gap.count, 2,
        "one largest gap per request of 2+ events"
    );
    assert!(
        close(judged.max_gap.max, 0.4),
        "the worst gap: {:?}",
        judged.max_gap
    );
    assert!(
        close(judged.max_gap.min, 0.01),
        "the smooth one's: {:?}",
        judged.max_gap
    );
    let unjudged = ClassStats::from_records("a", &rs, 2.0, &slo(None));
    assert_eq!(
        unjudged.slo_met, 3,
        "without a gap target, TTFT and TPOT decide"
    );
    assert_eq!(unjudged.goodput_ttft_tpot, None, "no second goodput");
    assert_eq!(
        unjudged.max_gap, judged.max_gap,
        "the gaps are summarised either way"
    );
    let at_edge = ClassStats::from_records("a", &rs, 2.0, &slo(Some(Duration::from_millis(400))));
    assert_eq!(at_edge.slo_met, 3, "the gap target is inclusive");
}
