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
    };
    let verdict = figures.verdict(targets).expect("a token was seen");
    assert_eq!(
        verdict,
        SloVerdict {
            ttft_met: false,
            tpot_met: None
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
        })
        .expect("verdict");
    assert!(
        verdict.all_met(),
        "TTFT == target and TPOT == target both meet: {verdict:?}"
    );
}
