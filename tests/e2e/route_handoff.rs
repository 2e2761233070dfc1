//! Prefill/decode disaggregation with vLLM's KV-connector protocol, against scripted replicas that
//! show every byte the proxy sent them: which requests are handed off, what the prefill and decode
//! requests carry, that the client reads the decode replica's bytes unchanged, and that every
//! failure of the prefill phase ends with the decode replica serving the whole request, counted.
//! (`tests/serial/sim_disagg.rs` has the simulated replicas' side of the protocol; the end-to-end run on
//! them is below, `disaggregated_on_simulated_replicas_*`.)

use crate::support;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokenmeter::config::{Config, HandoffConfig};
use tokenmeter::server::ServerHandle;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use support::backend::{replay, Backend, Script, Seen, Step};
use support::ports::Refusing;
use support::raw::{self, RawUpstream};
use support::{client, config_for, fixture, prom, start_proxy, wait_for_metric};

const CHAT: &str = "/v1/chat/completions";
const PARAMS: &str = r#"{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[7,8],"remote_engine_id":"engine-a","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}"#;

/// A chat request whose prompt is `bytes` bytes of text (about a quarter as many tokens before
/// any calibration), streamed, asking for usage itself (so the stream reaches the client as the
/// decode replica sent it).
fn chat(bytes: usize) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}],"stream":true,"stream_options":{{"include_usage":true}},"max_tokens":7}}"#,
        "x".repeat(bytes)
    )
}

/// A prefill answer offering `params`.
fn prefill_answer(params: &str) -> String {
    format!(
        r#"{{"id":"cmpl-p","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"a"}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":900,"completion_tokens":1,"total_tokens":901}},"kv_transfer_params":{params}}}"#
    )
}

/// Pools `prefill` and `decode`; every request goes to `decode`, which hands prompts of 1000
/// uncached tokens or more off to `prefill` (vLLM's protocol).
fn handoff_config(prefill: &str, decode: &str, change: impl FnOnce(&mut HandoffConfig)) -> Config {
    let mut handoff = HandoffConfig {
        min_prompt_tokens: 1000,
        // A scripted prefill answers at once: in milliseconds on a loaded 2-core machine, far
        // within 2 s. (The tests of the timeout itself set their own.)
        prefill_timeout: Duration::from_secs(2),
        ..HandoffConfig::default()
    };
    change(&mut handoff);
    support::handoff_pools(prefill, decode, handoff)
}

fn results(proxy: &ServerHandle, result: &str) -> f64 {
    prom::sum(
        &proxy.metrics.render(),
        "tokenmeter_disaggregated_requests_total",
        &[("pool", "decode"), ("result", result)],
    )
}

/// Asserts that no request reached `backend` so far. Called once the client's answer is in: a
/// prefill is asked (and reported) before the decode answers, so nothing is waited for.
fn never_asked(backend: &mut Backend, what: &str) {
    while let Ok(report) = backend.reports.try_recv() {
        assert!(
            !matches!(report, support::backend::Report::Request(_)),
            "{what}: {report:?}"
        );
    }
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("a JSON body")
}

/// Sends `body` and asserts the client read the decode replica's fixture stream byte for byte.
async fn streams_the_fixture(proxy: &ServerHandle, body: &str) {
    let streamed = client::post(proxy.traffic_addr, CHAT, body).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-usage.sse"),
        "the client reads the decode replica's bytes"
    );
}

#[tokio::test]
async fn a_long_prompt_prefills_on_the_prefill_pool_and_streams_from_the_decode_replica() {
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, &prefill_answer(PARAMS))).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |_| {})).await;
    let body = chat(8000);

    streams_the_fixture(&proxy, &body).await;

    let asked = prefill.next_request().await;
    let sent = json(&asked.body);
    let mut expected = json(body.as_bytes());
    expected["stream"] = Value::Bool(false);
    expected["max_tokens"] = 1.into();
    expected.as_object_mut().unwrap().remove("stream_options");
    expected["kv_transfer_params"] = serde_json::json!({
        "do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
        "remote_block_ids": null, "remote_host": null, "remote_port": null
    });
    assert_eq!(sent, expected, "the prefill request");
    assert!(
        asked.head.starts_with("POST /v1/chat/completions "),
        "{}",
        asked.head
    );

    let decoded = decode.next_request().await;
    let spliced = format!("{{\"kv_transfer_params\":{PARAMS},{}", &body[1..]);
    assert_eq!(
        String::from_utf8_lossy(&decoded.body),
        spliced,
        "the client's bytes, the offered params spliced in first"
    );
    assert_eq!(
        decoded.header("content-length"),
        Some(spliced.len().to_string())
    );
    let id = asked
        .header("x-request-id")
        .expect("the prefill has a request id");
    assert_eq!(
        decoded.header("x-request-id"),
        Some(id),
        "both replicas know the request by one id"
    );

    assert_eq!(results(&proxy, "remote"), 1.0);
    let text = proxy.metrics.render();
    for phase in ["prefill", "decode_first_token"] {
        assert_eq!(
            prom::value(
                &text,
                "tokenmeter_disaggregation_phase_seconds_count",
                &[("pool", "decode"), ("phase", phase)]
            ),
            1.0,
            "{phase} recorded"
        );
    }
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0,
        "the output tokens are the decode replica's alone (the prefill's one token is not output)"
    );
}

#[tokio::test]
async fn a_clients_request_id_goes_to_both_replicas_unchanged() {
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, &prefill_answer(PARAMS))).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |_| {})).await;
    let streamed = client::open_with(
        proxy.traffic_addr,
        client::Protocol::Http1,
        "POST",
        CHAT,
        &chat(8000),
        &[("x-request-id", "client-42"), ("authorization", "Bearer k")],
    )
    .await
    .collect()
    .await;
    assert_eq!(streamed.status, 200);
    let asked = prefill.next_request().await;
    let decoded = decode.next_request().await;
    for seen in [&asked, &decoded] {
        assert_eq!(seen.header("x-request-id").as_deref(), Some("client-42"));
        assert_eq!(seen.header("authorization").as_deref(), Some("Bearer k"));
    }
}

#[tokio::test]
async fn a_short_prompt_prefills_where_it_decodes_unless_the_prefill_pool_is_idle() {
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, &prefill_answer(PARAMS))).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |_| {})).await;
    let body = chat(40);
    streams_the_fixture(&proxy, &body).await;
    assert_eq!(
        decode.next_request().await.body,
        body.as_bytes(),
        "unchanged"
    );
    assert_eq!(results(&proxy, "local_short"), 1.0);
    never_asked(&mut prefill, "the prefill pool was not asked");

    let idle = start_proxy(handoff_config(&prefill.url, &decode.url, |h| {
        h.short_queue_tokens = 1;
    }))
    .await;
    streams_the_fixture(&idle, &body).await;
    prefill.next_request().await;
    assert_eq!(
        results(&idle, "remote"),
        1.0,
        "idle prefill pool: short handed off too"
    );
}

/// Each failure of the prefill phase: the decode replica gets the client's request unchanged and
/// the client its stream, and the result names the failure.
async fn falls_back(prefill: Script, result: &str, change: impl FnOnce(&mut HandoffConfig)) {
    let prefill = Backend::start(move |_: &Seen| prefill.clone()).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, change)).await;
    let body = chat(8000);
    streams_the_fixture(&proxy, &body).await;
    let decoded = decode.next_request().await;
    assert_eq!(
        decoded.body,
        body.as_bytes(),
        "{result}: the client's request, unchanged"
    );
    assert_eq!(results(&proxy, result), 1.0, "{result}");
    assert_eq!(results(&proxy, "remote"), 0.0, "{result}");
    assert_eq!(
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_requests_total",
            &[("outcome", "ok")]
        ),
        1.0,
        "{result}: the client's request succeeded"
    );
}

#[tokio::test]
async fn a_prefill_error_falls_back_to_the_decode_replica() {
    let error = r#"{"error":{"message":"boom","type":"InternalServerError","code":500}}"#;
    falls_back(Script::json(500, error), "prefill_failed", |_| {}).await;
    falls_back(Script::json(400, error), "prefill_failed", |_| {}).await;
}

#[tokio::test]
async fn a_prefill_past_its_deadline_falls_back_to_the_decode_replica() {
    // The prefill would answer after 10 s, the deadline is 200 ms: the timer fires first on any
    // machine (a loaded one makes it late by milliseconds, not seconds), and a sleep never ends
    // early. The fallback does not wait for the prefill's answer.
    let mut slow = Script::json(200, &prefill_answer(PARAMS));
    slow.steps.insert(0, Step::Pause(Duration::from_secs(10)));
    falls_back(slow, "prefill_timeout", |h| {
        h.prefill_timeout = Duration::from_millis(200);
    })
    .await;
}

#[tokio::test]
async fn a_prefill_that_offers_no_kv_falls_back_to_the_decode_replica() {
    let none = prefill_answer("null");
    falls_back(Script::json(200, &none), "transfer_failed", |_| {}).await;
    falls_back(Script::json(200, "not json"), "transfer_failed", |_| {}).await;
}

#[tokio::test]
async fn an_unreachable_prefill_pool_falls_back_to_the_decode_replica() {
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    // An address that refuses every connect, held for the whole test (a released port could be
    // taken by another test's listener).
    let closed = Refusing::new();
    let proxy = start_proxy(handoff_config(&closed.url(), &decode.url, |_| {})).await;
    let body = chat(8000);
    streams_the_fixture(&proxy, &body).await;
    assert_eq!(decode.next_request().await.body, body.as_bytes());
    assert_eq!(results(&proxy, "prefill_failed"), 1.0);
}

#[tokio::test]
async fn a_decode_replica_that_refuses_the_kv_serves_the_whole_request() {
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, &prefill_answer(PARAMS))).await;
    let events = support::events_of(&fixture("vllm-chat-usage.sse"));
    let mut decode = Backend::start(move |seen: &Seen| {
        if seen.body.starts_with(b"{\"kv_transfer_params\"") {
            Script::json(
                500,
                r#"{"error":{"message":"KV transfer failed","type":"InternalServerError","code":500}}"#,
            )
        } else {
            Script::sse(events.iter().map(|e| (Duration::ZERO, e.clone())).collect())
        }
    })
    .await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |_| {})).await;
    let body = chat(8000);
    streams_the_fixture(&proxy, &body).await;
    prefill.next_request().await;
    let first = decode.next_request().await;
    assert!(first.body.starts_with(b"{\"kv_transfer_params\""));
    let second = decode.next_request().await;
    assert_eq!(second.body, body.as_bytes(), "asked again without the KV");
    assert_eq!(results(&proxy, "transfer_failed"), 1.0);
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
        1.0,
        "the client never saw the refusal"
    );
}

#[tokio::test]
async fn a_client_that_leaves_during_the_prefill_cancels_it() {
    let pause = Duration::from_secs(5);
    let mut slow = Script::json(200, &prefill_answer(PARAMS));
    slow.steps.insert(0, Step::Pause(pause));
    let mut prefill = Backend::start(move |_: &Seen| slow.clone()).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |h| {
        h.prefill_timeout = Duration::from_secs(10);
    }))
    .await;
    let body = chat(8000);
    let mut raw = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    raw.write_all(head.as_bytes()).await.expect("send the head");
    raw.write_all(body.as_bytes()).await.expect("send the body");
    let asked = prefill.next_request().await;
    drop(raw);
    // The prefill's pause began after the backend read the request. A close before it ends (and
    // before the 10 s prefill timeout) is the proxy passing the client's leaving on, which takes
    // milliseconds even on a loaded 2-core machine.
    let answers_at = asked.at + pause;
    let closed = prefill
        .next_close(answers_at.saturating_duration_since(tokio::time::Instant::now()))
        .await;
    assert!(
        closed.is_some_and(|at| at < answers_at),
        "the prefill request's connection was closed while the prefill was still running"
    );
    wait_for_metric(
        &proxy,
        "tokenmeter_disaggregated_requests_total",
        &[("pool", "decode"), ("result", "client_gone")],
        1.0,
    )
    .await;
    never_asked(&mut decode, "the decode replica never heard of it");
}

#[tokio::test]
async fn requests_the_protocol_cannot_hand_off_go_to_the_decode_replica_unchanged() {
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, &prefill_answer(PARAMS))).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |_| {})).await;
    let own = format!(
        r#"{{"kv_transfer_params":{{"do_remote_prefill":true}},{}"#,
        &chat(8000)[1..]
    );
    streams_the_fixture(&proxy, &own).await;
    assert_eq!(decode.next_request().await.body, own.as_bytes());
    assert_eq!(results(&proxy, "unsupported"), 1.0);
    never_asked(&mut prefill, "the prefill pool was not asked");
}

#[tokio::test]
async fn a_follow_up_the_decode_replica_holds_prefills_there() {
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, &prefill_answer(PARAMS))).await;
    // Usage as a tokenizer of 4 bytes per token would report it, so the calibration agrees with
    // the prior and the thresholds below are the estimate's.
    let events: Vec<Vec<u8>> = support::events_of(&fixture("vllm-chat-usage.sse"))
        .into_iter()
        .map(|event| {
            String::from_utf8_lossy(&event)
                .replace("\"prompt_tokens\":12", "\"prompt_tokens\":2000")
                .into_bytes()
        })
        .collect();
    let mut decode = Backend::start(move |_: &Seen| {
        Script::sse(events.iter().map(|e| (Duration::ZERO, e.clone())).collect())
    })
    .await;
    let mut config = handoff_config(&prefill.url, &decode.url, |_| {});
    config.pools[1].affinity = tokenmeter::config::Affinity::Prefix;
    let proxy = start_proxy(config).await;
    let long = "x".repeat(8000);
    let turn = |messages: &str| {
        format!(r#"{{"model":"m","messages":[{messages}],"stream":true,"max_tokens":7}}"#)
    };
    let first = turn(&format!(r#"{{"role":"user","content":"{long}"}}"#));
    let second = turn(&format!(
        r#"{{"role":"user","content":"{long}"}},{{"role":"assistant","content":"Hello there"}},{{"role":"user","content":"and then?"}}"#
    ));
    assert_eq!(
        client::post(proxy.traffic_addr, CHAT, &first).await.status,
        200
    );
    prefill.next_request().await;
    decode.next_request().await;
    assert_eq!(
        results(&proxy, "remote"),
        1.0,
        "the first turn is long and uncached"
    );

    assert_eq!(
        client::post(proxy.traffic_addr, CHAT, &second).await.status,
        200
    );
    let decoded = decode.next_request().await;
    assert!(
        !decoded.body.starts_with(b"{\"kv_transfer_params\""),
        "prefilled where its first turn is cached"
    );
    assert_eq!(results(&proxy, "local_cached"), 1.0);
    never_asked(
        &mut prefill,
        "the prefill pool was not asked for the follow-up",
    );
}

#[tokio::test]
async fn a_reload_mid_handoff_leaves_the_request_on_its_old_pools() {
    // The prefill reports the request and answers only when the test says: the reload below
    // lands mid-prefill however slow the machine.
    let (asked_tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let prefill = RawUpstream::start({
        let release = Arc::clone(&release);
        move |_request, mut stream| {
            let (asked_tx, release) = (asked_tx.clone(), Arc::clone(&release));
            async move {
                let _ = asked_tx.send(());
                release.notified().await;
                let answer = prefill_answer(PARAMS);
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                raw::write(&mut stream, response.as_bytes()).await;
            }
        }
    })
    .await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut other = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    // The prefill is held for as long as the reload takes: no timeout may end it meanwhile.
    let proxy = start_proxy(handoff_config(&prefill.url, &decode.url, |h| {
        h.prefill_timeout = Duration::from_secs(60);
    }))
    .await;
    let body = chat(8000);
    let addr = proxy.traffic_addr;
    let in_flight = tokio::spawn({
        let body = body.clone();
        async move { client::post(addr, CHAT, &body).await }
    });
    tokio::time::timeout(Duration::from_secs(10), asked.recv())
        .await
        .expect("the prefill was asked")
        .expect("the prefill upstream runs");
    // Mid-prefill, the pools change: one pool of another backend, no handoff.
    proxy
        .reload(config_for(&other.url))
        .await
        .expect("the reload applies");
    release.notify_one();
    let streamed = in_flight.await.expect("joins");
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.bytes(), fixture("vllm-chat-usage.sse"));
    let decoded = decode.next_request().await;
    assert!(
        decoded.body.starts_with(b"{\"kv_transfer_params\""),
        "finished its handoff on the pools it started with"
    );
    assert_eq!(results(&proxy, "remote"), 1.0);
    streams_the_fixture(&proxy, &body).await;
    assert_eq!(
        other.next_request().await.body,
        body.as_bytes(),
        "new requests follow the reload"
    );
    assert_eq!(prefill.request_count(), 1, "no handoff after the reload");
}

/// The same on simulated vLLM replicas, which speak the protocol's other side (the testbed).
#[cfg(feature = "testbed")]
mod simulated {
    use super::*;

    /// Two simulated vLLM replicas (`fast` profile) behind the proxy: `prefill` and `decode` (with
    /// `fault` on the given side).
    async fn simulated(
        fault_on_prefill: bool,
        fault_on_decode: bool,
        edit: impl FnOnce(&mut Config),
    ) -> (
        tokenmeter::testbed::sim::SimHandle,
        tokenmeter::testbed::sim::SimHandle,
        ServerHandle,
    ) {
        use tokenmeter::testbed::sim::{self, kv_transfer::KvTransferFault, SimConfig};
        let start = |fault: bool| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind sim");
            let mut config = SimConfig::profile("fast").expect("fast profile");
            if fault {
                config.kv_transfer_fault = if fault_on_prefill {
                    KvTransferFault::Prefill
                } else {
                    KvTransferFault::Decode
                };
            }
            sim::spawn(listener, config).await.expect("sim starts")
        };
        let prefill = start(fault_on_prefill).await;
        let decode = start(fault_on_decode).await;
        let mut config = handoff_config(
            &format!("http://{}", prefill.local_addr()),
            &format!("http://{}", decode.local_addr()),
            |_| {},
        );
        edit(&mut config);
        config.validate().expect("valid");
        let proxy = start_proxy(config).await;
        (prefill, decode, proxy)
    }

    /// A sim counter's value on its `/metrics`.
    async fn sim_counter(
        sim: &tokenmeter::testbed::sim::SimHandle,
        name: &str,
        labels: &[(&str, &str)],
    ) -> f64 {
        let (status, text) = client::get(sim.local_addr(), "/metrics").await;
        assert_eq!(status, 200);
        prom::sum(&text, name, labels)
    }

    /// Prompt tokens `sim` computed itself (not taken from a KV transfer or its cache).
    async fn computed(sim: &tokenmeter::testbed::sim::SimHandle) -> f64 {
        sim_counter(
            sim,
            "vllm:prompt_tokens_by_source_total",
            &[("source", "local_compute")],
        )
        .await
    }

    /// Posts `body` through the proxy, asserting a whole stream: 200, ended by `[DONE]`.
    async fn whole_stream(proxy: &ServerHandle, body: &str) {
        let streamed = client::post(proxy.traffic_addr, CHAT, body).await;
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        assert!(
            streamed.text().ends_with("data: [DONE]\n\n"),
            "{}",
            streamed.text()
        );
    }

    /// Reads each of the [`decoding`] streams to its end, asserting none broke.
    async fn end_cleanly(
        background: Vec<(client::OpenStream, (tokio::time::Instant, bytes::Bytes))>,
    ) {
        for (stream, first) in background {
            let rest = stream.collect_after(first).await;
            assert!(rest.error.is_none(), "{:?}", rest.error);
        }
    }

    /// A 3000-word chat (3000 prompt tokens on the simulated replica, about 1500 estimated: over the
    /// 1000-token bound), streamed, asking for 8 tokens.
    fn sim_chat() -> String {
        format!(
            r#"{{"model":"sim-fast","messages":[{{"role":"user","content":"{}"}}],"stream":true,"max_tokens":8}}"#,
            vec!["w"; 3000].join(" ")
        )
    }

    /// Sends [`sim_chat`] and returns its prompt tokens, asserting a complete stream of exactly 8
    /// output tokens (the prefill's one token is not the client's).
    async fn exact_stream(proxy: &ServerHandle) -> f64 {
        whole_stream(proxy, &sim_chat()).await;
        let text = proxy.metrics.render();
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_tokens_total",
                &[("gen_ai_token_type", "output")]
            ),
            8.0
        );
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "input")],
        )
    }

    #[tokio::test]
    async fn disaggregated_on_simulated_replicas_the_decode_replica_computes_one_prompt_token() {
        let (prefill, decode, proxy) = simulated(false, false, |_| {}).await;
        let prompt = exact_stream(&proxy).await;
        assert_eq!(
            prompt, 3010.0,
            "3000 words and the sim's 10 template tokens"
        );
        assert_eq!(results(&proxy, "remote"), 1.0);
        assert_eq!(
            sim_counter(
                &prefill,
                "vllm:kv_transfer_tokens_total",
                &[("direction", "sent")]
            )
            .await,
            prompt
        );
        assert_eq!(
            sim_counter(
                &decode,
                "vllm:kv_transfer_tokens_total",
                &[("direction", "received")]
            )
            .await,
            prompt
        );
        assert_eq!(
            computed(&decode).await,
            1.0,
            "the decode replica computed only the last prompt token"
        );
        assert_eq!(
            computed(&prefill).await,
            prompt,
            "the prefill replica computed the prompt"
        );
    }

    /// The prompt tokens of the requests that have ended, by the proxy's count (the replicas'
    /// usage): the streams still decoding are counted at their end.
    fn ended_prompt_tokens(proxy: &ServerHandle) -> f64 {
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "input")],
        )
    }

    /// A chat of `words` words (as many prompt tokens on the simulated replica), streamed,
    /// asking for `max_tokens`.
    fn sim_words(words: usize, max_tokens: u64) -> String {
        format!(
            r#"{{"model":"sim-fast","messages":[{{"role":"user","content":"{}"}}],"stream":true,"max_tokens":{max_tokens}}}"#,
            vec!["w"; words].join(" ")
        )
    }

    /// The decode pool places by `balance = "slo"`, so its latency models decide each prefill;
    /// the thresholds are set so that the threshold policy would hand every prompt off. A stall is
    /// past 4 x 20 ms = 80 ms; the priors put a 4000-word prompt's prefill (about 2000 estimated
    /// tokens) at about 100 ms, a 10-word one's at under 1 ms.
    fn predicting(config: &mut Config) {
        config.pools[1].balance = tokenmeter::config::BalanceLoad::Slo;
        if let Some(handoff) = config.pools[1].handoff.as_mut() {
            handoff.min_prompt_tokens = 1;
            handoff.short_queue_tokens = 1_000_000;
        }
        config.slo.tpot = Duration::from_millis(20);
    }

    /// `n` long streams decoding on the decode replica, each past its first frame.
    async fn decoding(
        proxy: &ServerHandle,
        n: usize,
    ) -> Vec<(client::OpenStream, (tokio::time::Instant, bytes::Bytes))> {
        let mut streams = Vec::new();
        for _ in 0..n {
            let mut stream = client::open(proxy.traffic_addr, CHAT, &sim_words(10, 3000)).await;
            assert_eq!(stream.status, 200);
            let first = stream.next_frame().await.expect("a frame").expect("frame");
            streams.push((stream, first));
        }
        streams
    }

    /// A prefill the prediction sent to the prefill pool that fails there is prefilled by the
    /// decode replica: the client reads a whole stream, and the fallback is counted.
    #[tokio::test]
    async fn disaggregated_by_prediction_a_failed_handoff_is_prefilled_by_the_decode_replica() {
        let (_prefill, decode, proxy) = simulated(true, false, predicting).await;
        let background = decoding(&proxy, 2).await;
        let before = computed(&decode).await;
        whole_stream(&proxy, &sim_words(4000, 4)).await;
        assert_eq!(results(&proxy, "transfer_failed"), 1.0);
        assert_eq!(
            computed(&decode).await - before,
            ended_prompt_tokens(&proxy),
            "the decode replica computed the whole document"
        );
        end_cleanly(background).await;
    }

    /// A decode pool with `balance = "slo"` decides by prediction: a document whose prefill would
    /// stall the streams decoding on its decode replica goes to the prefill pool; a chat, or the
    /// same document with no stream to stall, prefills where it decodes.
    #[tokio::test]
    async fn disaggregated_by_prediction_a_prefill_goes_remote_only_when_it_would_stall_streams() {
        let (prefill, _decode, proxy) = simulated(false, false, predicting).await;
        let document = sim_words(4000, 4);

        let background = decoding(&proxy, 2).await;
        let streamed = client::post(proxy.traffic_addr, CHAT, &document).await;
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        assert_eq!(results(&proxy, "remote"), 1.0, "it would stall two streams");
        assert_eq!(
            computed(&prefill).await,
            ended_prompt_tokens(&proxy),
            "the prefill replica computed the document, and nothing else"
        );
        let streamed = client::post(proxy.traffic_addr, CHAT, &sim_words(10, 4)).await;
        assert_eq!(streamed.status, 200);
        assert_eq!(
            results(&proxy, "local_short"),
            1.0,
            "a chat's prefill stalls nobody (the two streams, still open, are counted at their end)"
        );
        end_cleanly(background).await;
        // Nothing decoding any more: the document prefills where it decodes.
        let streamed = client::post(proxy.traffic_addr, CHAT, &document).await;
        assert_eq!(streamed.status, 200);
        assert_eq!(
            results(&proxy, "local_short"),
            4.0,
            "no stream to stall (and the three chats)"
        );
        assert_eq!(results(&proxy, "remote"), 1.0);
    }

    /// A prefill the prefill pool is predicted to take longer than `prefill_timeout` over stays
    /// where it decodes, though it stalls the streams there: handed off, it would be abandoned at
    /// the timeout and prefilled there anyway, late by the timeout.
    #[tokio::test]
    async fn disaggregated_by_prediction_a_prefill_predicted_past_the_timeout_stays_where_it_decodes(
    ) {
        let (prefill, decode, proxy) = simulated(false, false, |config| {
            predicting(config);
            if let Some(handoff) = config.pools[1].handoff.as_mut() {
                // The priors put the document's prefill at about 120 ms.
                handoff.prefill_timeout = Duration::from_millis(50);
            }
        })
        .await;
        let background = decoding(&proxy, 2).await;
        let before = computed(&decode).await;
        whole_stream(&proxy, &sim_words(4000, 4)).await;
        assert_eq!(results(&proxy, "local_busy"), 1.0);
        assert_eq!(results(&proxy, "remote"), 0.0);
        assert_eq!(results(&proxy, "prefill_timeout"), 0.0, "never tried");
        assert_eq!(
            computed(&prefill).await,
            0.0,
            "the prefill replica was not asked"
        );
        assert_eq!(
            computed(&decode).await - before,
            ended_prompt_tokens(&proxy),
            "the decode replica computed the whole document"
        );
        end_cleanly(background).await;
    }

    #[tokio::test]
    async fn disaggregated_on_simulated_replicas_a_failed_transfer_is_prefilled_by_the_decode_replica(
    ) {
        for (on_prefill, on_decode) in [(true, false), (false, true)] {
            let (_prefill, decode, proxy) = simulated(on_prefill, on_decode, |_| {}).await;
            let prompt = exact_stream(&proxy).await;
            assert_eq!(
                results(&proxy, "transfer_failed"),
                1.0,
                "fault on the prefill side: {on_prefill}"
            );
            assert_eq!(
                computed(&decode).await,
                prompt,
                "the decode replica computed the whole prompt (fault on the prefill side: {on_prefill})"
            );
            assert_eq!(
                prom::sum(
                    &proxy.metrics.render(),
                    "tokenmeter_requests_total",
                    &[("outcome", "ok")]
                ),
                1.0
            );
        }
    }
}
