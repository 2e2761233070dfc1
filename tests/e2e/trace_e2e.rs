//! OpenTelemetry traces end to end: the proxy in front of a scripted backend exports spans to a
//! real OTLP receiver (the official opentelemetry-proto definitions, served by tonic for gRPC and
//! decoded by prost for HTTP/protobuf), and every assertion is on what arrived there, what the
//! backend saw, and what the client got.

use crate::support;
use crate::support::otlp;
use std::time::Duration;

use otlp::{Protocol as Otlp, ReceivedSpan, Receiver};
use support::backend::{replay, Backend, Script, Step};
use support::client::{open_with, post, Protocol};
use support::ports::Refusing;
use support::timeline::{self, Moment, Window};
use support::{config_for, fixture, prom, start_proxy};
use tokenmeter::config::{Config, OtlpProtocol, Sampler};
use tokenmeter::context::phases::PHASES;
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const WAIT: Duration = Duration::from_secs(10);
const EXPORTED: &str = "tokenmeter_trace_spans_exported_total";
const DROPPED: &str = "tokenmeter_trace_spans_dropped_total";

fn traceparent(flags: &str) -> String {
    format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-{flags}")
}

/// A proxy config exporting to `receiver` at once (a short batch delay), every new trace sampled.
fn traced(upstream: &str, receiver: &Receiver) -> Config {
    let mut config = config_for(upstream);
    config.tracing.endpoint = Some(receiver.endpoint());
    config.tracing.protocol = Some(match receiver.protocol() {
        Otlp::Grpc => OtlpProtocol::Grpc,
        Otlp::HttpProtobuf => OtlpProtocol::HttpProtobuf,
    });
    config.tracing.batch_delay = Duration::from_millis(20);
    // Only a bound for a collector that fails (tests that stop or refuse it set their own): an
    // export to the in-process receiver takes milliseconds, and a generous bound keeps a loaded
    // machine's delays from ever turning one into a drop.
    config.tracing.export_timeout = Some(Duration::from_secs(5));
    config
}

fn by_kind<'a>(spans: &'a [ReceivedSpan], kind: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.kind_name() == kind).collect()
}

fn seconds(span: &ReceivedSpan, key: &str) -> f64 {
    span.f64_attr(key)
        .unwrap_or_else(|| panic!("{key} missing on {}: {:?}", span.name, span.attributes))
}

/// Where the largest gap between consecutive token arrivals lies, each arrival somewhere in its
/// moment: at least the largest gap that surely was (and the mean gap, which the largest is not
/// below), at most the largest that could have been.
fn max_gap_window(tokens: &[Moment]) -> Window {
    let gaps: Vec<Window> = tokens
        .windows(2)
        .map(|pair| Window::between(pair[0], pair[1]))
        .collect();
    let mean = Window::between(tokens[0], tokens[tokens.len() - 1]).per(gaps.len() as f64);
    Window {
        low: gaps.iter().map(|g| g.low).fold(mean.low, f64::max),
        high: gaps.iter().map(|g| g.high).fold(0.0, f64::max),
    }
}

#[tokio::test]
async fn a_stream_is_a_server_span_with_its_attempt_and_ttft_split() {
    let receiver = Receiver::start(Otlp::HttpProtobuf).await;
    // The first event 150 ms after the head, then 20 ms apart.
    let events = support::events_of(&fixture("vllm-chat-usage.sse"));
    let mut backend = Backend::start(move |_| {
        let mut steps: Vec<(Duration, Vec<u8>)> = events
            .iter()
            .map(|e| (Duration::from_millis(20), e.clone()))
            .collect();
        steps[0].0 = Duration::from_millis(150);
        Script::sse(steps)
    })
    .await;
    let proxy = start_proxy(traced(&backend.url, &receiver)).await;
    let parent = traceparent("01");
    let open = open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        BODY,
        &[("traceparent", &parent), ("tracestate", "vendor=abc")],
    )
    .await;
    // The client has the response head, so the proxy had it (and stamped it) before now.
    let head_at = Instant::now();
    let streamed = open.collect().await;
    assert_eq!(streamed.status, 200);
    assert!(
        streamed.headers.get("server-timing").is_none(),
        "server-timing is opt-in"
    );
    let seen = backend.next_request().await;
    let spans = receiver.wait_for_spans(2, WAIT).await;
    assert_eq!(
        spans.len(),
        2,
        "one server span and one attempt: {spans:#?}"
    );
    let server = by_kind(&spans, "server")[0];
    let attempt = by_kind(&spans, "client")[0];

    // The client's trace continues: same trace, the client's span as the parent.
    assert_eq!(server.trace_id, CLIENT_TRACE);
    assert_eq!(server.parent_span_id, CLIENT_SPAN);
    assert_eq!(attempt.trace_id, CLIENT_TRACE);
    assert_eq!(
        attempt.parent_span_id, server.span_id,
        "the attempt is the server span's child"
    );
    assert_eq!(
        seen.header("traceparent").as_deref(),
        Some(format!("00-{CLIENT_TRACE}-{}-01", attempt.span_id).as_str()),
        "the backend's parent is the attempt that carried the request"
    );
    assert_eq!(
        seen.header("tracestate").as_deref(),
        Some("vendor=abc"),
        "unchanged"
    );
    assert_eq!(
        server.resource.get("service.name").and_then(|v| v.as_str()),
        Some("tokenmeter")
    );

    // GenAI conventions.
    assert_eq!(server.name, "chat m1");
    assert_eq!(server.str_attr("gen_ai.operation.name"), Some("chat"));
    assert_eq!(server.str_attr("gen_ai.request.model"), Some("m1"));
    assert_eq!(server.int_attr("gen_ai.usage.input_tokens"), Some(12));
    assert_eq!(server.int_attr("gen_ai.usage.output_tokens"), Some(7));
    assert_eq!(server.str_attr("server.address"), Some("127.0.0.1"));
    let port: i64 = backend.url.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(server.int_attr("server.port"), Some(port));
    assert_eq!(server.int_attr("http.response.status_code"), Some(200));
    assert_eq!(server.str_attr("tokenmeter.outcome"), Some("ok"));
    assert_eq!(server.str_attr("tokenmeter.pool"), Some("default"));
    assert_eq!(server.str_attr("tokenmeter.route.reason"), Some("rule"));
    assert_eq!(server.int_attr("tokenmeter.attempts"), Some(1));
    assert_eq!(server.status_code, 0, "unset: the request went well");
    assert_eq!(attempt.name, "POST /v1/chat/completions");
    assert_eq!(attempt.int_attr("tokenmeter.attempt"), Some(1));
    assert_eq!(attempt.int_attr("http.response.status_code"), Some(200));

    // TTFT against the controlled backend, and its split, each figure inside the window the
    // backend's writes and the client's reads allow (support::timeline): exact on an idle
    // machine, and still true on a loaded one, where the windows widen by the delays that
    // happened. The first token is "Hello", not the role chunk before it.
    let writes = backend.writes();
    let arrivals = timeline::arrivals(&writes, &streamed);
    let start = timeline::request_start(&streamed, &seen);
    let first = timeline::write_with(&writes, b"\"Hello\"");
    let ttft = seconds(server, "tokenmeter.time_to_first_token");
    let ttft_window = Window::between(start, arrivals[first]);
    assert!(
        ttft_window.low >= 0.170,
        "the script: the first token is written 150 + 20 ms after the backend read the request \
         ({ttft_window:?})"
    );
    ttft_window.assert_contains("TTFT (the role chunk is not a token)", ttft);
    let phases: f64 = PHASES
        .iter()
        .map(|p| seconds(server, &format!("tokenmeter.phase.{p}")))
        .sum();
    assert!(
        (phases - ttft).abs() < 2e-6,
        "the phases add up to the TTFT: {phases} vs {ttft}"
    );
    // The response head reached the proxy after the backend read the request (it writes the head
    // then) and before it reached the client. The backend's 150 + 20 ms wait comes after the
    // head, so it is in first_token, and the phases before it fit between request and head.
    let head = Moment {
        earliest: seen.at,
        latest: head_at,
    };
    let first_token_phase = seconds(server, "tokenmeter.phase.first_token");
    Window::between(head, arrivals[first]).assert_contains(
        "the first_token phase (the backend's wait)",
        first_token_phase,
    );
    Window::between(start, head).assert_contains(
        "the phases before the response head",
        ttft - first_token_phase,
    );
    // The gaps between the seven tokens (20 ms apart in the script), and the stalls among them
    // (gaps of at least metering.stall_threshold, 500 ms by default): as many as surely were, at
    // most as many as could have been; on an idle machine that is exactly 0.
    let last = first + 6;
    let needle = br#""content":"?""#;
    assert!(
        writes[last]
            .bytes
            .windows(needle.len())
            .any(|w| w == needle),
        "the seventh token is the last: {:?}",
        String::from_utf8_lossy(&writes[last].bytes)
    );
    let tokens = &arrivals[first..=last];
    max_gap_window(tokens).assert_contains(
        "the largest gap between tokens",
        seconds(server, "tokenmeter.max_token_gap"),
    );
    let threshold = Config::default().metering.stall_threshold.as_secs_f64();
    let gaps: Vec<Window> = tokens
        .windows(2)
        .map(|pair| Window::between(pair[0], pair[1]))
        .collect();
    let surely = gaps.iter().filter(|g| g.low >= threshold).count() as i64;
    let maybe = gaps.iter().filter(|g| g.high >= threshold).count() as i64;
    let stalls = server
        .int_attr("tokenmeter.stalls")
        .expect("tokenmeter.stalls");
    assert!(
        (surely..=maybe).contains(&stalls),
        "{stalls} stalls: {surely} gaps surely reached {threshold} s, {maybe} may have"
    );
    // The proxy's own time before the backend had the request: spent after the request head and
    // before the proxy could read the response head (it had written the request by then), and
    // inside the phases before that head. The backend's wait cannot be in it.
    let overhead = seconds(server, "tokenmeter.gateway_overhead.request");
    Window {
        low: 0.0,
        high: (head_at - streamed.sent_at).as_secs_f64(),
    }
    .assert_contains(
        "the gateway overhead before the backend had the request",
        overhead,
    );
    assert!(
        overhead <= ttft - first_token_phase + 2e-6,
        "the overhead ({overhead} s) is part of the phases before the response head ({} s)",
        ttft - first_token_phase
    );
    let first_token = server.events_named("first_token");
    assert_eq!(
        first_token.len(),
        1,
        "one event at the first token, none per token"
    );
    assert_eq!(
        server.events.len(),
        2,
        "response_head and first_token: {:?}",
        server.events
    );
    let offset = first_token[0].1 - server.start_unix_nanos;
    assert!(
        ((offset as f64 / 1e9) - ttft).abs() < 1e-5,
        "the event sits at the TTFT: {offset} ns vs {ttft} s"
    );
    assert!(attempt.start_unix_nanos >= server.start_unix_nanos);
    assert!(attempt.end_unix_nanos <= server.end_unix_nanos);

    // The same split in the histograms: each phase counted once, their sums adding up to TTFT's.
    let text = proxy.metrics.render();
    let mut sum = 0.0;
    for phase in PHASES {
        let labels = [("pool", "default"), ("phase", phase)];
        assert_eq!(
            prom::sum(&text, "tokenmeter_ttft_phase_seconds_count", &labels),
            1.0,
            "{phase} counted once"
        );
        sum += prom::sum(&text, "tokenmeter_ttft_phase_seconds_sum", &labels);
    }
    let ttft_sum = prom::sum(&text, "gen_ai_server_time_to_first_token_seconds_sum", &[]);
    assert!(
        (sum - ttft_sum).abs() < 2e-6,
        "phase sums {sum} vs TTFT sum {ttft_sum}"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_gateway_overhead_seconds_count",
            &[("stage", "request")]
        ),
        1.0
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_gateway_overhead_seconds_count",
            &[("stage", "first_token")]
        ),
        1.0
    );
    // Counted once the collector answered (just after it had the spans).
    support::wait_for_metric(&proxy, "tokenmeter_trace_spans_exported_total", &[], 2.0).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_retry_after_a_failed_backend_shows_both_attempts() {
    let receiver = Receiver::start(Otlp::Grpc).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    // Refuses every connection for as long as it lives (a released port could be taken).
    let refusing = Refusing::new();
    let dead = refusing.url();
    // Which backend a fresh proxy tries first is random: a new proxy per try, until one tried
    // the dead one first (2^-20 that none of 20 does).
    for _ in 0..20 {
        let mut config = traced(&backend.url, &receiver);
        config.upstream.urls = vec![dead.clone(), backend.url.clone()];
        config.routing.retries = 1;
        let proxy = start_proxy(config).await;
        let streamed = post(proxy.traffic_addr, CHAT, BODY).await;
        assert_eq!(streamed.status, 200, "the retry answered");
        proxy.shutdown().await;
        let spans = receiver.spans();
        let Some(server) = by_kind(&spans, "server")
            .into_iter()
            .find(|s| s.int_attr("tokenmeter.attempts") == Some(2))
        else {
            continue;
        };
        let mut attempts: Vec<&ReceivedSpan> = spans
            .iter()
            .filter(|s| s.parent_span_id == server.span_id)
            .collect();
        attempts.sort_by_key(|s| s.int_attr("tokenmeter.attempt"));
        assert_eq!(attempts.len(), 2, "two attempts: {attempts:#?}");
        let (failed, answered) = (attempts[0], attempts[1]);
        assert_eq!(failed.str_attr("error.type"), Some("upstream_unavailable"));
        assert_eq!(failed.status_code, 2, "error status on the failed attempt");
        let label = |url: &str| url.trim_start_matches("http://").to_owned();
        assert_eq!(
            failed.str_attr("tokenmeter.backend").map(str::to_owned),
            Some(label(&dead))
        );
        assert_eq!(
            answered.str_attr("tokenmeter.backend").map(str::to_owned),
            Some(label(&backend.url))
        );
        assert_eq!(answered.status_code, 0);
        assert!(
            failed.end_unix_nanos <= answered.start_unix_nanos,
            "one after the other"
        );
        assert_eq!(server.str_attr("tokenmeter.outcome"), Some("ok"));
        assert!(
            server.f64_attr("tokenmeter.phase.retries").unwrap() > 0.0,
            "the failed attempt's time is the retries phase"
        );
        return;
    }
    panic!("no proxy of 20 tried the dead backend first");
}

#[tokio::test]
async fn a_client_that_leaves_and_a_refused_request_are_spans_too() {
    let receiver = Receiver::start(Otlp::HttpProtobuf).await;
    let events = support::events_of(&fixture("vllm-chat-usage.sse"));
    let backend = Backend::start(move |_| Script {
        status: 200,
        content_type: "text/event-stream".to_owned(),
        steps: vec![
            Step::Chunk(Duration::from_millis(10), events[0].clone()),
            Step::Chunk(Duration::from_millis(10), events[1].clone()),
            Step::Pause(Duration::from_secs(5)),
        ],
    })
    .await;
    let mut config = traced(&backend.url, &receiver);
    config.server.max_request_body_bytes = 1024;
    let proxy = start_proxy(config).await;

    let mut open = open_with(proxy.traffic_addr, Protocol::Http1, "POST", CHAT, BODY, &[]).await;
    let mut seen: Vec<u8> = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("Hello") {
        let (_, frame) = open.next_frame().await.expect("a frame").expect("no error");
        seen.extend_from_slice(&frame);
    }
    open.disconnect();
    let spans = receiver.wait_for_spans(2, WAIT).await;
    let server = by_kind(&spans, "server")[0];
    assert_eq!(server.str_attr("tokenmeter.outcome"), Some("cancelled"));
    assert_eq!(server.str_attr("error.type"), Some("cancelled"));
    assert_eq!(
        server.status_code, 0,
        "a client leaving is not the server's error"
    );
    assert_eq!(
        server.events_named("first_token").len(),
        1,
        "it had its first token"
    );

    let big = format!(
        r#"{{"model":"m1","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(2048)
    );
    let refused = post(proxy.traffic_addr, CHAT, &big).await;
    assert_eq!(refused.status, 413);
    let spans = receiver.wait_for_spans(3, WAIT).await;
    assert_eq!(
        spans.len(),
        3,
        "the cancelled request's two spans, then the refused one's: {spans:#?}"
    );
    let refused = spans.last().unwrap();
    assert_eq!(
        refused.kind_name(),
        "server",
        "refused before any attempt: one span"
    );
    assert_eq!(refused.int_attr("http.response.status_code"), Some(413));
    assert_eq!(refused.str_attr("tokenmeter.outcome"), Some("client_error"));
    assert_eq!(refused.int_attr("tokenmeter.attempts"), Some(0));
    assert!(refused
        .str_attr("tokenmeter.error")
        .unwrap()
        .contains("exceeds the limit"));
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_malformed_or_unsampled_traceparent_passes_unchanged() {
    let receiver = Receiver::start(Otlp::HttpProtobuf).await;
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(traced(&backend.url, &receiver)).await;

    let hostile = format!("00-{}-{CLIENT_SPAN}-01", "0".repeat(32));
    let too_long = format!("{}{}", traceparent("01"), "-ff".repeat(1365));
    for header in [hostile.as_str(), too_long.as_str(), "garbage"] {
        post_with(&proxy, header).await;
        let seen = backend.next_request().await;
        assert_eq!(
            seen.header("traceparent").as_deref(),
            Some(header),
            "passed upstream as it came"
        );
    }
    let spans = receiver.wait_for_spans(6, WAIT).await;
    for server in by_kind(&spans, "server") {
        assert_eq!(server.parent_span_id, "", "a fresh trace: no parent");
        assert_ne!(server.trace_id, "0".repeat(32));
        assert_ne!(server.trace_id, CLIENT_TRACE);
    }

    // A caller that did not sample: nothing recorded, its header passes as it came.
    let unsampled = traceparent("00");
    post_with(&proxy, &unsampled).await;
    let seen = backend.next_request().await;
    assert_eq!(seen.header("traceparent"), Some(unsampled));
    // Spans leave in the order requests end: once a sampled request's spans are in, the
    // unsampled one's would have been too.
    post_with(&proxy, &traceparent("01")).await;
    backend.next_request().await;
    let spans = receiver.wait_for_spans(8, WAIT).await;
    assert_eq!(spans.len(), 8, "an unsampled trace exports nothing");
    assert!(spans[6..].iter().all(|s| s.trace_id == CLIENT_TRACE));
    proxy.shutdown().await;
}

/// A chat stream with these headers, read to its end.
async fn send(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> support::client::Streamed {
    open_with(addr, Protocol::Http1, "POST", CHAT, BODY, headers)
        .await
        .collect()
        .await
}

/// A chat stream with this `traceparent`, answered 200.
async fn post_with(proxy: &tokenmeter::server::ServerHandle, traceparent: &str) {
    let streamed = send(proxy.traffic_addr, &[("traceparent", traceparent)]).await;
    assert_eq!(streamed.status, 200);
}

#[tokio::test]
async fn a_stopped_collector_costs_the_token_path_nothing_and_is_used_again_when_back() {
    let mut receiver = Receiver::start(Otlp::Grpc).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = traced(&backend.url, &receiver);
    config.tracing.max_queue_spans = 8;
    config.tracing.export_timeout = Some(Duration::from_millis(200));
    let proxy = start_proxy(config).await;
    let direct = post(proxy.traffic_addr, CHAT, BODY).await;
    receiver.wait_for_spans(2, WAIT).await;
    // Counted once the collector's answer is in: before the stop, which could otherwise cut it.
    support::wait_for_metric(&proxy, EXPORTED, &[], 2.0).await;

    receiver.stop().await;
    for _ in 0..30 {
        let streamed = post(proxy.traffic_addr, CHAT, BODY).await;
        assert_eq!(streamed.status, 200);
        assert!(streamed.error.is_none(), "the stream ended cleanly");
        assert_eq!(
            streamed.bytes(),
            direct.bytes(),
            "every stream whole while the collector is down"
        );
    }
    // Every span of the 30 is accounted for: dropped, with a reason. Which reason depends on how
    // long each failing export took (a slow one lets the queue overflow meanwhile), so only their
    // sum is exact here; the overflow itself is made certain, and counted exactly, in
    // a_hanging_collector_overflows_the_queue_and_every_span_is_counted_once.
    support::wait_for_metric(&proxy, DROPPED, &[], 60.0).await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, EXPORTED, &[]),
        2.0,
        "nothing exported while the collector is down"
    );
    let reason = |reason: &str| prom::sum(&text, DROPPED, &[("reason", reason)]);
    assert_eq!(
        reason("queue_full") + reason("export_failed") + reason("timeout"),
        60.0,
        "each span dropped for the queue or the failing export: {text}"
    );
    assert_eq!(
        reason("shutdown"),
        0.0,
        "nothing dropped at shutdown: {text}"
    );

    receiver.restart().await;
    post(proxy.traffic_addr, CHAT, BODY).await;
    support::wait_for_metric(&proxy, EXPORTED, &[], 4.0).await;
    let spans = receiver.spans();
    assert_eq!(
        spans.len(),
        4,
        "the exporter reconnected by itself, and only the new request's spans came: {spans:#?}"
    );
    let (server, attempt) = (
        by_kind(&spans[2..], "server"),
        by_kind(&spans[2..], "client"),
    );
    assert!(
        server.len() == 1 && attempt.len() == 1 && attempt[0].parent_span_id == server[0].span_id,
        "one server span and its attempt: {spans:#?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_hanging_collector_overflows_the_queue_and_every_span_is_counted_once() {
    let receiver = Receiver::start(Otlp::Grpc).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = traced(&backend.url, &receiver);
    config.tracing.max_queue_spans = 8;
    // Far longer than the test: the held export must end when the collector answers, not at a
    // timeout, so that the export task takes nothing from the queue until the test says so.
    config.tracing.export_timeout = Some(Duration::from_secs(60));
    let proxy = start_proxy(config).await;
    receiver.hold(true);
    let direct = post(proxy.traffic_addr, CHAT, BODY).await;
    // Its two spans are the export the collector holds: from here the export task is stuck.
    receiver.wait_for_requests(1, WAIT).await;

    const MORE: usize = 10;
    for _ in 0..MORE {
        let streamed = post(proxy.traffic_addr, CHAT, BODY).await;
        assert!(streamed.error.is_none(), "the stream ended cleanly");
        assert_eq!(
            streamed.bytes(),
            direct.bytes(),
            "every stream whole while the collector hangs"
        );
    }
    // Two spans a request: the queue takes 8 (four requests), the rest overflow. No timing is
    // involved: nothing leaves the queue while the export is held.
    let overflow = (2 * MORE - 8) as f64;
    support::wait_for_metric(&proxy, DROPPED, &[("reason", "queue_full")], overflow).await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_trace_queue_spans", &[]),
        8.0,
        "the queue is full at its bound, no further: {text}"
    );
    assert_eq!(
        prom::sum(&text, DROPPED, &[]),
        overflow,
        "nothing dropped for any other reason: {text}"
    );
    assert_eq!(prom::sum(&text, EXPORTED, &[]), 0.0, "nothing exported yet");

    // Once the collector answers, the held batch and the queued spans go out.
    receiver.hold(false);
    let exported = 2.0 + 8.0;
    support::wait_for_metric(&proxy, EXPORTED, &[], exported).await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, EXPORTED, &[]) + prom::sum(&text, DROPPED, &[]),
        2.0 * (1 + MORE) as f64,
        "every span produced is exported or dropped, once: {text}"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_trace_queue_spans", &[]),
        0.0,
        "the queue drained: {text}"
    );
    let spans = receiver.wait_for_spans(10, WAIT).await;
    assert_eq!(
        spans.len(),
        10,
        "the collector has exactly the spans counted exported: {spans:#?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn reload_turns_tracing_on_moves_it_and_turns_it_off() {
    let first = Receiver::start(Otlp::HttpProtobuf).await;
    let second = Receiver::start(Otlp::Grpc).await;
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let plain = config_for(&backend.url);
    let proxy = start_proxy(plain.clone()).await;

    post(proxy.traffic_addr, CHAT, BODY).await;
    let seen = backend.next_request().await;
    assert_eq!(
        seen.header("traceparent"),
        None,
        "off: nothing added upstream"
    );

    proxy
        .reload(traced(&backend.url, &first))
        .await
        .expect("reload");
    post(proxy.traffic_addr, CHAT, BODY).await;
    let seen = backend.next_request().await;
    let spans = first.wait_for_spans(2, WAIT).await;
    let server = by_kind(&spans, "server")[0];
    assert_eq!(
        server.parent_span_id, "",
        "a root: the client sent no traceparent"
    );
    let sent = seen
        .header("traceparent")
        .expect("on: the attempt's traceparent");
    assert!(sent.starts_with(&format!("00-{}-", server.trace_id)) && sent.ends_with("-01"));

    // Moved to the second collector, sampling no new trace.
    let mut moved = traced(&backend.url, &second);
    moved.tracing.sampler = Some(Sampler::ParentbasedTraceidratio);
    moved.tracing.sample_ratio = Some(0.0);
    proxy.reload(moved).await.expect("reload");
    post(proxy.traffic_addr, CHAT, BODY).await;
    let seen = backend.next_request().await;
    let sent = seen
        .header("traceparent")
        .expect("a root still carries the decision");
    assert!(sent.ends_with("-00"), "not sampled: {sent}");
    // A sampled caller is still followed, and goes to the second collector.
    post_with(&proxy, &traceparent("01")).await;
    backend.next_request().await;
    let spans = second.wait_for_spans(2, WAIT).await;
    assert_eq!(
        spans.len(),
        2,
        "the followed request's two spans: {spans:#?}"
    );
    assert!(
        spans.iter().all(|s| s.trace_id == CLIENT_TRACE),
        "only the sampled caller's trace: {spans:#?}"
    );
    assert_eq!(
        first.spans().len(),
        2,
        "nothing more to the first collector"
    );

    let mut off = traced(&backend.url, &second);
    off.tracing.endpoint = Some(String::new());
    off.tracing.server_timing = true;
    proxy.reload(off).await.expect("reload");
    let streamed = post(proxy.traffic_addr, CHAT, BODY).await;
    let seen = backend.next_request().await;
    assert_eq!(seen.header("traceparent"), None, "off again");
    let timing = streamed
        .headers
        .get("server-timing")
        .expect("server-timing when asked for")
        .to_str()
        .unwrap()
        .to_owned();
    for phase in &PHASES[..7] {
        assert!(
            timing.contains(&format!("tm-{phase};dur=")),
            "{phase} in {timing}"
        );
    }
    assert!(!timing.contains("tm-trace"), "no trace to name: {timing}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_request_the_proxy_traced_leaves_its_own_trace_on_the_exemplars() {
    use prost::Message;
    use tokenmeter::metrics::protobuf::pb;

    let receiver = Receiver::start(Otlp::HttpProtobuf).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::from_millis(2))).await;
    let proxy = start_proxy(traced(&backend.url, &receiver)).await;
    post(proxy.traffic_addr, CHAT, BODY).await;
    let spans = receiver.wait_for_spans(2, WAIT).await;
    let trace = by_kind(&spans, "server")[0].trace_id.clone();

    let exposition = proxy.metrics.render_protobuf("");
    let mut buf = exposition.as_slice();
    let mut exemplars = Vec::new();
    while !buf.is_empty() {
        let family = pb::MetricFamily::decode_length_delimited(&mut buf).expect("delimited");
        if family.name() != "gen_ai_server_time_to_first_token_seconds" {
            continue;
        }
        for metric in &family.metric {
            for bucket in metric.histogram.iter().flat_map(|h| &h.bucket) {
                if let Some(exemplar) = &bucket.exemplar {
                    exemplars.push(exemplar.label[0].value().to_owned());
                }
            }
        }
    }
    assert_eq!(
        exemplars,
        [trace],
        "the TTFT exemplar opens the trace the proxy exported (the client sent no traceparent)"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_refusing_collector_is_counted_and_gets_the_configured_headers() {
    let receiver = Receiver::start(Otlp::Grpc).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = traced(&backend.url, &receiver);
    config.tracing.headers.insert(
        "authorization".to_owned(),
        "Bearer collector-key".to_owned(),
    );
    // Room for every retry the exporter makes (below), so their number is exact.
    config.tracing.export_timeout = Some(Duration::from_secs(5));
    let proxy = start_proxy(config).await;
    receiver.refuse(Some(503));
    let streamed = post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(
        streamed.status, 200,
        "the stream does not wait for the collector"
    );
    support::wait_for_metric(&proxy, DROPPED, &[("reason", "export_failed")], 2.0).await;
    // The exporter (opentelemetry-otlp's recommended policy) retries Unavailable 3 times, after
    // 100, 200 and 400 ms plus up to 100 ms of jitter each: 1 s at most, which the 5 s export
    // timeout holds with 4 s to spare for a loaded machine's scheduling delays (tens of ms).
    // The count is final here: the drop is counted once the export, retries included, ended.
    let tried = receiver.requests();
    assert_eq!(tried, 4, "the export was tried, then retried 3 times");
    receiver.refuse(None);
    post(proxy.traffic_addr, CHAT, BODY).await;
    let spans = receiver.wait_for_spans(2, WAIT).await;
    assert_eq!(spans.len(), 2, "the accepted request's spans: {spans:#?}");
    assert_eq!(
        receiver.requests(),
        tried + 1,
        "an accepted export is sent once"
    );
    assert_eq!(
        receiver.headers().len(),
        tried + 1,
        "the headers of every export request"
    );
    for headers in receiver.headers() {
        assert_eq!(
            headers.get("authorization").and_then(|v| v.to_str().ok()),
            Some("Bearer collector-key"),
            "every export carries the configured metadata"
        );
    }
    proxy.shutdown().await;
}
