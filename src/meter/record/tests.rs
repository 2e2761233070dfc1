use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn ttft_gaps_and_tpot_follow_the_definitions() {
    let t0 = Instant::now();
    let mut record = StreamRecord::new(t0);
    assert_eq!(
        record.on_bytes(t0 + ms(5)),
        Some(ms(5)),
        "TTFB at the first frame"
    );
    assert_eq!(record.on_bytes(t0 + ms(6)), None, "TTFB only once");
    assert_eq!(
        record.on_token(t0 + ms(100), None),
        TokenMark::First(ms(100))
    );
    assert_eq!(record.on_token(t0 + ms(130), None), TokenMark::Gap(ms(30)));
    assert_eq!(record.on_token(t0 + ms(190), None), TokenMark::Gap(ms(60)));
    let figures = record.figures(t0 + ms(200));
    assert_eq!(figures.e2e, ms(200), "E2E");
    assert_eq!(figures.ttft, Some(ms(100)), "TTFT");
    assert_eq!(
        figures.output_tokens, 3,
        "counted from events without usage"
    );
    assert!(!figures.exact_output, "fallback is flagged");
    assert_eq!(figures.tpot, Some(ms(45)), "(190 - 100) / (3 - 1)");
}

#[test]
fn usage_overrides_event_count_for_tpot() {
    // Speculative decoding: 2 chunks carrying 5 tokens.
    let t0 = Instant::now();
    let mut record = StreamRecord::new(t0);
    record.on_token(t0 + ms(100), None);
    record.on_token(t0 + ms(180), None);
    record.on_usage(Usage {
        prompt_tokens: Some(20),
        completion_tokens: Some(5),
        cached_tokens: None,
        prefill_micros: None,
    });
    let figures = record.figures(t0 + ms(190));
    assert_eq!(figures.output_tokens, 5, "usage wins");
    assert!(figures.exact_output, "exact");
    assert_eq!(figures.input_tokens, Some(20), "prompt tokens from usage");
    assert_eq!(figures.tpot, Some(ms(20)), "(180 - 100) / (5 - 1)");
}

#[test]
fn single_token_streams_are_judged_on_ttft_only() {
    let t0 = Instant::now();
    let mut record = StreamRecord::new(t0);
    record.on_token(t0 + ms(900), None);
    let figures = record.figures(t0 + ms(901));
    assert_eq!(figures.tpot, None, "no TPOT for one token");
    let targets = SloTargets {
        ttft: ms(800),
        tpot: ms(35),
        max_gap: None,
    };
    let verdict = figures.verdict(targets).expect("a token was seen");
    assert_eq!(
        verdict,
        SloVerdict {
            ttft_met: false,
            tpot_met: None,
            gap_met: None
        }
    );
    assert!(!verdict.all_met(), "TTFT missed");
    assert_eq!(
        StreamRecord::new(t0).figures(t0).verdict(targets),
        None,
        "no token, no verdict"
    );
}

#[test]
fn slo_edges_are_inclusive() {
    let t0 = Instant::now();
    let mut record = StreamRecord::new(t0);
    record.on_token(t0 + ms(800), None);
    record.on_token(t0 + ms(835), None);
    let verdict = record
        .figures(t0 + ms(840))
        .verdict(SloTargets {
            ttft: ms(800),
            tpot: ms(35),
            max_gap: None,
        })
        .expect("verdict");
    assert!(
        verdict.all_met(),
        "TTFT == target and TPOT == target both meet: {verdict:?}"
    );
}

#[test]
fn a_stall_the_mean_hides_misses_the_gap_target() {
    // 71 token events 10 ms apart but one gap of 300 ms: TPOT is ~14 ms, well within 35 ms; the
    // largest gap is not within 250 ms.
    let t0 = Instant::now();
    let mut record = StreamRecord::new(t0);
    let mut at = ms(100);
    record.on_token(t0 + at, None);
    for i in 1..71 {
        at += if i == 35 { ms(300) } else { ms(10) };
        record.on_token(t0 + at, None);
    }
    let figures = record.figures(t0 + at);
    assert_eq!(figures.max_gap, Some(ms(300)), "the largest gap");
    assert_eq!(figures.tpot, Some(ms(990) / 70), "(69 x 10 + 300) / 70");
    let targets = |max_gap| SloTargets {
        ttft: ms(800),
        tpot: ms(35),
        max_gap,
    };
    let judged = figures.verdict(targets(Some(ms(250)))).expect("verdict");
    assert_eq!(
        judged,
        SloVerdict {
            ttft_met: true,
            tpot_met: Some(true),
            gap_met: Some(false)
        },
        "TTFT and TPOT met, the stall missed"
    );
    assert!(!judged.all_met(), "all includes the gap target");
    let unjudged = figures.verdict(targets(None)).expect("verdict");
    assert_eq!(unjudged.gap_met, None, "no gap target, no gap verdict");
    assert!(
        unjudged.all_met(),
        "without a gap target, vLLM's definition"
    );
    let at_edge = figures.verdict(targets(Some(ms(300)))).expect("verdict");
    assert_eq!(at_edge.gap_met, Some(true), "the gap target is inclusive");
}

#[test]
fn a_stream_of_one_token_event_has_no_gap_to_judge() {
    // One event carrying all 5 tokens (usage says so): a TPOT, but no gap.
    let t0 = Instant::now();
    let mut record = StreamRecord::new(t0);
    record.on_token(t0 + ms(100), None);
    record.on_usage(Usage {
        completion_tokens: Some(5),
        ..Usage::default()
    });
    let figures = record.figures(t0 + ms(110));
    assert_eq!(figures.max_gap, None, "fewer than two token events");
    let verdict = figures
        .verdict(SloTargets {
            ttft: ms(800),
            tpot: ms(35),
            max_gap: Some(ms(1)),
        })
        .expect("verdict");
    assert_eq!(verdict.gap_met, None);
    assert!(verdict.all_met());
}
