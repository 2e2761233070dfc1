use super::*;
use crate::testbed::bench::Ending;

/// A successful turn: prompt and cached tokens as the server reported them, TTFT in seconds.
fn rec(session: u64, turn: u32, prompt: u64, cached: Option<u64>, ttft: f64) -> RequestRecord {
    RequestRecord {
        index: 0,
        class: "session".into(),
        prompt_words: 1,
        max_tokens: 4,
        start_s: 0.0,
        outcome: Ending::Ok,
        status: Some(200),
        error: None,
        ttft_s: Some(ttft),
        itl_s: vec![0.01; 3],
        tpot_s: Some(0.01),
        e2e_s: ttft + 0.03,
        token_events: 4,
        output_tokens: 4,
        usage_prompt_tokens: Some(prompt),
        usage_completion_tokens: Some(4),
        usage_cached_tokens: cached,
        session: Some(session),
        turn: Some(turn),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn per_turn_rows_sum_what_their_requests_report() {
    let mut failed = rec(2, 2, 999, Some(999), 9.0);
    failed.outcome = Ending::Timeout;
    let records = vec![
        rec(0, 1, 100, Some(0), 0.10),
        rec(1, 1, 100, Some(64), 0.02),
        rec(2, 1, 120, None, 0.30),
        rec(0, 2, 200, Some(192), 0.04),
        rec(1, 2, 210, Some(208), 0.05),
        failed,
    ];
    let rows = by_turn(&records);
    assert_eq!(
        rows.iter().map(TurnStats::label).collect::<Vec<_>>(),
        ["1", "2"],
        "one row per turn index, in order"
    );
    let t1 = &rows[0];
    assert_eq!((t1.requests, t1.ok, t1.errors), (3, 3, 0), "turn 1 counts");
    assert_eq!(
        t1.cache,
        CacheTally {
            requests: 2,
            cached_tokens: 64,
            prompt_tokens: 200
        },
        "only requests with a cache figure enter the tally (the 120-token one has none)"
    );
    assert!(
        close(t1.cached_ratio.expect("a ratio"), 0.32),
        "64 / 200: {:?}",
        t1.cached_ratio
    );
    assert!(
        close(t1.prompt_tokens.mean, 320.0 / 3.0),
        "mean prompt tokens over every ok request: {}",
        t1.prompt_tokens.mean
    );
    assert!(
        close(t1.ttft.p50, 0.10) && close(t1.ttft.max, 0.30),
        "TTFT summary: {:?}",
        t1.ttft
    );
    let t2 = &rows[1];
    assert_eq!((t2.requests, t2.ok, t2.errors), (3, 2, 1), "turn 2 counts");
    assert_eq!(
        (t2.cache.cached_tokens, t2.cache.prompt_tokens),
        (400, 410),
        "the failed request's figures are left out"
    );
    assert_eq!(t2.ttft.count, 2, "TTFT of ok requests only");
    let overall = CacheTally::of(&records);
    assert_eq!(
        (
            overall.requests,
            overall.cached_tokens,
            overall.prompt_tokens
        ),
        (4, 464, 610),
        "overall tally over both turns"
    );
    assert!(
        close(overall.ratio().expect("ratio"), 464.0 / 610.0),
        "overall ratio"
    );
}

#[test]
fn no_cache_figure_means_no_ratio() {
    let records = vec![rec(0, 1, 100, None, 0.1), rec(0, 2, 200, None, 0.1)];
    let rows = by_turn(&records);
    assert!(
        rows.iter().all(|r| r.cached_ratio.is_none()),
        "no figure reported: no ratio, not 0"
    );
    assert_eq!(CacheTally::of(&records).ratio(), None, "overall too");
    let zero = vec![rec(0, 1, 100, Some(0), 0.1)];
    assert_eq!(
        by_turn(&zero)[0].cached_ratio,
        Some(0.0),
        "a reported 0 is a ratio of 0"
    );
}

#[test]
fn turns_from_eight_on_share_a_row() {
    assert_eq!(
        (1..=12).map(turn_row).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8],
        "turn_row"
    );
    let mut records: Vec<RequestRecord> = (1..=11)
        .map(|t| rec(0, t, 100 * u64::from(t), Some(50 * u64::from(t)), 0.01))
        .collect();
    records.push(rec(1, 3, 300, Some(0), 0.01));
    let mut single_turn = rec(0, 1, 5, Some(5), 0.01);
    single_turn.turn = None;
    records.push(single_turn);
    let rows = by_turn(&records);
    assert_eq!(
        rows.iter().map(TurnStats::label).collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5", "6", "7", "8+"],
        "turns 8 to 11 in one row; a record without a turn is no row"
    );
    let last = rows.last().expect("a grouped row");
    assert!(last.and_later && last.turn == 8, "the 8+ row: {last:?}");
    assert_eq!(last.requests, 4, "turns 8, 9, 10, 11");
    assert_eq!(
        (last.cache.cached_tokens, last.cache.prompt_tokens),
        (50 * (8 + 9 + 10 + 11), 100 * (8 + 9 + 10 + 11)),
        "the group's tallies add up"
    );
    assert_eq!(rows[2].requests, 2, "turn 3 of both sessions");
    assert!(!rows[6].and_later, "turn 7 is a row of its own");
}

#[test]
fn session_results_count_only_session_requests() {
    let mut stray = rec(0, 1, 1000, Some(1000), 0.1);
    stray.turn = None;
    let records = vec![
        rec(0, 1, 100, Some(0), 0.1),
        rec(0, 2, 300, Some(96), 0.1),
        stray,
    ];
    let results = SessionResults::new(SessionWorkload::default(), None, (1, 1), &records);
    assert_eq!(
        (results.cache.cached_tokens, results.cache.prompt_tokens),
        (96, 400),
        "the overall tally covers the session's turns"
    );
    assert!(
        close(results.cached_ratio.expect("ratio"), 0.24),
        "96 / 400"
    );
    assert_eq!(results.by_turn.len(), 2, "two turn rows");
    let json = serde_json::to_value(&results).expect("serializes");
    assert_eq!(
        json["by_turn"][1]["cached_ratio"], 0.32,
        "per-turn ratio in JSON (96 / 300)"
    );
    assert_eq!(json["by_turn"][0]["and_later"], false, "and_later in JSON");
    let back: SessionResults = serde_json::from_value(json).expect("deserializes");
    assert_eq!(back, results, "round trip");
}
