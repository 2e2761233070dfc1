//! The replica over loopback: a client that goes away frees its slot; `/metrics` counts what
//! happened under vLLM's names; shutdown ends open streams.

use crate::sim_support;
use std::time::Duration;

use http_body_util::BodyExt;
use sim_support::{call, config, metric, read_events, start, wait_for_metric, Conn};
use tokenmeter::testbed::sim::metrics::{ITL_BUCKETS, REQUEST_BUCKETS, TTFT_BUCKETS};

const RUNNING: &str = r#"vllm:num_requests_running{model_name="sim-fast"}"#;
const KV: &str = r#"vllm:kv_cache_usage_perc{model_name="sim-fast"}"#;

#[tokio::test]
async fn client_disconnect_frees_the_slot() {
    // One slot, so the next request can only run if the abandoned one was aborted.
    let model = config("fast", |c| c.max_num_seqs = 1);
    let sim = start(model.clone()).await;
    let addr = sim.local_addr();
    let mut conn = Conn::open(addr).await;
    let (response, _) = conn
        .send(
            "POST",
            "/v1/completions",
            r#"{"prompt":"x","max_tokens":100000,"stream":true}"#,
        )
        .await;
    assert_eq!(response.status(), 200, "stream accepted");
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("no error");
    assert!(first.is_data(), "the stream has started");
    assert_eq!(metric(addr, RUNNING).await, 1.0, "one request running");
    assert_eq!(
        metric(addr, KV).await,
        100_001.0 / model.kv_capacity_tokens as f64,
        "it holds KV for its 1 prompt token and 100000 output tokens"
    );
    drop(body);
    conn.close();
    assert_eq!(
        wait_for_metric(addr, RUNNING, 0.0).await,
        0.0,
        "the aborted request left the batch"
    );
    assert_eq!(metric(addr, KV).await, 0.0, "its KV is free");
    let (status, text) = call(
        addr,
        "POST",
        "/v1/completions",
        r#"{"prompt":"x","max_tokens":3}"#,
    )
    .await;
    assert_eq!(
        status, 200,
        "the freed slot serves the next request: {text}"
    );
    assert_eq!(
        metric(
            addr,
            r#"vllm:request_success_total{model_name="sim-fast",finished_reason="length"}"#
        )
        .await,
        1.0,
        "only the finished request counts as a success"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn metrics_use_vllm_names_buckets_and_counts() {
    let sim = start(config("fast", |_| {})).await;
    let addr = sim.local_addr();
    for (prompt, max_tokens) in [("a b c", 4), ("a b c d e f g", 6)] {
        let mut conn = Conn::open(addr).await;
        let body = format!(r#"{{"prompt":"{prompt}","max_tokens":{max_tokens},"stream":true}}"#);
        let (response, _) = conn.send("POST", "/v1/completions", &body).await;
        read_events(response.into_body(), |_| {}).await;
    }
    let (_, text) = call(addr, "GET", "/metrics", "").await;
    let label = r#"model_name="sim-fast""#;
    let samples = [
        (format!("vllm:num_requests_running{{{label}}}"), 0.0),
        (format!("vllm:num_requests_waiting{{{label}}}"), 0.0),
        (format!("vllm:kv_cache_usage_perc{{{label}}}"), 0.0),
        (format!("vllm:prompt_tokens_total{{{label}}}"), 10.0),
        (format!("vllm:generation_tokens_total{{{label}}}"), 10.0),
        (
            format!("vllm:request_success_total{{{label},finished_reason=\"length\"}}"),
            2.0,
        ),
        (
            format!("vllm:time_to_first_token_seconds_count{{{label}}}"),
            2.0,
        ),
        // One gap per step after the first token: 3 + 5.
        (
            format!("vllm:inter_token_latency_seconds_count{{{label}}}"),
            8.0,
        ),
        (
            format!("vllm:e2e_request_latency_seconds_count{{{label}}}"),
            2.0,
        ),
        (
            format!("vllm:request_queue_time_seconds_count{{{label}}}"),
            2.0,
        ),
    ];
    for (series, want) in samples {
        assert_eq!(metric(addr, &series).await, want, "{series}");
    }
    let families: [(&str, &[f64]); 4] = [
        ("vllm:time_to_first_token_seconds", &TTFT_BUCKETS),
        ("vllm:inter_token_latency_seconds", &ITL_BUCKETS),
        ("vllm:e2e_request_latency_seconds", &REQUEST_BUCKETS),
        ("vllm:request_queue_time_seconds", &REQUEST_BUCKETS),
    ];
    for (name, edges) in families {
        assert!(
            text.contains(&format!("# TYPE {name} histogram\n")),
            "{name} is a histogram"
        );
        let prefix = format!("{name}_bucket{{{label},le=\"");
        let got: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix)?.split('"').next())
            .collect();
        let mut want: Vec<String> = edges.iter().map(|e| format!("{e:?}")).collect();
        want.push("+Inf".to_owned());
        assert_eq!(got, want, "{name} has the REFERENCE §3 edges");
    }
    assert_eq!(
        &TTFT_BUCKETS[..3],
        &[0.001, 0.005, 0.01],
        "TTFT edges start at 1 ms"
    );
    assert_eq!(
        TTFT_BUCKETS[TTFT_BUCKETS.len() - 1],
        2560.0,
        "TTFT edges end at 2560 s"
    );
    assert_eq!(
        (ITL_BUCKETS[0], ITL_BUCKETS[ITL_BUCKETS.len() - 1]),
        (0.01, 80.0),
        "ITL edges 10 ms to 80 s"
    );
    assert_eq!(
        (
            REQUEST_BUCKETS[0],
            REQUEST_BUCKETS[REQUEST_BUCKETS.len() - 1]
        ),
        (0.3, 7680.0),
        "request edges 0.3 s to 7680 s"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let sim = start(config("fast", |_| {})).await;
    let mut conn = Conn::open(sim.local_addr()).await;
    let (response, _) = conn
        .send(
            "POST",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":100000,"stream":true}"#,
        )
        .await;
    assert_eq!(response.status(), 200, "stream accepted");
    let mut body = response.into_body();
    assert!(body.frame().await.is_some(), "the stream has started");
    // The property is that shutdown does not wait for the open stream (100000 tokens would take
    // minutes): it returns once the sim's drain (2 s at most) is over. 5 s leaves a loaded
    // machine 3 s more.
    tokio::time::timeout(Duration::from_secs(5), sim.shutdown())
        .await
        .expect("shutdown returns promptly");
    // Bounded so that a stream that is not cut fails the test instead of running for minutes.
    let (frames, end) = tokio::time::timeout(Duration::from_secs(10), async {
        let mut frames = Vec::new();
        loop {
            match body.frame().await {
                Some(Ok(frame)) => frames.extend(frame.into_data().ok()),
                Some(Err(err)) => return (frames, Err(err)),
                None => return (frames, Ok(())),
            }
        }
    })
    .await
    .expect("the open stream ends once the replica has shut down");
    let text: Vec<u8> = frames.concat();
    assert!(
        end.is_err(),
        "the open stream is cut (an error), not ended cleanly, when the engine stops"
    );
    assert!(
        !String::from_utf8_lossy(&text).contains("[DONE]"),
        "the cut stream did not run to its end"
    );
}
