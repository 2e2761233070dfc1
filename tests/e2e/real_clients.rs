//! Real clients through the proxy: `curl -N` and the official `openai` Python SDK (both installed by
//! `.ci/run`). The simulated replica is the backend, so the stream shape is vLLM's.

use crate::support;
use std::process::Command;

use tokenmeter::testbed::sim::{self, SimConfig};
use tokio::net::TcpListener;

use support::{config_for, prom, start_proxy};

async fn replica() -> sim::SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    sim::spawn(listener, SimConfig::profile("fast").expect("fast profile"))
        .await
        .expect("sim starts")
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

#[tokio::test]
async fn curl_streams_through_the_proxy() {
    let replica = replica().await;
    let proxy = start_proxy(config_for(&format!("http://{}", replica.local_addr()))).await;
    let url = format!("http://{}/v1/chat/completions", proxy.traffic_addr);
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hello there"}],"stream":true,"max_tokens":5}"#;
    let out = tokio::task::spawn_blocking(move || {
        // --max-time only keeps a hung stream from hanging the test: five tokens from the fast
        // profile take milliseconds, and a loaded 2-core machine adds no more than a second.
        run(Command::new("curl").args([
            "-sSN",
            "--max-time",
            "20",
            "-H",
            "content-type: application/json",
            "-d",
            body,
            &url,
        ]))
    })
    .await
    .expect("curl ran");
    let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(
        events.len(),
        1 + 5 + 1,
        "role chunk, 5 token chunks, [DONE]: {out}"
    );
    assert_eq!(
        events.last().copied(),
        Some("data: [DONE]"),
        "clean end: {out}"
    );
    assert!(
        !out.contains(r#""choices":[]"#),
        "the injected usage chunk was stripped: {out}"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        5.0
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_token_count_source_total",
            &[("source", "usage")]
        ),
        1.0,
        "exact from injected usage"
    );
}

#[tokio::test]
async fn openai_python_sdk_streams_through_the_proxy() {
    let replica = replica().await;
    let proxy = start_proxy(config_for(&format!("http://{}", replica.local_addr()))).await;
    let base = format!("http://{}/v1", proxy.traffic_addr);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_stream.py"
    );
    let plain = {
        let base = base.clone();
        tokio::task::spawn_blocking(move || {
            run(Command::new("python3").args([script, "--base-url", &base, "--max-tokens", "12"]))
        })
        .await
        .expect("python ran")
    };
    let plain: serde_json::Value = serde_json::from_str(plain.trim()).expect("JSON line");
    assert_eq!(
        plain["content_chunks"], 12,
        "one content chunk per token: {plain}"
    );
    assert_eq!(
        plain["chunks"], 13,
        "role chunk + 12 tokens, no usage chunk: {plain}"
    );
    assert!(
        plain["usage"].is_null(),
        "a client that did not ask sees no usage: {plain}"
    );

    let with_usage = tokio::task::spawn_blocking(move || {
        run(Command::new("python3").args([
            script,
            "--base-url",
            &base,
            "--max-tokens",
            "7",
            "--usage",
        ]))
    })
    .await
    .expect("python ran");
    let with_usage: serde_json::Value = serde_json::from_str(with_usage.trim()).expect("JSON line");
    assert_eq!(with_usage["usage"]["completion_tokens"], 7, "{with_usage}");

    let text = proxy.metrics.render();
    let ok = [("gen_ai_operation_name", "chat"), ("outcome", "ok")];
    assert_eq!(prom::sum(&text, "tokenmeter_requests_total", &ok), 2.0);
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        19.0
    );
}
