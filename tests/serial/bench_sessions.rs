//! Session workloads end to end: `run_sessions` against the simulated replica (prefix caching on,
//! `cached_tokens` reported) checks the conversation the sim sees through the one thing it
//! reports back, the cached prompt tokens, which the sim makes exact: it caches whole 16-token
//! blocks of every finished request's prompt and output, and a prompt reuses its longest run of
//! cached blocks from the start (`src/testbed/sim/prefix_cache.rs`). A scripted backend then
//! shows the wire: the session header on every turn, the reply sent back byte for byte, and
//! llama.cpp's `timings.cache_n` as the cache figure. The command line last.

use crate::support;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;
use support::backend::{Backend, Report, Script};
use tokenmeter::cli::{Cli, Command};
use tokenmeter::testbed::bench::{
    run_sessions, Arrival, Dist, Endpoint, RequestRecord, SessionReport, SessionSpec,
    SessionWorkload, Stop,
};
use tokenmeter::testbed::sim::prefix_cache::BLOCK_TOKENS;
use tokenmeter::testbed::sim::{
    spawn, SimConfig, CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REQUEST,
};

const SYSTEM: u64 = 40;
const USER: u64 = 8;
const OUTPUT: u64 = 6;
const TURNS: usize = 3;

/// A fast replica (steps of about a millisecond) that reports `cached_tokens`.
async fn start_sim() -> tokenmeter::testbed::sim::SimHandle {
    let mut config = SimConfig::profile("fast").expect("the fast profile");
    config.enable_prompt_tokens_details = true;
    assert!(
        config.enable_prefix_caching,
        "prefix caching is on by default"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    spawn(listener, config).await.expect("sim starts")
}

/// Sessions on a constant schedule 250 ms apart: each one (three turns of a few ms and two
/// thinks of 5 ms on average) is over long before the next starts, so what the cache holds at
/// each turn is known. On a loaded 2-core machine a session still takes tens of milliseconds:
/// to overlap the next it would have to run ten times slower than that. (The per-record checks
/// read the order from the records all the same, and allow overlapping sessions.)
fn spec(url: String, endpoint: Endpoint, sessions: u64, system_prompts: u32) -> SessionSpec {
    SessionSpec {
        endpoint,
        rate: 4.0,
        arrival: Arrival::Constant,
        stop: Stop::Sessions(sessions),
        workload: SessionWorkload {
            system_prompts,
            system_tokens: Dist::Fixed(SYSTEM as u32),
            turns: Dist::Fixed(TURNS as u32),
            user_tokens: Dist::Fixed(USER as u32),
            output_tokens: Dist::Fixed(OUTPUT as u32),
            think_time: Duration::from_millis(5),
        },
        seed: 11,
        request_timeout: Duration::from_secs(10),
        ..SessionSpec::new(url)
    }
}

/// Whole blocks of `tokens`.
fn blocks(tokens: u64) -> u64 {
    tokens / BLOCK_TOKENS as u64 * BLOCK_TOKENS as u64
}

/// Prompt tokens of turn `k` (from 1) as the sim counts them: the system prompt, `k` user
/// messages and `k - 1` replies, with the chat template's tokens for chat.
fn prompt_tokens(endpoint: Endpoint, k: u64) -> u64 {
    let text = SYSTEM + k * USER + (k - 1) * OUTPUT;
    match endpoint {
        Endpoint::Chat => text + (2 * k) * CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_PER_REQUEST,
        Endpoint::Completions => text,
    }
}

/// The prefix that sessions with the same system prompt share: the system prompt (for chat:
/// after begin-of-text and its header, with its end-of-turn and the next user header).
fn shared_prefix(endpoint: Endpoint) -> u64 {
    match endpoint {
        Endpoint::Chat => 1 + SYSTEM + CHAT_TOKENS_PER_MESSAGE + 4,
        Endpoint::Completions => SYSTEM,
    }
}

fn ended_s(r: &RequestRecord) -> f64 {
    r.start_s + r.e2e_s
}

/// Checks every record against the cache rule; returns how many turn-1 requests found their
/// system prompt cached.
fn check_cached_tokens(report: &SessionReport, spec: &SessionSpec) -> usize {
    let records = &report.point.requests;
    let endpoint = spec.endpoint;
    let system_of = |r: &RequestRecord| {
        let session = r.session.expect("a session id");
        spec.workload.draw(spec.seed, session).system_prompt
    };
    let mut warm_first_turns = 0;
    for r in records {
        let (session, turn) = (r.session.expect("session"), r.turn.expect("turn"));
        let what = format!("session {session} turn {turn}");
        let prompt = r.usage_prompt_tokens.expect("usage.prompt_tokens");
        assert_eq!(
            prompt,
            prompt_tokens(endpoint, u64::from(turn)),
            "{what}: the prompt holds the system prompt, every question and every reply"
        );
        let cached = r.usage_cached_tokens.expect("cached_tokens reported");
        if turn == 1 {
            let same_system = records
                .iter()
                .filter(|o| o.session != r.session && system_of(o) == system_of(r));
            let seen_before = same_system.clone().any(|o| ended_s(o) < r.start_s);
            let first = same_system.clone().all(|o| o.start_s > ended_s(r));
            let full = blocks(shared_prefix(endpoint));
            if seen_before {
                assert_eq!(
                    cached, full,
                    "{what}: the shared system prompt's whole blocks are cached"
                );
                warm_first_turns += 1;
            } else if first {
                assert_eq!(
                    cached, 0,
                    "{what}: a fresh system prompt has nothing cached"
                );
            } else {
                assert!(
                    cached == 0 || cached == full,
                    "{what}: overlapping sessions: none or all of the system prompt, got {cached}"
                );
            }
        } else {
            let previous = records
                .iter()
                .find(|o| o.session == r.session && o.turn == Some(turn - 1))
                .expect("the previous turn");
            let history = previous.usage_prompt_tokens.expect("prompt") + previous.output_tokens;
            assert_eq!(
                cached,
                blocks(history),
                "{what}: the previous turn's prompt and reply, in whole blocks"
            );
        }
    }
    warm_first_turns
}

/// The turn rows agree with the records they summarise.
fn check_turn_rows(report: &SessionReport) {
    let records = &report.point.requests;
    for row in &report.sessions.by_turn {
        let of_turn: Vec<&RequestRecord> = records
            .iter()
            .filter(|r| r.turn == Some(row.turn))
            .collect();
        let cached: u64 = of_turn.iter().filter_map(|r| r.usage_cached_tokens).sum();
        let prompt: u64 = of_turn.iter().filter_map(|r| r.usage_prompt_tokens).sum();
        assert_eq!(
            row.requests,
            of_turn.len() as u64,
            "turn {} requests",
            row.turn
        );
        assert_eq!(
            (row.cache.cached_tokens, row.cache.prompt_tokens),
            (cached, prompt),
            "turn {} tallies",
            row.turn
        );
        let ratio = row.cached_ratio.expect("every turn reported a figure");
        assert!(
            (ratio - cached as f64 / prompt as f64).abs() < 1e-12,
            "turn {} ratio {ratio}",
            row.turn
        );
        assert_eq!(row.ttft.count, of_turn.len(), "turn {} TTFTs", row.turn);
    }
}

fn check_all_succeeded(report: &SessionReport, sessions: u64) {
    let records = &report.point.requests;
    assert_eq!(
        records.len(),
        sessions as usize * TURNS,
        "every session ran every turn"
    );
    assert!(
        records.iter().all(|r| r.outcome.is_ok()),
        "every request succeeded: {:?}",
        records.iter().find(|r| !r.outcome.is_ok())
    );
    assert_eq!(
        (report.sessions.started, report.sessions.completed),
        (sessions, sessions),
        "sessions started and completed"
    );
    assert_eq!(
        report.sessions.by_turn.len(),
        TURNS,
        "one row per turn index"
    );
    let all = report.point.all().expect("the all row");
    assert_eq!(
        all.ok,
        sessions * TURNS as u64,
        "the usual summary counts them all"
    );
}

#[tokio::test]
async fn chat_sessions_reuse_their_history_and_shared_system_prompts() {
    let _alone = crate::alone().await;
    let sim = start_sim().await;
    let spec = spec(format!("http://{}", sim.local_addr()), Endpoint::Chat, 6, 2);
    let report = run_sessions(&spec).await.expect("the run completes");
    eprintln!("{}", report.render_table());
    check_all_succeeded(&report, 6);
    assert_eq!(
        (
            prompt_tokens(Endpoint::Chat, 1),
            blocks(shared_prefix(Endpoint::Chat))
        ),
        (63, 48),
        "the numbers this test expects, worked by hand: 5 + (5 + 40) + (5 + 8); 50 shared -> 48"
    );
    // Each session after the first of its system prompt finds that prompt cached (the sessions
    // run one after another: see `spec`).
    let systems: Vec<usize> = (0..6)
        .map(|s| spec.workload.draw(spec.seed, s).system_prompt)
        .collect();
    let reusing = (1..6)
        .filter(|&s| systems[..s].contains(&systems[s]))
        .count();
    assert!(
        reusing >= 1,
        "the seed gives two sessions one system prompt: {systems:?}"
    );
    let warm = check_cached_tokens(&report, &spec);
    assert_eq!(
        warm, reusing,
        "six sessions over two system prompts ({systems:?}): every later session of a prompt \
         found it cached"
    );
    check_turn_rows(&report);
    let rows = &report.sessions.by_turn;
    let (first, later) = (
        rows[0].cached_ratio.expect("turn 1 ratio"),
        rows[1].cached_ratio.expect("turn 2 ratio"),
    );
    // Turn 1: 48 of 63 tokens for each warm session; turn 2: the 63 + 6 tokens of turn 1 hold 4
    // whole blocks (64 tokens) of an 87-token prompt.
    let want_first = (48 * warm) as f64 / (63 * 6) as f64;
    assert!(
        (first - want_first).abs() < 1e-12 && (later - 64.0 / 87.0).abs() < 1e-12,
        "turn 1 reuses only the system prompt ({first:.3}, expected {want_first:.3}), turn 2 \
         nearly everything ({later:.3}, expected 64/87)"
    );
    assert_eq!(
        prompt_tokens(Endpoint::Chat, 2),
        87,
        "the turn 2 prompt worked by hand: 5 + (5 + 40) + (5 + 8) + (5 + 6) + (5 + 8)"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn completions_sessions_with_fresh_system_prompts_start_cold() {
    let _alone = crate::alone().await;
    let sim = start_sim().await;
    let spec = spec(
        format!("http://{}", sim.local_addr()),
        Endpoint::Completions,
        3,
        50,
    );
    let systems: Vec<usize> = (0..3)
        .map(|s| spec.workload.draw(spec.seed, s).system_prompt)
        .collect();
    assert!(
        systems[0] != systems[1] && systems[1] != systems[2] && systems[0] != systems[2],
        "the seed gives the three sessions three different system prompts: {systems:?}"
    );
    let report = run_sessions(&spec).await.expect("the run completes");
    eprintln!("{}", report.render_table());
    check_all_succeeded(&report, 3);
    assert_eq!(
        check_cached_tokens(&report, &spec),
        0,
        "no system prompt was seen twice"
    );
    check_turn_rows(&report);
    assert_eq!(
        report.sessions.by_turn[0].cached_ratio,
        Some(0.0),
        "turn 1 of sessions with fresh system prompts: nothing cached"
    );
    // Turn 2: the 40 + 8 + 6 = 54 tokens of turn 1 hold 3 whole blocks, of a 62-token prompt.
    let second = report.sessions.by_turn[1].cached_ratio.expect("turn 2");
    assert!(
        (second - 48.0 / 62.0).abs() < 1e-12,
        "turn 2 ratio {second}, expected 48/62"
    );
    sim.shutdown().await;
}

/// A llama.cpp-style stream: the reply in three pieces, `timings` on the last chunk, usage.
fn llama_stream(_: &support::backend::Seen) -> Script {
    let pieces = [" Hello", ", \"world\"", "!\n"];
    let mut events: Vec<(Duration, Vec<u8>)> = pieces
        .iter()
        .map(|p| {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": p}}]});
            (
                Duration::from_millis(1),
                format!("data: {chunk}\n\n").into_bytes(),
            )
        })
        .collect();
    let last = r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"timings":{"cache_n":7,"prompt_n":3,"predicted_n":3}}"#;
    let usage =
        r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":10,"total_tokens":13}}"#;
    for event in [last, usage, "[DONE]"] {
        events.push((Duration::ZERO, format!("data: {event}\n\n").into_bytes()));
    }
    Script::sse(events)
}

#[tokio::test]
async fn each_turn_carries_the_session_header_and_sends_the_reply_back() {
    let _alone = crate::alone().await;
    let mut backend = Backend::start(llama_stream).await;
    let mut spec = spec(backend.url.clone(), Endpoint::Chat, 2, 1);
    spec.workload.turns = Dist::Fixed(2);
    spec.rate = f64::INFINITY;
    spec.session_header = Some("x-session-id".into());
    spec.model = Some("m".into());
    let report = run_sessions(&spec).await.expect("the run completes");
    let mut seen = Vec::new();
    while let Ok(report) = backend.reports.try_recv() {
        if let Report::Request(s) = report {
            seen.push(s);
        }
    }
    assert_eq!(seen.len(), 4, "two sessions of two turns");
    for s in &seen {
        let body: Value = serde_json::from_slice(&s.body).expect("a JSON body");
        let messages = body["messages"].as_array().expect("messages");
        let first_user = messages[1]["content"].as_str().expect("user text");
        let session = first_user
            .strip_prefix('u')
            .and_then(|rest| rest.split('t').next())
            .expect("u{session}t1");
        assert_eq!(
            s.header("x-session-id").as_deref(),
            Some(session),
            "every turn carries its session's id"
        );
        if messages.len() == 4 {
            assert_eq!(
                messages[2],
                serde_json::json!({"role": "assistant", "content": " Hello, \"world\"!\n"}),
                "turn 2 sends back the streamed pieces, concatenated byte for byte"
            );
        }
    }
    assert!(
        report
            .point
            .requests
            .iter()
            .all(|r| r.outcome.is_ok() && r.usage_cached_tokens == Some(7)),
        "without prompt_tokens_details, llama.cpp's timings.cache_n is the cache figure: {:?}",
        report.point.requests
    );
    assert_eq!(
        report.sessions.cached_ratio,
        Some(0.7),
        "7 of 10 prompt tokens"
    );
}

fn parse(args: &[&str]) -> Result<Option<SessionSpec>, String> {
    let cli = Cli::try_parse_from(["tokenmeter", "bench"].iter().chain(args))
        .map_err(|e| e.to_string())?;
    let Command::Bench(bench) = cli.command else {
        panic!("bench parses as bench");
    };
    bench.to_session_spec().map_err(|e| e.to_string())
}

#[test]
fn the_command_line_describes_a_session_run() {
    let _alone = crate::alone_blocking();
    let spec = parse(&[
        "--session-rate",
        "0.5",
        "--sessions",
        "6",
        "--system-prompts",
        "2",
        "--system-tokens",
        "300",
        "--turns",
        "uniform:2-9",
        "--user-tokens",
        "50",
        "--output-tokens",
        "20",
        "--think-time",
        "0s",
        "--session-header",
        "x-session-id",
        "--endpoint",
        "completions",
    ])
    .expect("parses")
    .expect("a session run");
    assert_eq!(
        (spec.rate, spec.arrival, spec.stop),
        (0.5, Arrival::Poisson, Stop::Sessions(6)),
        "rate, Poisson arrivals, session count"
    );
    assert_eq!(
        spec.workload,
        SessionWorkload {
            system_prompts: 2,
            system_tokens: Dist::Fixed(300),
            turns: Dist::Uniform { lo: 2, hi: 9 },
            user_tokens: Dist::Fixed(50),
            output_tokens: Dist::Fixed(20),
            think_time: Duration::ZERO,
        },
        "the workload flags"
    );
    assert_eq!(
        spec.session_header.as_deref(),
        Some("x-session-id"),
        "header"
    );
    assert_eq!(spec.endpoint, Endpoint::Completions, "endpoint");
    let defaults = parse(&["--session-rate", "1"])
        .expect("parses")
        .expect("a session run");
    assert_eq!(
        (defaults.stop, defaults.workload),
        (Stop::Sessions(20), SessionWorkload::default()),
        "defaults: 20 sessions of the default shape"
    );
    let timed = parse(&["--session-rate", "1", "--duration", "30s"])
        .expect("parses")
        .expect("a session run");
    assert_eq!(
        timed.stop,
        Stop::Duration(Duration::from_secs(30)),
        "a duration"
    );
    assert!(
        parse(&["--concurrency", "4"]).expect("parses").is_none(),
        "without --session-rate, the single-request bench"
    );
    for (args, why) in [
        (
            &["--turns", "3"][..],
            "a session flag without --session-rate",
        ),
        (
            &["--session-rate", "1", "--concurrency", "2"],
            "with --concurrency",
        ),
        (&["--session-rate", "1", "--rate", "2"], "with --rate"),
        (
            &["--session-rate", "1", "--requests", "2"],
            "with --requests",
        ),
        (
            &["--session-rate", "1", "--sessions", "2", "--duration", "1s"],
            "a count and a duration",
        ),
        (&["--session-rate", "0"], "rate 0"),
        (
            &["--session-rate", "inf", "--duration", "1s"],
            "rate inf with a duration",
        ),
        (
            &["--session-rate", "1", "--session-header", "bad header"],
            "a bad header name",
        ),
    ] {
        assert!(parse(args).is_err(), "{why} is refused: {args:?}");
    }
}
