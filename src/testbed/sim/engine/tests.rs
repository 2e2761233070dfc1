//! The engine's timing model, exactly, on paused time: a step lasts its modelled time, steps run
//! back to back on absolute deadlines, a request that arrives mid-step waits for the next step
//! boundary, and an idle engine starts its next step when a request arrives.
//!
//! The engine is driven through its channels (no sockets), so tokio's paused clock moves only
//! when every task waits, and then straight to the engine's next deadline: what each test
//! stamps is the engine's schedule, not the machine's load. `tests/serial/sim_timing.rs` runs the same
//! scenarios over loopback, with the bounds a loaded machine keeps.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::*;
use crate::testbed::sim::scheduler::Progress;

/// A running engine and what it publishes.
struct Replica {
    engine: EngineHandle,
    metrics: Arc<SimMetrics>,
    /// Kept so the engine runs until the test ends.
    _shutdown: watch::Sender<bool>,
}

impl Replica {
    fn start(config: &SimConfig) -> Replica {
        let metrics = Arc::new(SimMetrics::new(&config.model));
        let (shutdown, stopped) = watch::channel(false);
        let (engine, _task) = start(config.clone(), Arc::clone(&metrics), stopped);
        Replica {
            engine,
            metrics,
            _shutdown: shutdown,
        }
    }

    /// Submits a request of `prompt` arriving now; returns where its progress comes.
    fn submit(
        &self,
        prompt: Arc<[u64]>,
        max_tokens: u64,
        kv_pulled: bool,
    ) -> mpsc::UnboundedReceiver<Progress> {
        let (events, progress) = mpsc::unbounded_channel();
        self.engine
            .submit(Submission {
                prompt,
                max_tokens,
                arrival: Instant::now(),
                events,
                kv_pulled,
            })
            .expect("the engine runs");
        progress
    }

    /// The sample of `series` (no labels but the model's) in the engine's `/metrics`.
    fn sample(&self, series: &str) -> f64 {
        let text = self.metrics.render();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{series}{{")))
            .unwrap_or_else(|| panic!("{series} missing from\n{text}"));
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a number in {line:?}"))
    }
}

/// `tokens` distinct token ids from `first` on (no two test prompts share a block).
fn prompt(first: u64, tokens: u64) -> Arc<[u64]> {
    (first..first + tokens).collect()
}

/// The next progress of one request, stamped when it came.
async fn next(progress: &mut mpsc::UnboundedReceiver<Progress>) -> (Instant, Progress) {
    let p = progress
        .recv()
        .await
        .expect("the engine sends progress until the request finishes");
    (Instant::now(), p)
}

/// Every progress of one request until it finishes, stamped when each came.
async fn follow(mut progress: mpsc::UnboundedReceiver<Progress>) -> Vec<(Instant, Progress)> {
    let mut seen = Vec::new();
    loop {
        let (at, p) = next(&mut progress).await;
        seen.push((at, p));
        if p.finished {
            return seen;
        }
    }
}

/// How long after `origin` (the clock the test began at, the runtime's start) the paused clock
/// has passed `deadline`: tokio's timer wheel counts whole milliseconds from the runtime's start
/// and rounds a deadline up, so a sleep ends on the first millisecond boundary at or after its
/// deadline, never before it.
fn woken(origin: Instant, deadline: Instant) -> Duration {
    let ms = (deadline - origin).as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).expect("a test lasts less than an age"))
}

/// Starts, now, a replica of Llama-3.1-8B on an H100 (steps that are not whole milliseconds, so
/// the rounding is exercised) as `edit` changes it. Returns the clock the test began at, the
/// replica, and how long the engine waits for a step of `tokens` over `context` tokens (the
/// modelled time stretched by `time_scale`).
fn start_llama(
    edit: impl FnOnce(&mut SimConfig),
) -> (Instant, Replica, impl Fn(u64, u64) -> Duration) {
    let origin = Instant::now();
    let mut config = SimConfig::profile("llama-3.1-8b-h100").expect("known profile");
    edit(&mut config);
    let replica = Replica::start(&config);
    let step = move |tokens, context| config.scaled(config.step_time(tokens, context));
    (origin, replica, step)
}

#[tokio::test(start_paused = true)]
async fn the_first_token_takes_the_prefill_step_and_each_next_one_a_decode_step() {
    let (origin, replica, step) = start_llama(|c| {
        c.time_scale = 4.0;
        c.enable_prefix_caching = false;
    });
    let (prompt_tokens, n) = (1000u64, 16u64);
    let mut ttfts = Vec::new();
    for round in 0..2u64 {
        if round == 1 {
            // Scripted idle time (paused: the clock jumps): the next request must start its
            // step when it arrives, not on the stale deadline of the last step, which would
            // give it a first token at once.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let arrival = Instant::now();
        let got = follow(replica.submit(prompt(round * 10_000, prompt_tokens), n, false)).await;
        // The prefill runs the whole prompt; decode step g (from 1) attends over prompt + g + 1.
        let mut deadline = arrival + step(prompt_tokens, prompt_tokens);
        let mut want = vec![woken(origin, deadline)];
        for g in 1..n {
            deadline += step(1, prompt_tokens + g + 1);
            want.push(woken(origin, deadline));
        }
        let stamps: Vec<Duration> = got.iter().map(|(at, _)| *at - origin).collect();
        assert_eq!(
            stamps, want,
            "round {round}: every token at its step's modelled deadline, steps back to back from \
             the arrival (deadlines absolute, so the rounding does not add up)"
        );
        let shape: Vec<(u64, bool, bool)> = got
            .iter()
            .map(|(_, p)| (p.new_tokens, p.first, p.finished))
            .collect();
        let mut want_shape = vec![(1, false, false); n as usize];
        want_shape[0].1 = true;
        want_shape[n as usize - 1].2 = true;
        assert_eq!(
            shape, want_shape,
            "round {round}: one token per step, the first flagged, the last finishing"
        );
        ttfts.push(got[0].0 - arrival);
    }
    assert_eq!(
        ttfts[0],
        woken(origin, origin + step(prompt_tokens, prompt_tokens)),
        "TTFT is the prefill step (187 ms for 1000 tokens, x4), to the timer's millisecond"
    );
    assert_eq!(
        replica.sample("vllm:time_to_first_token_seconds_sum"),
        ttfts[0].as_secs_f64() + ttfts[1].as_secs_f64(),
        "the replica's TTFT metric is what the client waited"
    );
    assert_eq!(
        replica.sample("vllm:inter_token_latency_seconds_count"),
        2.0 * (n - 1) as f64,
        "one ITL per decode step"
    );
}

/// What one stall run showed, in paused time.
struct Stall {
    /// TTFT of the long prompt.
    long_ttft: Duration,
    /// Largest gap between two tokens of the running stream.
    max_gap: Duration,
}

const SHORT: u64 = 10;
const LONG: u64 = 4000;
const RUNNING_TOKENS: u64 = 40;

/// One stream decodes; when it has 5 tokens, a `LONG` prompt arrives. Checks every token of both
/// against the schedule the budget gives, and returns what the two saw.
async fn stall(budget: u64) -> Stall {
    let (origin, replica, step) = start_llama(|c| {
        c.time_scale = 3.0;
        c.t_fixed = Duration::from_millis(4);
        c.max_num_batched_tokens = budget;
        c.enable_prefix_caching = false;
    });
    let mut running = replica.submit(prompt(0, SHORT), RUNNING_TOKENS, false);
    let mut head = Vec::new();
    for _ in 0..5 {
        head.push(next(&mut running).await);
    }
    // At the end of step 5: the engine has planned step 6 (the decode alone) already, so the
    // long prompt joins the queue mid-step and waits for step 7.
    let long_arrival = Instant::now();
    let long = replica.submit(prompt(1_000_000, LONG), 2, false);
    let (tail, long) = tokio::join!(follow(running), follow(long));

    // The schedule. Decode g (from 1) of the running stream attends over SHORT + g + 1; the long
    // prompt's chunks take what the budget leaves beside that decode, and attend over the part
    // prefilled so far.
    let mut deadline = origin + step(SHORT, SHORT);
    let mut want = vec![deadline];
    for g in 1..=5 {
        deadline += step(1, SHORT + g + 1);
        want.push(deadline);
    }
    let mut g = 6;
    let mut done = 0;
    while done < LONG {
        let tokens = (budget - 1).min(LONG - done);
        done += tokens;
        deadline += step(1 + tokens, SHORT + g + 1 + done);
        want.push(deadline);
        g += 1;
    }
    let long_first = deadline;
    // The long prompt's second and last token: its decode (over the prompt, the first token
    // and itself) beside the running one.
    deadline += step(2, SHORT + g + 1 + LONG + 2);
    want.push(deadline);
    g += 1;
    let long_last = deadline;
    while g < RUNNING_TOKENS {
        deadline += step(1, SHORT + g + 1);
        want.push(deadline);
        g += 1;
    }
    let want: Vec<Duration> = want.into_iter().map(|d| woken(origin, d)).collect();
    let stamps: Vec<Duration> = head
        .iter()
        .chain(&tail)
        .map(|(at, _)| *at - origin)
        .collect();
    assert_eq!(
        stamps, want,
        "budget {budget}: the running stream's tokens at the deadlines of the steps it shared \
         with the long prompt"
    );
    let long_stamps: Vec<Duration> = long.iter().map(|(at, _)| *at - origin).collect();
    assert_eq!(
        long_stamps,
        [woken(origin, long_first), woken(origin, long_last)],
        "budget {budget}: the long prompt's first token when its last chunk is done, then one \
         decode step"
    );
    Stall {
        long_ttft: long_stamps[0] - (long_arrival - origin),
        max_gap: stamps
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .expect("40 tokens"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_prefill_stalls_running_streams_and_chunking_trades_ttft_for_itl() {
    let whole = stall(8192).await;
    let chunked = stall(512).await;
    assert!(
        chunked.max_gap * 3 < whole.max_gap,
        "chunking cuts the worst gap: {:?} chunked vs {:?} whole",
        chunked.max_gap,
        whole.max_gap
    );
    assert!(
        chunked.long_ttft > whole.long_ttft,
        "chunking raises the long prompt's TTFT: {:?} chunked vs {:?} whole",
        chunked.long_ttft,
        whole.long_ttft
    );
}

#[tokio::test(start_paused = true)]
async fn a_cached_prefix_is_not_prefilled_again() {
    let (origin, replica, step) = start_llama(|c| c.time_scale = 4.0);
    // 4010 tokens: the first request leaves 250 whole 16-token blocks of its prompt (and the
    // partial 251st, with its output) in the cache.
    let tokens = 4010;
    let cold = follow(replica.submit(prompt(0, tokens), 2, false)).await;
    let arrival = Instant::now();
    let warm = follow(replica.submit(prompt(0, tokens), 2, false)).await;
    assert_eq!(
        (cold[0].1.cached_tokens, warm[0].1.cached_tokens),
        (0, 4000),
        "nothing cached at first, then the 250 whole blocks"
    );
    assert_eq!(
        cold[0].0 - origin,
        woken(origin, origin + step(tokens, tokens)),
        "cold: the whole prompt's prefill step"
    );
    assert_eq!(
        warm[0].0 - origin,
        woken(origin, arrival + step(tokens - 4000, tokens)),
        "warm: one step computing the last 10 tokens over the 4010-token context"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pulled_prompt_costs_one_decode_sized_step() {
    let (origin, replica, step) = start_llama(|c| c.time_scale = 2.0);
    let tokens = 4000;
    let pulled = follow(replica.submit(prompt(0, tokens), 2, true)).await;
    assert_eq!(
        (
            pulled[0].1.first,
            pulled[0].1.cached_tokens,
            pulled[0].1.transferred_tokens
        ),
        (true, tokens - 1, tokens - 1),
        "the first token, every prompt token but the last received"
    );
    assert_eq!(
        pulled[0].0 - origin,
        woken(origin, origin + step(1, tokens)),
        "the first token after one step computing the last prompt token over the whole context"
    );
    assert!(
        step(1, tokens) * 10 < step(tokens, tokens),
        "the model: that step is a small part of the prefill it replaces"
    );
}
