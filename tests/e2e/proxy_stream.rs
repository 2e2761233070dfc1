//! End to end over loopback: a scripted vLLM-like upstream, the proxy, and a client that stamps every
//! frame. What the proxy records must equal what the script did, and what the client receives must
//! equal what the upstream sent.

use crate::support;
use std::time::Duration;

use support::backend::{Backend, Script, Seen};
use support::timeline::{self, Window};
use support::{client, config_for, events_of, fixture, prom, start_proxy};
use tokenmeter::ServerHandle;

const CHAT: &str = "/v1/chat/completions";
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn chat_body(include_usage: Option<bool>) -> String {
    let options = match include_usage {
        Some(flag) => format!(r#","stream_options":{{"include_usage":{flag}}}"#),
        None => String::new(),
    };
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"Hi"}}],"stream":true,"max_tokens":7{options}}}"#
    )
}

/// Answers like vLLM with `fixture`'s events: the usage-only chunk only when the request asked for
/// usage. `first` is the prefill time (before the role and first token, sent back to back) and `gap`
/// the decode step between later token chunks.
fn vllm_like(
    fixture_name: &'static str,
    first: Duration,
    gap: Duration,
) -> impl Fn(&Seen) -> Script {
    let events = events_of(&fixture(fixture_name));
    move |seen: &Seen| {
        let body = String::from_utf8_lossy(&seen.body);
        let wants_usage = body.contains(r#""include_usage":true"#);
        let mut script = Vec::new();
        for (i, event) in events.iter().enumerate() {
            let text = String::from_utf8_lossy(event);
            let usage_only = text.contains(r#""choices":[]"#);
            if usage_only && !wants_usage {
                continue;
            }
            let delay = match i {
                0 => first,
                1 => Duration::ZERO,
                _ if usage_only || text.contains("[DONE]") => Duration::ZERO,
                _ => gap,
            };
            script.push((delay, event.clone()));
        }
        Script::sse(script)
    }
}

#[tokio::test]
async fn scripted_delays_are_metered_exactly() {
    let mut backend = Backend::start(vllm_like("vllm-chat-usage.sse", ms(300), ms(80))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat_body(Some(true))).await;
    assert_eq!(streamed.status, 200, "status");
    assert!(streamed.error.is_none(), "clean end: {:?}", streamed.error);

    // What the proxy can have measured (support/timeline.rs): each figure lies between what the
    // backend's writes and the client's reads allow, whatever the machine's load; the windows'
    // lower ends hold the script (300 ms to the first token, 80 ms between tokens).
    let seen = backend.next_request().await;
    let writes = backend.writes();
    assert_eq!(
        writes.len(),
        11,
        "role, 7 tokens, usage, [DONE] and the end"
    );
    let at = timeline::arrivals(&writes, &streamed);
    let start = timeline::request_start(&streamed, &seen);
    let first = timeline::write_with(&writes, b"\"Hello\"");
    let last = first + 6;
    let ttft_window = Window::between(start, at[first]);
    let gap_windows: Vec<Window> = (first..last)
        .map(|i| Window::between(at[i], at[i + 1]))
        .collect();
    let decode_window = Window::between(at[first], at[last]);
    assert!(
        ttft_window.low >= 0.300 && decode_window.low >= 6.0 * 0.080,
        "the script's delays bound the windows from below: {ttft_window:?}, {decode_window:?}"
    );

    let text = proxy.metrics.render();
    let chat = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_request_model", MODEL),
    ];
    let ttft = prom::value(
        &text,
        "gen_ai_server_time_to_first_token_seconds_sum",
        &chat,
    );
    ttft_window.assert_contains("TTFT (the scripted 300 ms)", ttft);
    let gaps = prom::value(&text, "tokenmeter_inter_token_latency_seconds_count", &chat);
    assert_eq!(
        gaps, 6.0,
        "7 token events give 6 gaps, one observation each"
    );
    let itl_sum = prom::value(&text, "tokenmeter_inter_token_latency_seconds_sum", &chat);
    decode_window.assert_contains("ITL sum (6 x 80 ms)", itl_sum);
    // Each bucket's count lies between the gaps surely under its bound and those maybe under it;
    // on an idle machine the two are equal (no gap under 50 ms, all six under 150 ms).
    for le in [0.05, 0.15] {
        let label = format!("{le}");
        let bucket = [chat[0], chat[1], ("le", label.as_str())];
        let count = prom::value(
            &text,
            "tokenmeter_inter_token_latency_seconds_bucket",
            &bucket,
        );
        let surely = gap_windows.iter().filter(|w| w.surely_at_most(le)).count() as f64;
        let maybe = gap_windows.iter().filter(|w| w.maybe_at_most(le)).count() as f64;
        assert!(
            (surely..=maybe).contains(&count),
            "{count} gaps <= {le} s; the windows allow {surely}..={maybe}: {gap_windows:?}"
        );
    }
    let tpot = prom::value(
        &text,
        "gen_ai_server_time_per_output_token_seconds_sum",
        &chat,
    );
    decode_window
        .per(6.0)
        .assert_contains("TPOT = (last - first) / (7 - 1), ~80 ms", tpot);
    let e2e = prom::value(&text, "gen_ai_server_request_duration_seconds_sum", &chat);
    Window::between(start, at[writes.len() - 1])
        .assert_contains("E2E (300 + 6 x 80 ms), to the body's end", e2e);
    let ttfb = prom::value(&text, "tokenmeter_time_to_first_byte_seconds_sum", &chat);
    Window::between(start, at[0]).assert_contains(
        "TTFB (the role chunk, which comes with the first token)",
        ttfb,
    );

    let output = [chat[0], chat[1], ("gen_ai_token_type", "output")];
    let input = [chat[0], chat[1], ("gen_ai_token_type", "input")];
    assert_eq!(
        prom::value(&text, "tokenmeter_tokens_total", &output),
        7.0,
        "completion_tokens"
    );
    assert_eq!(
        prom::value(&text, "tokenmeter_tokens_total", &input),
        12.0,
        "prompt_tokens"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_requests_total",
            &[chat[0], ("outcome", "ok")]
        ),
        1.0
    );
    let slo = |slo, result| slo_verdicts(&text, slo, result);
    // The verdict follows the TTFT measured: 300 ms (met) on any machine that is not 500 ms late.
    let ttft_met = if ttft <= 0.800 { 1.0 } else { 0.0 };
    assert_eq!(slo("ttft", "met"), ttft_met, "TTFT {ttft} s against 800 ms");
    assert_eq!(slo("tpot", "missed"), 1.0, "80 ms > 35 ms");
    assert_eq!(
        slo("all", "missed"),
        1.0,
        "one SLO missed is the request missed"
    );
    assert_eq!(slo("all", "met"), 0.0, "not goodput");

    // The proxy's clock starts after the client's: its TTFT is never above the client's.
    let first_token_at = streamed
        .frames
        .iter()
        .find(|(_, bytes)| bytes.windows(8).any(|w| w == b"\"Hello\"}"))
        .map(|(at, _)| *at)
        .expect("the client saw the first token");
    let client_ttft = (first_token_at - streamed.sent_at).as_secs_f64();
    assert!(
        ttft <= client_ttft,
        "proxy TTFT {ttft} <= client TTFT {client_ttft}"
    );
}

/// Sends the same request straight to the backend (no proxy) and returns the body bytes.
async fn direct(backend: &Backend, body: &str) -> Vec<u8> {
    let addr = backend
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("backend addr");
    client::post(addr, CHAT, body).await.bytes()
}

#[tokio::test]
async fn client_without_usage_gets_exactly_the_direct_bytes_and_exact_counts() {
    let mut backend = Backend::start(vllm_like("vllm-chat-usage.sse", ms(20), ms(5))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let body = chat_body(None);

    let expected = direct(&backend, &body).await;
    let seen_direct = backend.next_request().await;
    assert_eq!(
        seen_direct.body,
        body.as_bytes(),
        "sanity: direct request untouched"
    );
    assert_eq!(
        expected,
        fixture("vllm-chat-no-usage.sse"),
        "sanity: no usage chunk when not asked"
    );

    let streamed = client::post(proxy.traffic_addr, CHAT, &body).await;
    let seen = backend.next_request().await;
    let injected = body.replacen(
        r#""max_tokens":7"#,
        r#""max_tokens":7,"stream_options":{"include_usage":true}"#,
        1,
    );
    assert_eq!(
        String::from_utf8_lossy(&seen.body),
        injected,
        "the proxy only added include_usage"
    );
    assert_eq!(
        seen.header("content-length"),
        Some(injected.len().to_string()),
        "length fixed"
    );
    assert_eq!(
        streamed.text(),
        String::from_utf8_lossy(&expected),
        "byte-identical to direct"
    );
    assert_eq!(
        streamed.frames.len(),
        9,
        "one frame per upstream event, usage chunk removed"
    );

    let text = proxy.metrics.render();
    let output = [("gen_ai_token_type", "output")];
    assert_eq!(
        prom::value(&text, "tokenmeter_tokens_total", &output),
        7.0,
        "exact from usage"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "input")]
        ),
        12.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_token_count_source_total",
            &[("source", "usage")]
        ),
        1.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_usage_injections_total",
            &[("result", "injected")]
        ),
        1.0
    );
}

#[tokio::test]
async fn client_that_asked_for_usage_gets_it_untouched() {
    let mut backend = Backend::start(vllm_like("vllm-chat-usage.sse", ms(10), ms(5))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let body = chat_body(Some(true));
    let streamed = client::post(proxy.traffic_addr, CHAT, &body).await;
    let seen = backend.next_request().await;
    assert_eq!(
        seen.body,
        body.as_bytes(),
        "nothing injected: the client asked"
    );
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-usage.sse"),
        "usage chunk delivered"
    );
    assert_eq!(streamed.frames.len(), 10, "frames forwarded one to one");
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_usage_injections_total",
            &[("result", "not_needed")]
        ),
        1.0
    );
}

#[tokio::test]
async fn without_usage_tokens_are_counted_from_events_and_flagged() {
    let backend = Backend::start(vllm_like("vllm-chat-usage.sse", ms(10), ms(5))).await;
    let mut config = config_for(&backend.url);
    config.metering.inject_usage = false;
    let proxy = start_proxy(config).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat_body(None)).await;
    assert_eq!(streamed.bytes(), fixture("vllm-chat-no-usage.sse"));
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0,
        "7 token events"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_token_count_source_total",
            &[("source", "events")]
        ),
        1.0,
        "fallback flagged"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "input")]
        ),
        1.0,
        "without usage, N_in is the router's estimate (REFERENCE §1): \"Hi\" = 2 bytes x 0.25 tokens/byte, rounded"
    );
}

#[tokio::test]
async fn tpot_divides_by_usage_tokens_not_chunks() {
    // Speculative decoding: 4 token chunks carry 9 tokens; TPOT = (last - first) / 8.
    let backend = Backend::start(vllm_like(
        "vllm-chat-multi-token-chunks.sse",
        ms(50),
        ms(80),
    ))
    .await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat_body(Some(true))).await;
    assert!(streamed.error.is_none());
    let writes = backend.writes();
    let at = timeline::arrivals(&writes, &streamed);
    let first = timeline::write_with(&writes, b"\"Paris is\"");
    let last = timeline::write_with(&writes, b"\".\"");
    assert_eq!(last, first + 3, "4 token chunks");
    let text = proxy.metrics.render();
    let tpot = prom::value(
        &text,
        "gen_ai_server_time_per_output_token_seconds_sum",
        &[],
    );
    // Divided by 8 (usage's 9 tokens less the first), not by 3 (the chunks' gaps): ~30 ms, not 80.
    Window::between(at[first], at[last])
        .per(8.0)
        .assert_contains("TPOT ~ 3 x 80 ms / 8 = 30 ms", tpot);
    assert_eq!(
        prom::value(&text, "tokenmeter_inter_token_latency_seconds_count", &[]),
        3.0,
        "3 gaps"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        9.0
    );
}

#[tokio::test]
async fn every_fixture_passes_through_unchanged_and_counted() {
    for (name, events, tokens) in [
        ("vllm-chat-n2.sse", 6, 6),
        ("vllm-chat-reasoning.sse", 5, 5),
        ("vllm-chat-tool-calls.sse", 4, 12),
        ("vllm-chat-continuous-usage.sse", 5, 5),
    ] {
        let backend = Backend::start(vllm_like(name, ms(5), ms(2))).await;
        let proxy = start_proxy(config_for(&backend.url)).await;
        let streamed = client::post(proxy.traffic_addr, CHAT, &chat_body(Some(true))).await;
        assert_eq!(streamed.bytes(), fixture(name), "{name}: bytes unchanged");
        let text = proxy.metrics.render();
        let gaps = prom::value(&text, "tokenmeter_inter_token_latency_seconds_count", &[]);
        assert_eq!(gaps, f64::from(events - 1), "{name}: token events - 1 gaps");
        assert_eq!(
            prom::value(
                &text,
                "tokenmeter_tokens_total",
                &[("gen_ai_token_type", "output")]
            ),
            f64::from(tokens),
            "{name}: output tokens"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn completions_are_metered_as_text_completion() {
    let backend = Backend::start(vllm_like("vllm-completions.sse", ms(30), ms(10))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let body = format!(r#"{{"model":"{MODEL}","prompt":"Once","stream":true,"max_tokens":4}}"#);
    let streamed = client::post(proxy.traffic_addr, "/v1/completions", &body).await;
    let mut expected = fixture("vllm-completions.sse");
    let usage = events_of(&expected)
        .into_iter()
        .find(|e| e.windows(12).any(|w| w == br#""choices":[]"#))
        .expect("usage event");
    let at = expected
        .windows(usage.len())
        .position(|w| w == usage.as_slice())
        .expect("position");
    expected.drain(at..at + usage.len());
    assert_eq!(
        streamed.text(),
        String::from_utf8_lossy(&expected),
        "usage chunk stripped"
    );
    let text = proxy.metrics.render();
    let op = [
        ("gen_ai_operation_name", "text_completion"),
        ("outcome", "ok"),
    ];
    assert_eq!(prom::value(&text, "tokenmeter_requests_total", &op), 1.0);
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        4.0
    );
}

/// Answers like llama.cpp's `llama-server` (recorded, tests/fixtures/llamacpp/): without
/// `include_usage` its finish chunk carries `timings`; with it, the usage chunk does. The finish
/// chunk, the usage chunk and `[DONE]` leave in one write, as the server sends them.
fn llama_like(seen: &Seen) -> Script {
    let wants_usage = String::from_utf8_lossy(&seen.body).contains(r#""include_usage":true"#);
    let name = if wants_usage {
        "llamacpp-chat-usage.sse"
    } else {
        "llamacpp-chat-no-usage.sse"
    };
    let stream = support::fixture_in("llamacpp", name);
    let events = events_of(&stream);
    let tail = if wants_usage { 3 } else { 2 };
    let (head, last) = events.split_at(events.len() - tail);
    let mut script: Vec<(Duration, Vec<u8>)> =
        head.iter().map(|event| (ms(5), event.clone())).collect();
    script.push((ms(5), last.concat()));
    Script::sse(script)
}

#[tokio::test]
async fn members_the_usage_chunk_took_are_given_back_where_the_server_puts_them() {
    let mut backend = Backend::start(llama_like).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let body = chat_body(None);
    let expected = direct(&backend, &body).await;
    backend.next_request().await;
    assert_eq!(
        expected,
        support::fixture_in("llamacpp", "llamacpp-chat-no-usage.sse"),
        "sanity: without include_usage the finish chunk carries timings"
    );
    let streamed = client::post(proxy.traffic_addr, CHAT, &body).await;
    let seen = backend.next_request().await;
    assert!(
        String::from_utf8_lossy(&seen.body).contains(r#""include_usage":true"#),
        "usage was injected"
    );
    assert_eq!(
        streamed.text(),
        String::from_utf8_lossy(&expected),
        "byte-identical to direct: timings back on the finish chunk, no usage chunk"
    );
    let text = proxy.metrics.render();
    let tokens = |kind: &str| {
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", kind)],
        )
    };
    assert_eq!(tokens("output"), 5.0, "exact from the stripped usage");
    assert_eq!(
        tokens("input"),
        64.0,
        "prompt tokens from the stripped usage"
    );
    let cache = |result: &str| {
        prom::value(
            &text,
            "tokenmeter_prompt_cache_tokens_total",
            &[("result", result), ("gen_ai_request_model", MODEL)],
        )
    };
    assert_eq!(
        (cache("hit"), cache("miss")),
        (63.0, 1.0),
        "prompt_tokens_details.cached_tokens 63 of 64 prompt tokens"
    );
}

#[tokio::test]
async fn an_injected_request_the_backend_refuses_is_counted_rejected() {
    let backend = Backend::start(|_: &Seen| {
        Script::json(
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#,
        )
    })
    .await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let answered = client::post(proxy.traffic_addr, CHAT, &chat_body(None)).await;
    assert_eq!(answered.status, 400, "the backend's answer is passed on");
    let text = proxy.metrics.render();
    let injections = |result: &str| {
        prom::sum(
            &text,
            "tokenmeter_usage_injections_total",
            &[("result", result)],
        )
    };
    assert_eq!(
        injections("rejected"),
        1.0,
        "the injected request was refused"
    );
    assert_eq!(injections("injected"), 0.0, "not counted as taken");
}

/// Streams one chat (`body`) through `proxy` for each class, named in `x-slo-class` (or none),
/// each to a clean end.
async fn stream_each_class(proxy: &ServerHandle, classes: &[Option<&str>], body: &str) {
    for class in classes {
        let headers: Vec<(&str, &str)> = class.map(|c| ("x-slo-class", c)).into_iter().collect();
        let streamed = client::open_with(
            proxy.traffic_addr,
            client::Protocol::Http1,
            "POST",
            CHAT,
            body,
            &headers,
        )
        .await
        .collect()
        .await;
        assert_eq!(streamed.status, 200, "status");
        assert!(streamed.error.is_none(), "clean end: {:?}", streamed.error);
    }
}

/// The streams the proxy judged on `slo` with `result`, summed over every series.
fn slo_verdicts(text: &str, slo: &str, result: &str) -> f64 {
    prom::sum(
        text,
        "tokenmeter_slo_requests_total",
        &[("slo", slo), ("result", result)],
    )
}

/// With `[slo] max_gap`, a stream that stalls once misses its SLO though its TTFT and its mean
/// TPOT are met: the stall a mean hides is scored. A class with a looser gap target meets it.
#[tokio::test]
async fn a_stall_misses_the_gap_target_that_ttft_and_tpot_do_not_see() {
    // Seven token events, the gaps 10 ms but one of 600 ms: TPOT ~108 ms, within 500 ms; the
    // largest gap ~600 ms, past 250 ms. A sleep never fires early and the targets leave hundreds
    // of ms of room, so the verdicts hold on a loaded machine.
    let events = events_of(&fixture("vllm-chat-usage.sse"));
    let backend = Backend::start(move |_: &Seen| {
        let script = events
            .iter()
            .enumerate()
            .map(|(i, event)| {
                let delay = match i {
                    0 => ms(50),
                    5 => ms(600),
                    2..=7 => ms(10),
                    _ => Duration::ZERO,
                };
                (delay, event.clone())
            })
            .collect();
        Script::sse(script)
    })
    .await;
    let mut config = config_for(&backend.url);
    config.slo = tokenmeter::config::Config::from_toml(
        r#"
[slo]
ttft = "5s"
tpot = "500ms"
max_gap = "250ms"

[slo.classes.relaxed]
max_gap = "2s"
"#,
    )
    .expect("valid")
    .slo;
    let proxy = start_proxy(config).await;
    stream_each_class(&proxy, &[None, Some("relaxed")], &chat_body(Some(true))).await;
    let text = proxy.metrics.render();
    let slo = |slo, result| slo_verdicts(&text, slo, result);
    assert_eq!((slo("ttft", "met"), slo("ttft", "missed")), (2.0, 0.0));
    assert_eq!((slo("tpot", "met"), slo("tpot", "missed")), (2.0, 0.0));
    assert_eq!(
        (slo("gap", "met"), slo("gap", "missed")),
        (1.0, 1.0),
        "the 600 ms stall misses 250 ms, and meets the relaxed class's 2 s"
    );
    assert_eq!(
        (slo("all", "met"), slo("all", "missed")),
        (1.0, 1.0),
        "all includes the gap target: one request is not goodput"
    );
    // The gap targets are exact ITL bucket edges: both stalls lie above 250 ms, below 2 s.
    let chat = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_request_model", MODEL),
    ];
    let itl = "tokenmeter_inter_token_latency_seconds";
    let bucket = |le: &'static str| {
        prom::value(
            &text,
            &format!("{itl}_bucket"),
            &[chat[0], chat[1], ("le", le)],
        )
    };
    let gaps = prom::value(&text, &format!("{itl}_count"), &chat);
    assert_eq!(gaps, 12.0, "6 gaps a stream");
    assert!(bucket("0.25") <= gaps - 2.0, "the stalls are over 250 ms");
    assert_eq!(bucket("2"), gaps, "and under 2 s");
}

/// Each stream is judged against its own targets: its class's (by `x-slo-class`), over its
/// model's, over the defaults; and every target is an exact bucket edge.
#[tokio::test]
async fn slo_verdicts_follow_the_request_class_and_model() {
    // TTFT 300 ms and TPOT 60 ms, scripted: a sleep never fires early, so the misses below hold
    // on any machine. The batch class's targets are generous, since meeting them is what shows
    // they apply: 4.2 s of room for the first token and 6 x 0.84 s for the decode, seconds more
    // than a loaded 2-core machine delays one stream.
    let backend = Backend::start(vllm_like("vllm-chat-usage.sse", ms(300), ms(60))).await;
    let mut config = config_for(&backend.url);
    config.slo = tokenmeter::config::Config::from_toml(&format!(
        r#"
[slo.models."{MODEL}"]
ttft = "275ms"

[slo.classes.batch]
ttft = "4.5s"
tpot = "900ms"
"#
    ))
    .expect("valid")
    .slo;
    let proxy = start_proxy(config).await;
    stream_each_class(
        &proxy,
        &[None, Some("batch"), Some("no-such-class")],
        &chat_body(None),
    )
    .await;
    let text = proxy.metrics.render();
    let slo = |slo, result| slo_verdicts(&text, slo, result);
    // TTFT ~300 ms, TPOT ~60 ms: the model's 275 ms target misses TTFT and the default 35 ms
    // misses TPOT; the batch class (4.5 s, 900 ms) meets both. An unknown class is the model's.
    assert_eq!((slo("ttft", "met"), slo("ttft", "missed")), (1.0, 2.0));
    assert_eq!((slo("tpot", "met"), slo("tpot", "missed")), (1.0, 2.0));
    assert_eq!((slo("all", "met"), slo("all", "missed")), (1.0, 2.0));
    let chat = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_request_model", MODEL),
    ];
    let bucket =
        |name: &str, le: &'static str| prom::value(&text, name, &[chat[0], chat[1], ("le", le)]);
    let ttft = "gen_ai_server_time_to_first_token_seconds_bucket";
    let tpot = "gen_ai_server_time_per_output_token_seconds_bucket";
    assert_eq!(bucket(ttft, "0.275"), 0.0, "the model's target is an edge");
    assert_eq!(bucket(ttft, "4.5"), 3.0, "the class's target is an edge");
    assert_eq!(
        bucket(tpot, "0.9"),
        3.0,
        "the class's TPOT target is an edge"
    );
    assert_eq!(bucket(tpot, "0.035"), 0.0, "the default stays one");
}
