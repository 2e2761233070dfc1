//! The replica's timing over loopback keeps to its model: TTFT and ITL at batch 1, the stall a
//! long prefill puts into running streams, what chunked prefill trades, and a cached prefix.
//!
//! A step never ends before its modelled time, so every token arrives at least the model's time
//! after its request was sent: those lower bounds are exact. Upper bounds allow each stamp
//! [`LATE`] after its modelled deadline (a loaded machine delays a wake-up or a read, never by a
//! second). The exact schedule is tested on paused time in `src/testbed/sim/engine/tests.rs`;
//! here steps are stretched with `time_scale` so that what a test tells apart (a skipped prefill,
//! a chunked stall) differs by more than `LATE`. Tests here run one at a time.

use crate::sim_support;
use std::time::Duration;

use sim_support::{config, content_events, gaps, ms, read_events, start, words, Conn, LATE};
use tokenmeter::testbed::sim::SimConfig;
use tokio::sync::mpsc;

fn completion(prompt_words: usize, max_tokens: u64) -> String {
    format!(
        r#"{{"model":"m","prompt":"{}","max_tokens":{max_tokens},"stream":true}}"#,
        words(prompt_words)
    )
}

fn scaled_step(model: &SimConfig, tokens: u64, context: u64) -> Duration {
    model.scaled(model.step_time(tokens, context))
}

/// Asserts that `waited` (from sending the request) is at least the modelled `due` (a step never
/// ends early) and at most `LATE` after it.
#[track_caller]
fn assert_on_time(what: &str, waited: Duration, due: Duration) {
    assert!(
        waited >= due,
        "{what}: came {waited:?} after the request, before its modelled {due:?}"
    );
    assert!(
        waited <= due + LATE,
        "{what}: came {waited:?} after the request, more than {LATE:?} after its modelled {due:?}"
    );
}

#[tokio::test]
async fn batch_one_ttft_and_itl_follow_the_roofline() {
    let _alone = crate::alone().await;
    // The same prompt three times: without prefix caching each prefill is the whole prompt
    // (the cached case is `a_cached_prefix_skips_its_prefill` below).
    let model = config("llama-3.1-8b-h100", |c| {
        c.time_scale = 4.0;
        c.enable_prefix_caching = false;
    });
    let sim = start(model.clone()).await;
    let (prompt, n) = (1000u64, 16u64);
    // When each token is due after its request: the prefill step runs the whole prompt, then
    // decode step g (from 1) attends over prompt + g + 1.
    let mut due = vec![scaled_step(&model, prompt, prompt)];
    for g in 1..n {
        let last = due[due.len() - 1];
        due.push(last + scaled_step(&model, 1, prompt + g + 1));
    }
    let (mut ttfts, mut itls) = (Vec::new(), Vec::new());
    for run in 0..3 {
        let mut conn = Conn::open(sim.local_addr()).await;
        let (response, sent) = conn
            .send("POST", "/v1/completions", &completion(prompt as usize, n))
            .await;
        let events = read_events(response.into_body(), |_| {}).await;
        let content = content_events(&events);
        assert_eq!(content.len() as u64, n, "one content chunk per token");
        for (k, (event, due)) in content.iter().zip(&due).enumerate() {
            assert_on_time(&format!("run {run}, token {k}"), event.at - sent, *due);
        }
        ttfts.push(ms(content[0].at - sent));
        itls.extend(gaps(&events).into_iter().map(ms));
    }
    let want_ttft = ms(due[0]);
    let want_itl = ms(due[due.len() - 1] - due[0]) / (n - 1) as f64;
    let ttft = ttfts.iter().sum::<f64>() / ttfts.len() as f64;
    let itl = itls.iter().sum::<f64>() / itls.len() as f64;
    eprintln!(
        "batch 1: TTFT {ttft:.2} ms (model {want_ttft:.2}), ITL {itl:.2} ms (model {want_itl:.2})"
    );
    assert!(
        (186.0..=188.0).contains(&want_ttft) && (25.0..=27.0).contains(&want_itl),
        "the model itself: 8B x4, TTFT {want_ttft:.2} ms, ITL {want_itl:.2} ms"
    );
    sim.shutdown().await;
}

/// What the running streams and a long prompt saw.
struct Stall {
    /// TTFT of the long prompt.
    long_ttft: Duration,
    /// Largest gap between content chunks of the two running streams.
    max_gap: Duration,
    /// Each running stream's time from its request to its last token.
    running: Vec<Duration>,
}

const LONG_PROMPT: u64 = 4000;
const SHORT_PROMPT: u64 = 10;
const RUNNING_TOKENS: u64 = 40;

/// Stretched 8 times, a whole 4000-token prefill step (1.5 s) outlasts a chunked one (0.2 s) by
/// more than `LATE`; the running streams' 35 steps after the trigger last 2.8 s, far longer than
/// the long prompt takes to arrive.
fn stall_config(budget: u64) -> SimConfig {
    config("llama-3.1-8b-h100", |c| {
        c.time_scale = 8.0;
        c.t_fixed = Duration::from_millis(4);
        c.max_num_batched_tokens = budget;
    })
}

/// Two short streams decode; once the first has 5 chunks, a `LONG_PROMPT` prompt arrives.
async fn stall_scenario(model: &SimConfig) -> Stall {
    let sim = start(model.clone()).await;
    let addr = sim.local_addr();
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let mut running = Vec::new();
    for _ in 0..2 {
        let ready_tx = ready_tx.clone();
        running.push(tokio::spawn(async move {
            let mut conn = Conn::open(addr).await;
            let (response, sent) = conn
                .send(
                    "POST",
                    "/v1/completions",
                    &completion(SHORT_PROMPT as usize, RUNNING_TOKENS),
                )
                .await;
            let mut seen = 0;
            let events = read_events(response.into_body(), |event| {
                seen += usize::from(event.content().is_some());
                if seen == 5 {
                    let _ = ready_tx.send(());
                }
            })
            .await;
            (sent, events)
        }));
    }
    // Bounded so that a replica that never streams fails the test instead of hanging it.
    tokio::time::timeout(Duration::from_secs(10), ready_rx.recv())
        .await
        .expect("streams start in time");
    let mut conn = Conn::open(addr).await;
    let (response, sent) = conn
        .send(
            "POST",
            "/v1/completions",
            &completion(LONG_PROMPT as usize, 2),
        )
        .await;
    let long = read_events(response.into_body(), |_| {}).await;
    let long_ttft = content_events(&long)[0].at - sent;
    let mut max_gap = Duration::ZERO;
    let mut totals = Vec::new();
    for task in running {
        let (sent, events) = task.await.expect("stream task");
        let content = content_events(&events);
        assert_eq!(
            content.len() as u64,
            RUNNING_TOKENS,
            "running stream completes"
        );
        totals.push(content[content.len() - 1].at - sent);
        max_gap = gaps(&events).into_iter().fold(max_gap, Duration::max);
    }
    sim.shutdown().await;
    Stall {
        long_ttft,
        max_gap,
        running: totals,
    }
}

/// The model's prefill steps for the long prompt beside the two decodes, with the running
/// streams' contexts at their least (`low`: none) or at their most (both at their last token):
/// a step lasts at least the one and at most the other.
fn model_prefill(model: &SimConfig, low: bool) -> Vec<Duration> {
    let running_context = if low {
        0
    } else {
        2 * (SHORT_PROMPT + RUNNING_TOKENS)
    };
    let chunk = model.max_num_batched_tokens - 2;
    let mut steps = Vec::new();
    let mut done = 0;
    while done < LONG_PROMPT {
        let tokens = chunk.min(LONG_PROMPT - done);
        done += tokens;
        steps.push(scaled_step(model, tokens + 2, done + running_context));
    }
    steps
}

/// Checks one stall run against the model of its budget; returns the model's longest step.
fn check_stall(what: &str, model: &SimConfig, got: &Stall) -> Duration {
    let (low, high) = (model_prefill(model, true), model_prefill(model, false));
    let prefill: Duration = low.iter().sum();
    let longest = *high.iter().max().expect("at least one prefill step");
    // The shortest step there is: one token over no context (the weights are read anyway).
    let floor = scaled_step(model, 1, 0);
    // The long prompt waits for the step under way (a decode of the two) to end.
    let decode = scaled_step(model, 2, 2 * (SHORT_PROMPT + RUNNING_TOKENS));
    eprintln!(
        "{what}: worst gap {:?} (model {longest:?}), long TTFT {:?} (model {prefill:?} + up to \
         {decode:?}), running streams {:?}",
        got.max_gap, got.long_ttft, got.running
    );
    assert!(
        got.long_ttft >= prefill,
        "{what}: the long prompt's first token came {:?} after it was sent, before its \
         prefill steps' {prefill:?}",
        got.long_ttft
    );
    assert!(
        got.long_ttft <= high.iter().sum::<Duration>() + decode + LATE,
        "{what}: the long prompt's TTFT {:?}: more than {LATE:?} late on its prefill steps and \
         the decode step it waited for",
        got.long_ttft
    );
    // Each running stream runs one step per token, and the long prompt's prefill steps are among
    // them: its total holds the stall.
    let stalled = floor * (RUNNING_TOKENS as u32 - low.len() as u32) + prefill;
    for total in &got.running {
        assert!(
            *total >= stalled,
            "{what}: a running stream's {RUNNING_TOKENS} tokens took {total:?}, less than the \
             {stalled:?} of its steps with the long prompt's prefill among them"
        );
    }
    assert!(
        got.max_gap <= longest + LATE,
        "{what}: worst gap {:?}, more than {LATE:?} over the longest step {longest:?}",
        got.max_gap
    );
    longest
}

#[tokio::test]
async fn long_prefill_stalls_running_streams_and_chunking_trades_ttft_for_itl() {
    let _alone = crate::alone().await;
    let whole = stall_config(8192);
    let chunked = stall_config(512);
    let whole_step = check_stall("whole", &whole, &stall_scenario(&whole).await);
    let chunk_step = check_stall("chunked", &chunked, &stall_scenario(&chunked).await);
    // With the bounds above, these make the trade: the chunked streams' worst gap (at most a
    // chunk's step and `LATE`) stays under the whole prefill's step; the chunked prompt's TTFT
    // (at least its chunks' sum) exceeds what the whole prefill takes. (Exact, run against run,
    // on paused time: the engine's tests.)
    let whole_least = model_prefill(&whole, true)[0];
    assert!(
        chunk_step + LATE < whole_least,
        "the model: a chunk's step ({chunk_step:?}) is more than {LATE:?} shorter than the whole \
         prefill's ({whole_least:?})"
    );
    let chunks: Duration = model_prefill(&chunked, true).iter().sum();
    assert!(
        chunks > whole_step,
        "the model: chunking lengthens the prefill ({chunks:?} against {whole_step:?}: each \
         chunk's step reads the weights)"
    );
}

#[tokio::test]
async fn a_cached_prefix_skips_its_prefill() {
    let _alone = crate::alone().await;
    // Stretched 8 times, the cold prefill (1.5 s) outlasts the warm step (53 ms) by more than
    // `LATE`: the warm bound shows the prefill was skipped.
    let model = config("llama-3.1-8b-h100", |c| {
        c.time_scale = 8.0;
        c.enable_prompt_tokens_details = true;
    });
    let sim = start(model.clone()).await;
    let (prompt, n) = (4010u64, 2u64);
    let body = completion(prompt as usize, n).replace(
        r#""stream":true"#,
        r#""stream":true,"stream_options":{"include_usage":true}"#,
    );
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut conn = Conn::open(sim.local_addr()).await;
        let (response, sent) = conn.send("POST", "/v1/completions", &body).await;
        let events = read_events(response.into_body(), |_| {}).await;
        let ttft = content_events(&events)[0].at - sent;
        let usage: serde_json::Value = events
            .iter()
            .rev()
            .filter_map(|e| serde_json::from_str(e.text.strip_prefix("data: ")?.trim_end()).ok())
            .find_map(|json: serde_json::Value| json.get("usage").cloned())
            .expect("a usage chunk");
        runs.push((
            ttft,
            usage["prompt_tokens_details"]["cached_tokens"].as_u64(),
        ));
    }
    // 4010 tokens: 250 whole blocks of 16 are cached, the 10 tokens of the partial last block are
    // computed (with the first request's output, which is cached too, it is still not whole).
    let cold = scaled_step(&model, prompt, prompt);
    let warm = scaled_step(&model, prompt - 4000, prompt);
    eprintln!("cached prefix: TTFT {runs:?}, model cold {cold:?}, warm {warm:?}");
    assert_eq!(runs[0].1, Some(0), "the first request found nothing cached");
    assert_eq!(runs[1].1, Some(4000), "250 whole blocks cached");
    assert!(
        warm + LATE < cold,
        "the model: the warm step ({warm:?}) is more than {LATE:?} shorter than the cold ({cold:?})"
    );
    assert_on_time("cold TTFT (the whole prompt's prefill)", runs[0].0, cold);
    assert_on_time(
        "warm TTFT (10 tokens computed over a 4010-token context)",
        runs[1].0,
        warm,
    );
    let metrics = sim_support::call(sim.local_addr(), "GET", "/metrics", "")
        .await
        .1;
    let counter = |name: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(
        (
            counter("vllm:prefix_cache_queries_total"),
            counter("vllm:prefix_cache_hits_total")
        ),
        (Some(8020.0), Some(4000.0)),
        "vLLM's counters, in tokens"
    );
    sim.shutdown().await;
}
