//! Prefill/decode disaggregation between two simulated replicas over loopback, driven the way
//! vLLM's proxy (`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`) drives vLLM: the
//! client's request goes to the prefill replica with `do_remote_decode`, `stream` false and
//! `max_tokens` 1; its answer's `kv_transfer_params` go with the client's request to the decode
//! replica, which pulls the KV and streams.
//!
//! The timing test stretches steps with `time_scale` so the difference between a transfer plus
//! one step and a whole prefill (about 0.28 s against 1.85 s) is more than `LATE`, what a loaded
//! machine may add to a stamp; the exact step is tested on paused time in
//! `src/testbed/sim/engine/tests.rs`. Tests here run one at a time.

use crate::sim_support;

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{json, Value};
use sim_support::{call, config, content_events, metric, read_events, start, words, Conn, LATE};
use tokenmeter::testbed::sim::kv_transfer::KvTransferFault;
use tokenmeter::testbed::sim::SimConfig;

/// The prefill request vLLM's proxy derives from the client's `request`.
fn prefill_request(request: &Value) -> String {
    let mut body = request.clone();
    body["kv_transfer_params"] = json!({
        "do_remote_decode": true,
        "do_remote_prefill": false,
        "remote_engine_id": null,
        "remote_block_ids": null,
        "remote_host": null,
        "remote_port": null
    });
    body["stream"] = json!(false);
    body["max_tokens"] = json!(1);
    if let Some(object) = body.as_object_mut() {
        object.remove("stream_options");
    }
    body.to_string()
}

/// The decode request: the client's `request` with the prefill answer's `params`.
fn decode_request(request: &Value, params: &Value) -> String {
    let mut body = request.clone();
    body["kv_transfer_params"] = params.clone();
    body.to_string()
}

/// Sends the prefill request; returns the raw answer (200 asserted).
async fn prefill(addr: SocketAddr, path: &str, request: &Value) -> String {
    let (status, text) = call(addr, "POST", path, &prefill_request(request)).await;
    assert_eq!(status, 200, "the prefill answers 200: {text}");
    text
}

/// The `kv_transfer_params` of a prefill answer.
fn offered(answer: &str) -> Value {
    let value: Value = serde_json::from_str(answer).expect("the prefill answer is JSON");
    value["kv_transfer_params"].clone()
}

fn completion(prompt_words: usize, max_tokens: u64, stream: bool) -> Value {
    let mut body = json!({
        "model": "m",
        "prompt": words(prompt_words),
        "max_tokens": max_tokens,
        "stream": stream
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// One streamed completion: its TTFT, content chunks and final usage.
async fn streamed(addr: SocketAddr, body: &str) -> (Duration, u64, Value) {
    let mut conn = Conn::open(addr).await;
    let (response, sent) = conn.send("POST", "/v1/completions", body).await;
    assert_eq!(response.status(), 200, "the replica streams");
    let events = read_events(response.into_body(), |_| {}).await;
    let content = content_events(&events);
    let usage = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e.text.strip_prefix("data: ")?).ok())
        .find(|v| v["choices"].as_array().is_some_and(Vec::is_empty))
        .map(|v| v["usage"].clone())
        .expect("a usage chunk");
    (content[0].at - sent, content.len() as u64, usage)
}

fn fast(edit: impl FnOnce(&mut SimConfig)) -> SimConfig {
    config("fast", edit)
}

#[tokio::test]
async fn the_prefill_answer_names_every_block_of_the_prompt() {
    let _alone = crate::alone().await;
    let prefill_sim = start(fast(|_| {})).await;
    let addr = prefill_sim.local_addr();
    let mut engine_ids = Vec::new();
    let mut all_ids = Vec::new();
    for (prompt, blocks) in [(40usize, 3usize), (16, 1), (17, 2), (4000, 250)] {
        let answer = prefill(addr, "/v1/completions", &completion(prompt, 8, true)).await;
        let value: Value = serde_json::from_str(&answer).expect("JSON answer");
        assert_eq!(
            (
                value["object"].as_str(),
                value["usage"]["completion_tokens"].as_u64()
            ),
            (Some("text_completion"), Some(1)),
            "an ordinary one-token completion: {answer}"
        );
        let params = &value["kv_transfer_params"];
        let ids: Vec<u64> = params["remote_block_ids"]
            .as_array()
            .expect("an array of block ids")
            .iter()
            .map(|id| id.as_u64().expect("integer block id"))
            .collect();
        assert_eq!(ids.len(), blocks, "ceil({prompt} / 16) block ids: {params}");
        let engine_id = params["remote_engine_id"]
            .as_str()
            .expect("engine id string")
            .to_owned();
        let want = format!(
            r#","kv_transfer_params":{{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":{},"remote_engine_id":"{engine_id}","remote_host":"127.0.0.1","remote_port":{},"tp_size":1}}}}"#,
            serde_json::to_string(&ids).expect("ids"),
            addr.port()
        );
        assert!(
            answer.ends_with(&want),
            "the last member, in vLLM's order, naming this replica:\n{answer}\nwant suffix\n{want}"
        );
        engine_ids.push(engine_id);
        all_ids.extend(ids);
    }
    assert!(
        !engine_ids[0].is_empty() && engine_ids.iter().all(|id| *id == engine_ids[0]),
        "one engine id per replica: {engine_ids:?}"
    );
    let mut distinct = all_ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        all_ids.len(),
        "block ids are never handed out twice"
    );

    let chat = json!({
        "messages": [{"role": "user", "content": words(100)}],
        "max_completion_tokens": 5
    });
    let mut body: Value = serde_json::from_str(&prefill_request(&chat)).expect("json");
    body["max_completion_tokens"] = json!(1);
    let (status, answer) = call(addr, "POST", "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(status, 200, "chat prefill: {answer}");
    let value: Value = serde_json::from_str(&answer).expect("JSON answer");
    let prompt = value["usage"]["prompt_tokens"].as_u64().expect("usage");
    assert_eq!(
        value["kv_transfer_params"]["remote_block_ids"]
            .as_array()
            .map(Vec::len),
        Some(prompt.div_ceil(16) as usize),
        "chat: one id per block of the templated prompt ({prompt} tokens)"
    );
    assert!(
        answer.contains(r#""prompt_logprobs":null,"kv_transfer_params":{"#),
        "chat: the params follow prompt_logprobs: {answer}"
    );

    let (status, text) = call(
        addr,
        "POST",
        "/v1/completions",
        r#"{"prompt":"a b","stream":true,"kv_transfer_params":{"do_remote_decode":true}}"#,
    )
    .await;
    assert_eq!(
        (status, text.as_str()),
        (
            400,
            r#"{"object":"error","message":"kv_transfer_params with do_remote_decode requires stream=false","type":"BadRequestError","code":400}"#
        ),
        "a streamed prefill request is refused"
    );
    prefill_sim.shutdown().await;
}

#[tokio::test]
async fn the_decode_side_pays_a_transfer_and_one_step_instead_of_a_prefill() {
    let _alone = crate::alone().await;
    const PROMPT: u64 = 4000;
    const MAX_TOKENS: u64 = 8;
    let model = config("llama-3.1-8b-h100", |c| {
        c.time_scale = 10.0;
        // The baseline must prefill the whole prompt again, not hit the decode side's cache.
        c.enable_prefix_caching = false;
        c.enable_prompt_tokens_details = true;
    });
    let prefill_sim = start(model.clone()).await;
    let decode_sim = start(model.clone()).await;
    let request = completion(PROMPT as usize, MAX_TOKENS, true);
    let answer = prefill(prefill_sim.local_addr(), "/v1/completions", &request).await;
    let params = offered(&answer);

    let decode = decode_sim.local_addr();
    let (baseline, baseline_tokens, baseline_usage) = streamed(decode, &request.to_string()).await;
    let (ttft, tokens, usage) = streamed(decode, &decode_request(&request, &params)).await;

    let transfer = model.scaled(model.kv_transfer_time(PROMPT));
    let step = model.scaled(model.step_time(1, PROMPT));
    let prefill_step = model.scaled(model.step_time(PROMPT, PROMPT));
    eprintln!(
        "decode TTFT {ttft:?} (model: transfer {transfer:?} + step {step:?}), \
         without params {baseline:?} (model {prefill_step:?})"
    );
    assert_eq!(
        (tokens, baseline_tokens),
        (MAX_TOKENS, MAX_TOKENS),
        "both stream exactly max_tokens tokens"
    );
    assert_eq!(
        (
            &usage["prompt_tokens"],
            &usage["completion_tokens"],
            &usage["prompt_tokens_details"]["cached_tokens"]
        ),
        (&json!(PROMPT), &json!(MAX_TOKENS), &json!(PROMPT - 1)),
        "usage reports the whole prompt, all but its last token received (cached): {usage}"
    );
    assert_eq!(
        baseline_usage["prompt_tokens_details"]["cached_tokens"],
        json!(0),
        "without params nothing is cached"
    );
    // Lower bounds: the pull sleeps its transfer time, a step never ends early.
    assert!(
        ttft >= transfer + step,
        "decode TTFT {ttft:?}, before the model's transfer {transfer:?} + one step {step:?}"
    );
    assert!(
        baseline >= prefill_step,
        "without params the prompt is prefilled: {baseline:?}, model {prefill_step:?}"
    );
    // The upper bound is the property (the pulled prompt is not prefilled), generous: `LATE`
    // over its model, which still leaves it short of a prefill's step.
    assert!(
        transfer + step + LATE < prefill_step,
        "the model: the transfer and one step ({:?}) are more than {LATE:?} shorter than the \
         prefill ({prefill_step:?})",
        transfer + step
    );
    assert!(
        ttft <= transfer + step + LATE,
        "the pulled prompt's first token ({ttft:?}) comes within {LATE:?} of its model (transfer \
         {transfer:?} + one step {step:?}), before a prefill's ({baseline:?})"
    );
    prefill_sim.shutdown().await;
    decode_sim.shutdown().await;
}

#[tokio::test]
async fn params_of_another_prompt_are_a_400() {
    let _alone = crate::alone().await;
    let prefill_sim = start(fast(|_| {})).await;
    let decode_sim = start(fast(|_| {})).await;
    let short = completion(40, 4, false);
    let params = offered(&prefill(prefill_sim.local_addr(), "/v1/completions", &short).await);
    let long = completion(100, 4, false);
    let (status, text) = call(
        decode_sim.local_addr(),
        "POST",
        "/v1/completions",
        &decode_request(&long, &params),
    )
    .await;
    assert_eq!(
        (status, text.as_str()),
        (
            400,
            r#"{"object":"error","message":"kv_transfer_params.remote_block_ids: 3 block ids, but this request's prompt of 100 tokens fills 7 blocks of 16 tokens (params of another request?)","type":"BadRequestError","code":400}"#
        ),
        "the 40-token prompt's 3 blocks do not fit a 100-token prompt"
    );
    let mut no_engine = params.clone();
    no_engine["remote_engine_id"] = json!("");
    let (status, text) = call(
        decode_sim.local_addr(),
        "POST",
        "/v1/completions",
        &decode_request(&short, &no_engine),
    )
    .await;
    assert_eq!(status, 400, "an empty engine id is refused: {text}");
    assert!(
        text.contains("kv_transfer_params.remote_engine_id: a non-empty string is required"),
        "the error names the member: {text}"
    );
    let received = r#"vllm:kv_transfer_tokens_total{model_name="sim-fast",direction="received"}"#;
    assert_eq!(
        metric(decode_sim.local_addr(), received).await,
        0.0,
        "nothing was pulled"
    );
    prefill_sim.shutdown().await;
    decode_sim.shutdown().await;
}

#[tokio::test]
async fn a_prefill_fault_offers_null() {
    let _alone = crate::alone().await;
    let prefill_sim = start(fast(|c| c.kv_transfer_fault = KvTransferFault::Prefill)).await;
    let answer = prefill(
        prefill_sim.local_addr(),
        "/v1/completions",
        &completion(40, 4, false),
    )
    .await;
    assert!(
        answer.ends_with(r#""prompt_tokens_details":null},"kv_transfer_params":null}"#),
        "the answer is whole, with no blocks offered: {answer}"
    );
    let sent = r#"vllm:kv_transfer_tokens_total{model_name="sim-fast",direction="sent"}"#;
    assert_eq!(
        metric(prefill_sim.local_addr(), sent).await,
        0.0,
        "nothing offered, nothing counted"
    );
    prefill_sim.shutdown().await;
}

#[tokio::test]
async fn a_decode_fault_is_a_500_after_the_transfer_time_and_no_stream() {
    let _alone = crate::alone().await;
    let prefill_sim = start(fast(|_| {})).await;
    let faulty = fast(|c| {
        c.kv_transfer_fault = KvTransferFault::Decode;
        c.time_scale = 50.0;
    });
    let decode_sim = start(faulty.clone()).await;
    let request = completion(2000, 4, true);
    let params = offered(&prefill(prefill_sim.local_addr(), "/v1/completions", &request).await);
    let engine_id = params["remote_engine_id"].as_str().expect("engine id");

    let mut conn = Conn::open(decode_sim.local_addr()).await;
    let (response, sent) = conn
        .send(
            "POST",
            "/v1/completions",
            &decode_request(&request, &params),
        )
        .await;
    let elapsed = sent.elapsed();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8(body.to_vec()).expect("utf-8 body");
    let transfer = faulty.scaled(faulty.kv_transfer_time(2000));
    assert_eq!(
        (status, content_type.as_deref()),
        (500, Some("application/json")),
        "a JSON error before any stream byte: {text}"
    );
    assert_eq!(
        text,
        format!(
            r#"{{"object":"error","message":"KV transfer failed: could not pull 125 KV blocks from engine {engine_id} at 127.0.0.1:{}","type":"InternalServerError","code":500}}"#,
            prefill_sim.local_addr().port()
        ),
        "vLLM's error body, naming the transfer, and nothing else"
    );
    assert!(
        elapsed >= transfer,
        "the pull failed once its transfer time had passed: {elapsed:?}, transfer {transfer:?}"
    );
    let addr = decode_sim.local_addr();
    for series in [
        r#"vllm:kv_transfer_tokens_total{model_name="sim-fast",direction="received"}"#,
        r#"vllm:prompt_tokens_total{model_name="sim-fast"}"#,
        r#"vllm:request_success_total{model_name="sim-fast",finished_reason="length"}"#,
    ] {
        assert_eq!(metric(addr, series).await, 0.0, "{series}: nothing ran");
    }
    prefill_sim.shutdown().await;
    decode_sim.shutdown().await;
}

#[tokio::test]
async fn metrics_show_what_each_replica_computed_sent_and_received() {
    let _alone = crate::alone().await;
    let prefill_sim = start(fast(|_| {})).await;
    let decode_sim = start(fast(|_| {})).await;
    let chat = json!({
        "model": "m",
        "messages": [{"role": "user", "content": words(200)}],
        "max_tokens": 3
    });
    let answer = prefill(prefill_sim.local_addr(), "/v1/chat/completions", &chat).await;
    let prompt = serde_json::from_str::<Value>(&answer).expect("json")["usage"]["prompt_tokens"]
        .as_u64()
        .expect("prompt tokens") as f64;
    let (status, text) = call(
        decode_sim.local_addr(),
        "POST",
        "/v1/chat/completions",
        &decode_request(&chat, &offered(&answer)),
    )
    .await;
    assert_eq!(status, 200, "the decode answers: {text}");
    let decoded: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        (
            decoded["usage"]["prompt_tokens"].as_u64(),
            decoded["usage"]["completion_tokens"].as_u64()
        ),
        (Some(prompt as u64), Some(3)),
        "the decode's usage is the whole request's"
    );
    assert!(
        decoded.get("kv_transfer_params").is_none(),
        "the decode side offers nothing on: {text}"
    );

    let series = |name: &str, labels: &str| format!(r#"{name}{{model_name="sim-fast"{labels}}}"#);
    let kv = "vllm:kv_transfer_tokens_total";
    let by_source = "vllm:prompt_tokens_by_source_total";
    let want = [
        // The prefill replica computed the prompt and offered its KV.
        (
            prefill_sim.local_addr(),
            series(kv, r#",direction="sent""#),
            prompt,
        ),
        (
            prefill_sim.local_addr(),
            series(kv, r#",direction="received""#),
            0.0,
        ),
        (
            prefill_sim.local_addr(),
            series(by_source, r#",source="local_compute""#),
            prompt,
        ),
        (
            prefill_sim.local_addr(),
            series("vllm:prompt_tokens_total", ""),
            prompt,
        ),
        // The decode replica received it and computed one token (the last, which vLLM also
        // counts as a recomputed cache hit).
        (
            decode_sim.local_addr(),
            series(kv, r#",direction="sent""#),
            0.0,
        ),
        (
            decode_sim.local_addr(),
            series(kv, r#",direction="received""#),
            prompt,
        ),
        (
            decode_sim.local_addr(),
            series(by_source, r#",source="local_compute""#),
            1.0,
        ),
        (
            decode_sim.local_addr(),
            series(by_source, r#",source="external_kv_transfer""#),
            prompt - 1.0,
        ),
        (
            decode_sim.local_addr(),
            series(by_source, r#",source="local_cache_hit""#),
            1.0,
        ),
        (
            decode_sim.local_addr(),
            series("vllm:prompt_tokens_total", ""),
            prompt,
        ),
        (
            decode_sim.local_addr(),
            series("vllm:prefix_cache_queries_total", ""),
            prompt,
        ),
        (
            decode_sim.local_addr(),
            series("vllm:prefix_cache_hits_total", ""),
            0.0,
        ),
    ];
    for (addr, series, value) in want {
        assert_eq!(metric(addr, &series).await, value, "{series} on {addr}");
    }
    prefill_sim.shutdown().await;
    decode_sim.shutdown().await;
}
