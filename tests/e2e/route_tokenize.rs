//! The first long prompts route right before any response has calibrated the estimate: while a
//! model is untrusted, a prompt whose pool depends on its true length is counted by a backend's
//! `/tokenize` first (the simulated replica serves vLLM's), and shorter ones send a background
//! sample. A backend without the endpoint is asked once and routing falls back to the estimate.

use crate::support;
use std::time::Duration;

use tokenmeter::config::Config;
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

use support::backend::{Backend, Script, Seen};
use support::{client, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const MODEL: &str = "sim-fast";

async fn start_sim() -> SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let config = SimConfig::profile("fast").expect("fast profile");
    sim::spawn(listener, config).await.expect("sim starts")
}

/// `n` one-letter words: `n` tokens on the simulated replica in `2n - 1` bytes, twice the prior's
/// 0.25 tokens per byte (like llama.cpp's test model on the load generator's prompts).
fn chat(words: usize) -> String {
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{}"}}],"stream":true,"max_tokens":2}}"#,
        vec!["w"; words].join(" ")
    )
}

/// Pools `prefill` and `decode`; prompts of 2048 estimated tokens or more go to `prefill`.
fn pools(prefill: String, decode: String) -> Config {
    let mut config = support::split_pools(vec![prefill], vec![decode], 2048);
    // What is tested is that the count decides the route, not how fast it comes: the default
    // 250 ms wait is a latency budget a loaded 2-core machine can overrun (the router would then
    // route by the estimate, and count the call later), so the wait here is seconds.
    config.routing.tokenize_timeout = Duration::from_secs(10);
    config
}

fn decisions(text: &str, pool: &str) -> f64 {
    prom::sum(
        text,
        "tokenmeter_route_decisions_total",
        &[("pool", pool), ("reason", "rule")],
    )
}

#[tokio::test]
async fn the_first_long_document_goes_to_prefill() {
    let prefill = start_sim().await;
    let decode = start_sim().await;
    let url = |sim: &SimHandle| format!("http://{}", sim.local_addr());
    let proxy = start_proxy(pools(url(&prefill), url(&decode))).await;
    // 3000 tokens in 5999 bytes: the prior estimates 1500 (decode), the true count is prefill's.
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat(3000)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    let text = proxy.metrics.render();
    assert_eq!(decisions(&text, "prefill"), 1.0, "the very first request");
    assert_eq!(decisions(&text, "decode"), 0.0, "not misrouted");
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_prompt_tokenize_total",
            &[("mode", "wait"), ("result", "ok")]
        ),
        1.0,
        "counted by the backend's tokenizer before routing"
    );
    let ratio = prom::value(
        &text,
        "tokenmeter_prompt_tokens_per_byte",
        &[("gen_ai_request_model", MODEL)],
    );
    assert!(
        (0.49..0.52).contains(&ratio),
        "the count replaced the prior: {ratio}"
    );

    // The estimate is now near the truth: a 1500-token prompt is decode's, no wait needed.
    client::post(proxy.traffic_addr, CHAT, &chat(1500)).await;
    let text = proxy.metrics.render();
    assert_eq!(decisions(&text, "decode"), 1.0, "1500 tokens: decode");
}

#[tokio::test]
async fn without_tokenize_the_prior_misroutes_it() {
    let prefill = start_sim().await;
    let decode = start_sim().await;
    let url = |sim: &SimHandle| format!("http://{}", sim.local_addr());
    let mut config = pools(url(&prefill), url(&decode));
    config.routing.tokenize = false;
    let proxy = start_proxy(config).await;
    client::post(proxy.traffic_addr, CHAT, &chat(3000)).await;
    let text = proxy.metrics.render();
    assert_eq!(
        decisions(&text, "decode"),
        1.0,
        "what this fixes: 1500 estimated tokens go to decode"
    );
}

#[tokio::test]
async fn a_configured_model_prior_needs_no_tokenizer() {
    let prefill = start_sim().await;
    let decode = start_sim().await;
    let url = |sim: &SimHandle| format!("http://{}", sim.local_addr());
    let mut config = pools(url(&prefill), url(&decode));
    config
        .routing
        .model_tokens_per_byte
        .insert(MODEL.to_owned(), 0.5);
    let proxy = start_proxy(config).await;
    client::post(proxy.traffic_addr, CHAT, &chat(3000)).await;
    let text = proxy.metrics.render();
    assert_eq!(decisions(&text, "prefill"), 1.0, "estimated at 0.5: 3000");
    assert_eq!(
        prom::sum(&text, "tokenmeter_prompt_tokenize_total", &[]),
        0.0,
        "a configured prior is trusted: no tokenizer call"
    );
}

/// Serves chat like a tiny OpenAI server, and 404 for anything else.
fn no_tokenizer(seen: &Seen) -> Script {
    if seen.head.starts_with("POST /v1/chat/completions ") {
        Script::sse(vec![(
            Duration::ZERO,
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_vec(),
        )])
    } else {
        Script::json(404, r#"{"detail":"Not Found"}"#)
    }
}

#[tokio::test]
async fn a_backend_without_tokenize_is_asked_once() {
    let mut prefill = Backend::start(no_tokenizer).await;
    let mut decode = Backend::start(no_tokenizer).await;
    let proxy = start_proxy(pools(prefill.url.clone(), decode.url.clone())).await;
    for _ in 0..4 {
        let streamed = client::post(proxy.traffic_addr, CHAT, &chat(3000)).await;
        assert_eq!(streamed.status, 200, "served by the estimate");
    }
    let mut lines = Vec::new();
    // The 4 chats went to decode; each backend was asked for a count once.
    for _ in 0..5 {
        lines.push(
            decode
                .next_request()
                .await
                .head
                .lines()
                .next()
                .map(str::to_owned),
        );
    }
    lines.push(
        prefill
            .next_request()
            .await
            .head
            .lines()
            .next()
            .map(str::to_owned),
    );
    let tokenize_calls = lines
        .iter()
        .filter(|line| {
            line.as_deref()
                .is_some_and(|l| l.starts_with("POST /tokenize "))
        })
        .count();
    assert_eq!(tokenize_calls, 2, "one call per backend: {lines:?}");
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_prompt_tokenize_total",
            &[("result", "unsupported")]
        ),
        2.0,
        "counted as unsupported"
    );
    assert_eq!(decisions(&text, "decode"), 4.0, "routed by the prior");
}
