//! `bench` against a controlled backend on 127.0.0.1: a tiny hyper server that answers
//! vLLM-shaped streams on a script (first token after X ms, then a token every Y ms), so the
//! client's timings, counts and error kinds can be checked against known truth.
//!
//! Timings are checked against what happened, not against an idle machine: the script's delays
//! are exact lower bounds (a sleep never fires early), and every figure lies in the window the
//! backend's stamps and the test's own stopwatch allow ([`check_timeline`]), which a loaded
//! machine widens by exactly the delays it caused. The client's arithmetic on its stamps is
//! tested exactly in `src/testbed/bench/client/tests.rs`.

use crate::support;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use support::ports::Refusing;
use tokenmeter::testbed::bench::{
    run_point, Arrival, ArrivalProcess, Dist, Ending, Endpoint, LoadMode, LoadSpec, PointReport,
    RequestRecord, Slo, Stop, Workload,
};

/// The client adds its gaps up in `f64`, which rounds; a microsecond hides no real error.
const FLOAT: f64 = 1e-6;

#[derive(Clone, Debug)]
struct Script {
    status: u16,
    /// Delay before the first content chunk (the role chunk goes out at once).
    first: Duration,
    /// Delay between content chunks.
    gap: Duration,
    tokens_per_chunk: u64,
    usage: bool,
    done: bool,
    /// Send an error event instead of this content chunk.
    error_after: Option<u64>,
    /// Hold every response head until this many requests are in flight at once (once reached,
    /// the rest pass): the most in flight is then what the client allows, however slowly a
    /// loaded machine sets up its connections.
    hold_until: Option<usize>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            status: 200,
            first: Duration::from_millis(5),
            gap: Duration::from_millis(5),
            tokens_per_chunk: 1,
            usage: true,
            done: true,
            error_after: None,
            hold_until: None,
        }
    }
}

/// What the backend did for one stream, on the test process's clock: when it had read the
/// request, and when it began writing each content chunk and the `[DONE]`.
#[derive(Clone, Debug)]
struct Stamps {
    read: Instant,
    tokens: Vec<Instant>,
    done: Option<Instant>,
}

#[derive(Default)]
struct Backend {
    script: Mutex<Option<Script>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    bodies: Mutex<Vec<(String, Value)>>,
    /// One entry per streamed response, filled as it is written (so it is whole once the client
    /// has read the stream).
    streams: Mutex<Vec<Arc<Mutex<Stamps>>>>,
    /// Opens once `Script::hold_until` requests are in flight.
    gate: watch::Sender<bool>,
}

impl Backend {
    fn script(&self) -> Script {
        self.script
            .lock()
            .expect("lock")
            .clone()
            .unwrap_or_default()
    }
    fn bodies(&self) -> Vec<(String, Value)> {
        self.bodies.lock().expect("lock").clone()
    }
    fn streams(&self) -> Vec<Stamps> {
        let streams = self.streams.lock().expect("lock");
        streams
            .iter()
            .map(|s| s.lock().expect("lock").clone())
            .collect()
    }
}

/// A response body fed by a channel, so the backend controls when each chunk leaves.
struct ChanBody(mpsc::Receiver<Bytes>);

impl Body for ChanBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn chunk(completions: bool, text: &str) -> String {
    let choice = if completions {
        json!({"index": 0, "text": text, "finish_reason": null})
    } else {
        json!({"index": 0, "delta": {"content": text}, "finish_reason": null})
    };
    let chunk = json!({"id": "x", "object": "chunk", "model": "sim-model", "choices": [choice]});
    format!("data: {chunk}\n\n")
}

async fn handle(
    be: Arc<Backend>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<ChanBody>, Infallible> {
    let path = req.uri().path().to_string();
    let (tx, rx) = mpsc::channel(64);
    if path == "/v1/models" {
        let models = r#"{"object":"list","data":[{"id":"sim-model"},{"id":"other"}]}"#;
        tx.try_send(Bytes::from(models)).expect("channel has room");
        return Ok(Response::new(ChanBody(rx)));
    }
    let body = req
        .into_body()
        .collect()
        .await
        .expect("request body")
        .to_bytes();
    let read = Instant::now();
    let body: Value = serde_json::from_slice(&body).expect("request is JSON");
    let n = body["max_tokens"].as_u64().expect("max_tokens");
    be.bodies.lock().expect("lock").push((path.clone(), body));
    let now = be.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    be.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let s = be.script();
    if let Some(hold) = s.hold_until {
        if now >= hold {
            be.gate.send_replace(true);
        }
        // Bounded so that a client that never gets there fails the test's count instead of
        // hanging it.
        let mut open = be.gate.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(30), open.wait_for(|open| *open)).await;
    }
    let completions = path == "/v1/completions";
    let status = s.status;
    let stamps = Arc::new(Mutex::new(Stamps {
        read,
        tokens: Vec::new(),
        done: None,
    }));
    if status == 200 {
        be.streams.lock().expect("lock").push(Arc::clone(&stamps));
    }
    tokio::spawn(async move {
        if s.status != 200 {
            let _ = tx
                .send(Bytes::from(r#"{"error":{"message":"overloaded"}}"#))
                .await;
        } else {
            if !completions {
                let role = r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
                let _ = tx.send(Bytes::from(format!("data: {role}\n\n"))).await;
            }
            let chunks = n.div_ceil(s.tokens_per_chunk);
            for i in 0..chunks {
                tokio::time::sleep(if i == 0 { s.first } else { s.gap }).await;
                if s.error_after == Some(i) {
                    let err = "data: {\"error\":{\"message\":\"engine died\"}}\n\n";
                    let _ = tx.send(Bytes::from(err)).await;
                    break;
                }
                let text = "tok ".repeat(s.tokens_per_chunk as usize);
                stamps.lock().expect("lock").tokens.push(Instant::now());
                let _ = tx.send(Bytes::from(chunk(completions, &text))).await;
            }
            if s.usage {
                let usage =
                    json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}});
                let _ = tx.send(Bytes::from(format!("data: {usage}\n\n"))).await;
            }
            if s.done {
                stamps.lock().expect("lock").done = Some(Instant::now());
                let _ = tx.send(Bytes::from("data: [DONE]\n\n")).await;
            }
        }
        be.in_flight.fetch_sub(1, Ordering::SeqCst);
    });
    let resp = Response::builder()
        .status(status)
        .header("content-type", "text/event-stream")
        .body(ChanBody(rx))
        .expect("response");
    Ok(resp)
}

async fn backend(script: Script) -> (SocketAddr, Arc<Backend>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let be = Arc::new(Backend::default());
    *be.script.lock().expect("lock") = Some(script);
    let be2 = Arc::clone(&be);
    // Ends with the test's runtime.
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let be = Arc::clone(&be2);
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(Arc::clone(&be), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, be)
}

fn spec(addr: SocketAddr, prompt: u32, output: u32, requests: u64) -> LoadSpec {
    let mut s = LoadSpec::new(format!("http://{addr}"));
    s.workload = Workload::single(Dist::Fixed(prompt), Dist::Fixed(output));
    s.stop = Stop::Requests(requests);
    s.request_timeout = Duration::from_secs(10);
    s
}

/// One request of `output` tokens against `script`; also how long `run_point` took, by the
/// test's clock.
async fn one(script: Script, output: u32) -> (PointReport, Arc<Backend>, Duration) {
    let (addr, be) = backend(script).await;
    let called = Instant::now();
    let report = run_point(&spec(addr, 3, output, 1))
        .await
        .expect("point runs");
    (report, be, called.elapsed())
}

/// Bounds a record's figures by what took place. The client received token k no earlier than
/// the backend began writing it, and its clock started (t0) no later than the backend had read
/// the request: its time to token k is at least the backend's time from reading to writing it.
/// It received every token before its stream ended (E2E), and the whole request lies within the
/// test's call of `run_point` (`run`). Tight on an idle machine; under load each window widens by
/// exactly the delays that happened, so this holds there too.
fn check_timeline(r: &RequestRecord, b: &Stamps, run: Duration) {
    let ttft = r.ttft_s.expect("a first token");
    let mut to_token = vec![ttft];
    for gap in &r.itl_s {
        to_token.push(to_token[to_token.len() - 1] + gap);
    }
    assert_eq!(
        to_token.len(),
        b.tokens.len(),
        "one token event per content chunk the backend wrote"
    );
    for (k, (got, wrote)) in to_token.iter().zip(&b.tokens).enumerate() {
        let low = (*wrote - b.read).as_secs_f64();
        assert!(
            *got >= low - FLOAT,
            "token {k}: the client had it {got} s after it started, but the backend began \
             writing it only {low} s after reading the request"
        );
        assert!(
            *got <= r.e2e_s + FLOAT,
            "token {k}: the client had it {got} s after it started, after its stream ended ({} s)",
            r.e2e_s
        );
    }
    let done = b.done.expect("the backend wrote [DONE]");
    let low = (done - b.read).as_secs_f64();
    assert!(
        r.e2e_s >= low - FLOAT,
        "E2E {} s, but the backend wrote [DONE] only {low} s after reading the request",
        r.e2e_s
    );
    assert!(
        r.e2e_s <= run.as_secs_f64() + FLOAT,
        "E2E {} s, longer than the whole run_point call ({run:?})",
        r.e2e_s
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_times_ttft_itl_tpot_e2e_against_scripted_backend() {
    let _alone = crate::alone().await;
    let script = Script {
        first: Duration::from_millis(150),
        gap: Duration::from_millis(50),
        ..Script::default()
    };
    let (report, be, run) = one(script, 5).await;
    let r = &report.requests[0];
    assert_eq!(r.outcome, Ending::Ok, "request succeeds: {:?}", r.error);
    let ttft = r.ttft_s.expect("ttft");
    assert!(
        ttft >= 0.150,
        "TTFT {ttft} s, at least the scripted 150 ms (the early role chunk is not a token)"
    );
    assert_eq!(r.itl_s.len(), 4, "5 token events give 4 gaps");
    let streams = be.streams();
    assert_eq!(streams.len(), 1, "one stream served");
    check_timeline(r, &streams[0], run);
    let tpot = r.tpot_s.expect("tpot");
    let span: f64 = r.itl_s.iter().sum();
    assert!(
        (tpot * 4.0 - span).abs() < FLOAT,
        "TPOT {tpot} s: the first-to-last span ({span} s, the gaps' sum) over 5 - 1 tokens"
    );
    assert!(
        r.e2e_s >= 0.350,
        "E2E {} s, at least the scripted 150 + 4 x 50 ms",
        r.e2e_s
    );
    assert_eq!(
        (r.token_events, r.output_tokens),
        (5, 5),
        "5 events, 5 tokens"
    );
    assert_eq!(r.usage_prompt_tokens, Some(3), "prompt tokens from usage");
    assert_eq!(report.model, "sim-model", "model from GET /v1/models");
    let (path, body) = &be.bodies()[0];
    assert_eq!(path, "/v1/chat/completions", "chat endpoint");
    assert_eq!(body["model"], "sim-model", "the resolved model is sent");
    assert_eq!(body["stream"], true, "streaming");
    assert_eq!(
        body["ignore_eos"], true,
        "ignore_eos fixes the output length"
    );
    assert_eq!(body["max_tokens"], 5, "max_tokens from the workload");
    assert_eq!(
        body["stream_options"]["include_usage"], true,
        "usage always requested"
    );
    let prompt = body["messages"][0]["content"].as_str().expect("content");
    assert_eq!(
        prompt.split_whitespace().count(),
        3,
        "prompt of 3 words: {prompt:?}"
    );
    let all = report.all().expect("all row");
    assert_eq!(
        (all.requests, all.ok, all.errors),
        (1, 1, 0),
        "one good request"
    );
    assert_eq!(all.itl.count, 4, "ITL pooled");
    assert_eq!(all.slo_met, 0, "TPOT 50 ms misses the 35 ms SLO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_counts_tokens_from_usage_not_chunks() {
    let _alone = crate::alone().await;
    let script = Script {
        tokens_per_chunk: 2,
        gap: Duration::from_millis(20),
        ..Script::default()
    };
    let (report, be, run) = one(script, 10).await;
    let r = &report.requests[0];
    assert_eq!(r.outcome, Ending::Ok, "ok: {:?}", r.error);
    assert_eq!(r.token_events, 5, "5 chunks of 2 tokens");
    assert_eq!(r.output_tokens, 10, "N_out from usage.completion_tokens");
    check_timeline(r, &be.streams()[0], run);
    let tpot = r.tpot_s.expect("tpot");
    let span: f64 = r.itl_s.iter().sum();
    assert!(
        (tpot * 9.0 - span).abs() < FLOAT,
        "TPOT {tpot} s: the first-to-last span ({span} s over 4 gaps of 20 ms or more) / 9, \
         N_out - 1 by usage, not by chunks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_counts_tokens_from_events_without_usage() {
    let _alone = crate::alone().await;
    for endpoint in [Endpoint::Chat, Endpoint::Completions] {
        let script = Script {
            usage: false,
            ..Script::default()
        };
        let (addr, be) = backend(script).await;
        let mut s = spec(addr, 4, 6, 1);
        s.endpoint = endpoint;
        s.model = Some("m".into());
        let report = run_point(&s).await.expect("point runs");
        let r = &report.requests[0];
        assert_eq!(r.outcome, Ending::Ok, "{endpoint:?}: ok: {:?}", r.error);
        assert_eq!(
            (r.token_events, r.output_tokens),
            (6, 6),
            "{endpoint:?}: N_out = token events"
        );
        assert_eq!(
            r.usage_completion_tokens, None,
            "{endpoint:?}: no usage seen"
        );
        let (path, body) = &be.bodies()[0];
        assert_eq!(path, endpoint.path(), "{endpoint:?}: path");
        assert_eq!(body["model"], "m", "{endpoint:?}: explicit model is sent");
        if endpoint == Endpoint::Completions {
            let prompt = body["prompt"].as_str().expect("completions prompt");
            assert_eq!(
                prompt.split_whitespace().count(),
                4,
                "completions prompt of 4 words"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_classifies_failures() {
    let _alone = crate::alone().await;
    let script = Script {
        error_after: Some(2),
        ..Script::default()
    };
    let (report, _, _) = one(script, 5).await;
    let r = &report.requests[0];
    assert_eq!(
        r.outcome,
        Ending::ErrorEvent,
        "an error event after a 200 is an error"
    );
    assert_eq!(
        r.error.as_deref(),
        Some("engine died"),
        "its message is kept"
    );
    assert_eq!(r.token_events, 2, "tokens before the error are counted");
    let all = report.all().expect("all");
    assert_eq!((all.ok, all.errors), (0, 1), "counted as an error");
    assert_eq!(all.error_kinds.get("error_event"), Some(&1), "by kind");

    let script = Script {
        status: 503,
        ..Script::default()
    };
    let (report, _, _) = one(script, 5).await;
    let r = &report.requests[0];
    assert_eq!(
        (r.outcome, r.status),
        (Ending::Http, Some(503)),
        "non-2xx is an http error"
    );
    let msg = r.error.as_deref().unwrap_or("");
    assert!(
        msg.contains("503") && msg.contains("overloaded"),
        "status and body kept: {msg:?}"
    );

    let script = Script {
        done: false,
        ..Script::default()
    };
    let (report, _, _) = one(script, 3).await;
    assert_eq!(
        report.requests[0].outcome,
        Ending::Incomplete,
        "no [DONE] is incomplete"
    );

    let script = Script {
        first: Duration::from_secs(5),
        ..Script::default()
    };
    let (addr, _) = backend(script).await;
    let mut s = spec(addr, 3, 3, 1);
    s.request_timeout = Duration::from_millis(200);
    let report = run_point(&s).await.expect("runs");
    let r = &report.requests[0];
    assert_eq!(r.outcome, Ending::Timeout, "a stalled stream times out");
    assert!(
        r.e2e_s >= 0.2,
        "E2E runs to the 200 ms timeout (a timer never fires early), got {}",
        r.e2e_s
    );
    // The upper bound is the property: the request ends at its timeout, not with the stream,
    // whose first token is due 5 s in. A loaded machine delays a timer by milliseconds, not by
    // the 4.8 s between the two.
    assert!(
        r.e2e_s < 5.0,
        "E2E stops at the timeout, before the stalled stream's first token: {}",
        r.e2e_s
    );

    // Held bound and not listening for the test's duration: every connection is refused.
    let refusing = Refusing::new();
    let mut s = spec(refusing.addr(), 3, 3, 2);
    s.model = Some("m".into());
    let report = run_point(&s).await.expect("runs");
    assert!(
        report
            .requests
            .iter()
            .all(|r| r.outcome == Ending::Transport),
        "connection refused is a transport error: {:?}",
        report.requests
    );
    let all = report.all().expect("all");
    assert_eq!(all.error_kinds.get("transport"), Some(&2), "both counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_never_exceeds_concurrency() {
    let _alone = crate::alone().await;
    let script = Script {
        first: Duration::from_millis(20),
        gap: Duration::from_millis(20),
        hold_until: Some(4),
        ..Script::default()
    };
    let (addr, be) = backend(script).await;
    let mut s = spec(addr, 8, 3, 24);
    s.mode = LoadMode::Closed { concurrency: 4 };
    let report = run_point(&s).await.expect("runs");
    let max = be.max_in_flight.load(Ordering::SeqCst);
    assert_eq!(
        max, 4,
        "the backend saw at most 4 in flight, and (holding the first answers until then) 4"
    );
    assert_eq!(report.requests.len(), 24, "exactly the requested count");
    let indexes: Vec<u64> = report.requests.iter().map(|r| r.index).collect();
    assert_eq!(
        indexes,
        (0..24).collect::<Vec<_>>(),
        "each request index once, in order"
    );
    assert!(
        report.requests.iter().all(|r| r.outcome == Ending::Ok),
        "all succeed"
    );
    assert_eq!(be.bodies().len(), 24, "the backend saw 24 requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_sends_the_count_with_class_breakdown() {
    let _alone = crate::alone().await;
    let (addr, be) = backend(Script::default()).await;
    let mut s = spec(addr, 1, 1, 30);
    s.workload = "short:1:prompt=uniform:2-5:output=fixed:2;long:1:prompt=fixed:40:output=fixed:4"
        .parse()
        .expect("workload parses");
    s.mode = LoadMode::Open {
        rate: 300.0,
        arrival: Arrival::Constant,
    };
    s.seed = 11;
    let report = run_point(&s).await.expect("runs");
    let names: Vec<&str> = report.classes.iter().map(|c| c.class.as_str()).collect();
    assert_eq!(
        names,
        ["all", "short", "long"],
        "all first, then classes in order"
    );
    let all = report.all().expect("all");
    assert_eq!((all.requests, all.ok), (30, 30), "30 arrivals, all served");
    let short = report.class("short").expect("short");
    let long = report.class("long").expect("long");
    let drawn = |class: usize| {
        (0..30)
            .filter(|&i| s.workload.sample_request(11, i).class == class)
            .count() as u64
    };
    assert!(
        drawn(0) > 0 && drawn(1) > 0,
        "the seed draws both classes: {} short, {} long",
        drawn(0),
        drawn(1)
    );
    assert_eq!(
        (short.requests, long.requests),
        (drawn(0), drawn(1)),
        "each request counted in the class its seeded draw names"
    );
    assert_eq!(
        short.output_tokens_total,
        2 * short.ok,
        "short outputs are 2 tokens"
    );
    assert_eq!(
        long.output_tokens_total,
        4 * long.ok,
        "long outputs are 4 tokens"
    );
    for r in &report.requests {
        let want = s.workload.sample_request(11, r.index);
        assert_eq!(
            r.prompt_words, want.prompt_tokens,
            "request {} drew its seeded length",
            r.index
        );
    }
    let mut sent: Vec<usize> = be
        .bodies()
        .iter()
        .map(|(_, b)| {
            let content = b["messages"][0]["content"].as_str().expect("content");
            content.split_whitespace().count()
        })
        .collect();
    let mut planned: Vec<usize> = report
        .requests
        .iter()
        .map(|r| r.prompt_words as usize)
        .collect();
    sent.sort_unstable();
    planned.sort_unstable();
    assert_eq!(
        sent, planned,
        "the backend received prompts of the planned word counts"
    );
    // Arrivals sleep until their place on the schedule, which never ends early: each request
    // starts no earlier than its arrival (the report is in index order).
    let mut arrivals = ArrivalProcess::new(Arrival::Constant, 300.0, 11).expect("a process");
    let mut due = Duration::ZERO;
    for r in &report.requests {
        assert!(
            r.start_s >= due.as_secs_f64(),
            "constant arrivals: request {} started at {} s, before its arrival at {due:?} \
             (gaps of 3.3 ms)",
            r.index,
            r.start_s
        );
        due += arrivals.next_gap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_stop_ends_the_point() {
    let _alone = crate::alone().await;
    let script = Script {
        first: Duration::from_millis(20),
        gap: Duration::from_millis(10),
        ..Script::default()
    };
    let (addr, _) = backend(script).await;
    let mut s = spec(addr, 2, 2, 1);
    s.mode = LoadMode::Closed { concurrency: 2 };
    s.stop = Stop::Duration(Duration::from_millis(300));
    let report = run_point(&s).await.expect("runs");
    let n = report.requests.len();
    // At most: a request lasts at least the scripted 20 + 10 ms and a worker sends its next one
    // only when it ended, so each of the 2 starts at most 10 in 300 ms. At least: each worker
    // starts one (its first deadline check would have to come 300 ms late for it not to).
    assert!(
        (2..=20).contains(&n),
        "2 workers x 300 ms / 30 ms requests or less, one each at least, got {n}"
    );
    assert!(
        report.requests.iter().all(|r| r.outcome == Ending::Ok),
        "every request started ran to its end: {:?}",
        report.requests
    );
    assert!(
        report.wall_time_s >= 0.3,
        "runs at least the duration: {}",
        report.wall_time_s
    );
    assert!(
        report.requests.iter().all(|r| r.start_s < 0.3),
        "no request starts after the deadline"
    );
    let last_end = report
        .requests
        .iter()
        .map(|r| r.start_s + r.e2e_s)
        .fold(0.0, f64::max);
    assert!(
        report.wall_time_s >= last_end - FLOAT,
        "the point ends after its last request: {} s, last end {last_end} s",
        report.wall_time_s
    );
    // Then only finishes in-flight requests: after the last one ends, joining the workers takes
    // microseconds. A second is generous on a loaded machine, and far below the 10 s request
    // timeout that waiting for anything else would show.
    assert!(
        report.wall_time_s <= last_end + 1.0,
        "the point ends with its last request: {} s, last end {last_end} s",
        report.wall_time_s
    );
}

/// Hundreds of users at once: one task per user, one pooled client. 400 keeps the test under
/// a 1024 open-file limit (each user holds a client and a server socket);
/// `BENCH_SCALE_USERS=2000` checks more by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_scales_to_hundreds_of_users() {
    let _alone = crate::alone().await;
    let users: usize = std::env::var("BENCH_SCALE_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let script = Script {
        first: Duration::from_millis(50),
        gap: Duration::from_millis(10),
        hold_until: Some(users),
        ..Script::default()
    };
    let (addr, be) = backend(script).await;
    let mut s = spec(addr, 4, 4, 2 * users as u64);
    s.mode = LoadMode::Closed { concurrency: users };
    s.model = Some("m".into());
    let report = run_point(&s).await.expect("runs");
    let all = report.all().expect("all");
    assert_eq!(
        (all.requests, all.ok),
        (2 * users as u64, 2 * users as u64),
        "all served"
    );
    // The backend held the first answers until every user was in flight: exactly `users` rules
    // out both a hidden per-host limit or serialisation (fewer) and an overshoot (more).
    let max = be.max_in_flight.load(Ordering::SeqCst);
    assert_eq!(
        max, users,
        "all {users} users in flight together, never more"
    );
    eprintln!(
        "{users} users: max in flight {max}\n{}",
        report.render_table()
    );
}

/// A gap target judges each request's largest gap on the client's clock: 200 ms gaps miss a 30 ms
/// target and meet a 5 s one (three gaps span at least 600 ms from the first token the backend
/// wrote, so the largest is over 30 ms unless the client saw that token half a second late), while vLLM's goodput (TTFT and
/// TPOT alone, generous here) counts every request either way; the table shows the gap column and
/// vLLM's goodput only when a gap target is set.
#[tokio::test]
async fn a_gap_target_judges_the_largest_gap_and_shows_in_the_table() {
    let _alone = crate::alone().await;
    let script = Script {
        first: Duration::from_millis(20),
        gap: Duration::from_millis(200),
        ..Script::default()
    };
    let (addr, _be) = backend(script).await;
    let judged = |max_gap: Option<u64>| {
        let mut s = spec(addr, 3, 4, 2);
        s.slo = Slo {
            ttft: Duration::from_secs(5),
            tpot: Duration::from_secs(5),
            max_gap: max_gap.map(Duration::from_millis),
        };
        s
    };
    let tight = run_point(&judged(Some(30))).await.expect("runs");
    let all = tight.all().expect("all");
    assert_eq!((all.ok, all.slo_met), (2, 0), "200 ms gaps miss 30 ms");
    assert!(
        all.goodput_ttft_tpot.is_some_and(|g| g > 0.0),
        "vLLM's goodput counts both: {all:?}"
    );
    assert_eq!(all.max_gap.count, 2, "each request's largest gap");
    assert!(
        all.max_gap.min > 0.030,
        "both over the target: {:?}",
        all.max_gap
    );
    let table = tight.render_table();
    assert!(table.contains("max gap p99/max ms"), "{table}");
    assert!(
        table.contains("TTFT and TPOT alone (vLLM's): all "),
        "{table}"
    );

    let loose = run_point(&judged(Some(5_000))).await.expect("runs");
    assert_eq!(loose.all().expect("all").slo_met, 2, "200 ms gaps meet 5 s");
    let unset = run_point(&judged(None)).await.expect("runs");
    let all = unset.all().expect("all");
    assert_eq!((all.slo_met, all.goodput_ttft_tpot), (2, None));
    let table = unset.render_table();
    assert!(
        !table.contains("max gap"),
        "no gap target, no column: {table}"
    );
}
