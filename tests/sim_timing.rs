//! The replica's timing over loopback matches its model: TTFT and ITL at batch 1, the stall a
//! long prefill puts into running streams, and what chunked prefill trades.
//!
//! Steps are stretched with `time_scale` so that they last 20-600 ms: wall-clock noise on a
//! slow shared CI machine stays a few percent. Tests here run one at a time.
mod sim_support;

use std::time::Duration;

use sim_support::{config, content_events, gaps, ms, read_events, start, words, Conn};
use tokenmeter::testbed::sim::SimConfig;
use tokio::sync::{mpsc, Mutex};

/// Timing tests must not share the CPU with each other.
static SERIAL: Mutex<()> = Mutex::const_new(());

fn completion(prompt_words: usize, max_tokens: u64) -> String {
    format!(
        r#"{{"model":"m","prompt":"{}","max_tokens":{max_tokens},"stream":true}}"#,
        words(prompt_words)
    )
}

fn scaled_step(model: &SimConfig, tokens: u64, context: u64) -> Duration {
    model.scaled(model.step_time(tokens, context))
}

#[tokio::test]
async fn batch_one_ttft_and_itl_follow_the_roofline() {
    let _serial = SERIAL.lock().await;
    // The same prompt three times: without prefix caching each prefill is the whole prompt
    // (the cached case is `a_cached_prefix_skips_its_prefill` below).
    let model = config("llama-3.1-8b-h100", |c| {
        c.time_scale = 4.0;
        c.enable_prefix_caching = false;
    });
    let sim = start(model.clone()).await;
    let (prompt, n) = (1000u64, 16u64);
    let (mut ttfts, mut itls) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let mut conn = Conn::open(sim.local_addr()).await;
        let (response, sent) = conn
            .send("POST", "/v1/completions", &completion(prompt as usize, n))
            .await;
        let events = read_events(response.into_body(), |_| {}).await;
        let content = content_events(&events);
        assert_eq!(content.len() as u64, n, "one content chunk per token");
        ttfts.push(ms(content[0].at - sent));
        itls.extend(gaps(&events).into_iter().map(ms));
    }
    // The prefill step runs the whole prompt; each decode step attends over prompt + output.
    let want_ttft = ms(scaled_step(&model, prompt, prompt));
    let want_itl = (1..n)
        .map(|g| ms(scaled_step(&model, 1, prompt + g + 1)))
        .sum::<f64>()
        / (n - 1) as f64;
    let ttft = ttfts.iter().sum::<f64>() / ttfts.len() as f64;
    let itl = itls.iter().sum::<f64>() / itls.len() as f64;
    eprintln!(
        "batch 1: TTFT {ttft:.2} ms (model {want_ttft:.2}), ITL {itl:.2} ms (model {want_itl:.2})"
    );
    assert!(
        ttft >= want_ttft - 1.0 && ttft <= want_ttft + 10.0,
        "mean TTFT {ttft:.2} ms, model {want_ttft:.2} ms (samples {ttfts:?})"
    );
    assert!(
        (itl - want_itl).abs() <= 3.0,
        "mean ITL {itl:.2} ms, model {want_itl:.2} ms"
    );
    assert!(
        (186.0..=188.0).contains(&want_ttft) && (25.0..=27.0).contains(&want_itl),
        "the model itself: 8B x4"
    );
    sim.shutdown().await;
}

/// What the running streams and a long prompt saw.
struct Stall {
    /// TTFT of the long prompt.
    long_ttft: f64,
    /// Largest gap between content chunks of the two running streams.
    max_gap: f64,
    /// The model's decode step for the running pair (the wait for the next step boundary).
    decode_step: f64,
}

const LONG_PROMPT: u64 = 4000;
const SHORT_PROMPT: u64 = 10;

fn stall_config(budget: u64) -> SimConfig {
    config("llama-3.1-8b-h100", |c| {
        c.time_scale = 3.0;
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
            let (response, _) = conn
                .send(
                    "POST",
                    "/v1/completions",
                    &completion(SHORT_PROMPT as usize, 40),
                )
                .await;
            let mut seen = 0;
            read_events(response.into_body(), |event| {
                seen += usize::from(event.content().is_some());
                if seen == 5 {
                    let _ = ready_tx.send(());
                }
            })
            .await
        }));
    }
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
    let long_ttft = ms(content_events(&long)[0].at - sent);
    let mut max_gap = 0.0f64;
    for task in running {
        let events = task.await.expect("stream task");
        assert_eq!(
            content_events(&events).len(),
            40,
            "running stream completes"
        );
        max_gap = gaps(&events).into_iter().map(ms).fold(max_gap, f64::max);
    }
    sim.shutdown().await;
    let decode_step = ms(scaled_step(model, 2, 2 * (SHORT_PROMPT + 8)));
    Stall {
        long_ttft,
        max_gap,
        decode_step,
    }
}

/// The model's prefill steps for the long prompt beside two decodes: their total (its TTFT
/// once admitted) and the longest (the running streams' worst gap).
fn model_prefill(model: &SimConfig) -> (f64, f64) {
    let chunk = model.max_num_batched_tokens - 2;
    let (mut total, mut longest, mut done) = (0.0f64, 0.0f64, 0);
    while done < LONG_PROMPT {
        let tokens = chunk.min(LONG_PROMPT - done);
        done += tokens;
        let step = ms(scaled_step(
            model,
            tokens + 2,
            done + 2 * (SHORT_PROMPT + 8),
        ));
        total += step;
        longest = longest.max(step);
    }
    (total, longest)
}

#[tokio::test]
async fn long_prefill_stalls_running_streams_and_chunking_trades_ttft_for_itl() {
    let _serial = SERIAL.lock().await;
    let whole = stall_config(8192);
    let chunked = stall_config(512);
    let (whole_ttft, whole_step) = model_prefill(&whole);
    let (chunked_ttft, chunked_step) = model_prefill(&chunked);

    let got = stall_scenario(&whole).await;
    eprintln!(
        "whole: stall {:.1} (model {whole_step:.1}), long TTFT {:.1} (model {whole_ttft:.1})",
        got.max_gap, got.long_ttft
    );
    assert!(
        (got.max_gap - whole_step).abs() <= 15.0,
        "stall {:.1} ms, model {whole_step:.1} ms",
        got.max_gap
    );
    assert!(
        got.long_ttft >= whole_ttft - 2.0 && got.long_ttft <= whole_ttft + got.decode_step + 15.0,
        "long TTFT {:.1} ms, model {whole_ttft:.1} ms + up to one decode step ({:.1} ms)",
        got.long_ttft,
        got.decode_step
    );
    let whole_got = got;

    let got = stall_scenario(&chunked).await;
    eprintln!("chunked: max gap {:.1} (model {chunked_step:.1}), long TTFT {:.1} (model {chunked_ttft:.1})", got.max_gap, got.long_ttft);
    assert!(
        (got.max_gap - chunked_step).abs() <= 15.0,
        "chunked max gap {:.1} ms, model {chunked_step:.1} ms",
        got.max_gap
    );
    assert!(
        got.long_ttft >= chunked_ttft - 2.0
            && got.long_ttft <= chunked_ttft + got.decode_step + 15.0,
        "chunked long TTFT {:.1} ms, model {chunked_ttft:.1} ms",
        got.long_ttft
    );
    assert!(
        got.long_ttft > whole_got.long_ttft,
        "chunking raises the long prompt's TTFT ({:.1} vs {:.1} ms)",
        got.long_ttft,
        whole_got.long_ttft
    );
    assert!(
        got.max_gap * 3.0 < whole_got.max_gap,
        "chunking cuts the worst ITL ({:.1} vs {:.1} ms)",
        got.max_gap,
        whole_got.max_gap
    );
}

#[tokio::test]
async fn a_cached_prefix_skips_its_prefill() {
    let _serial = SERIAL.lock().await;
    let model = config("llama-3.1-8b-h100", |c| {
        c.time_scale = 4.0;
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
        let ttft = ms(content_events(&events)[0].at - sent);
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
    let cold = ms(scaled_step(&model, prompt, prompt));
    let warm = ms(scaled_step(&model, prompt - 4000, prompt));
    eprintln!("cached prefix: TTFT {runs:?}, model cold {cold:.1} ms, warm {warm:.1} ms");
    assert_eq!(runs[0].1, Some(0), "the first request found nothing cached");
    assert_eq!(runs[1].1, Some(4000), "250 whole blocks cached");
    assert!(
        runs[0].0 >= cold - 1.0 && runs[0].0 <= cold + 10.0,
        "cold TTFT {:.1} ms, model {cold:.1} ms",
        runs[0].0
    );
    assert!(
        runs[1].0 >= warm - 1.0 && runs[1].0 <= warm + 10.0,
        "warm TTFT {:.1} ms, model {warm:.1} ms (10 tokens computed over a 4010-token context)",
        runs[1].0
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
