//! End to end: HTTP hygiene, other paths, h2c, the admin endpoints and graceful shutdown.

use crate::support;
use std::sync::Arc;
use std::time::Duration;

use support::backend::{Backend, Script, Step};
use support::client::{self, Protocol};
use support::raw::{self, RawUpstream};
use support::timeline::{self, Window};
use support::{config_for, events_of, fixture, prom, start_proxy};
use tokio::sync::Notify;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;

fn fixture_script(gap: Duration) -> Script {
    Script::sse(
        events_of(&fixture("vllm-chat-usage.sse"))
            .into_iter()
            .map(|event| (gap, event))
            .collect(),
    )
}

#[tokio::test]
async fn headers_pass_through_hop_by_hop_stop_and_forwarded_is_set() {
    let mut backend = Backend::start(|_| Script::json(200, r#"{"object":"list","data":[]}"#)).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let (status, text) = {
        let streamed = client::open_with(
            proxy.traffic_addr,
            Protocol::Http1,
            "GET",
            "/v1/models?x=1",
            "",
            &[
                ("authorization", "Bearer sk-secret"),
                ("x-request-id", "abc"),
                ("connection", "keep-alive, x-hop"),
                ("x-hop", "1"),
            ],
        )
        .await
        .collect()
        .await;
        (streamed.status, streamed.text())
    };
    assert_eq!(status, 200);
    assert_eq!(
        text, r#"{"object":"list","data":[]}"#,
        "any path is proxied"
    );
    let seen = backend.next_request().await;
    assert!(
        seen.head.starts_with("GET /v1/models?x=1 HTTP/1.1"),
        "method, path and query kept: {}",
        seen.head
    );
    assert_eq!(
        seen.header("authorization").as_deref(),
        Some("Bearer sk-secret"),
        "authorization kept"
    );
    assert_eq!(
        seen.header("x-request-id").as_deref(),
        Some("abc"),
        "end-to-end header kept"
    );
    assert_eq!(
        seen.header("x-hop"),
        None,
        "header named by Connection stripped"
    );
    assert_eq!(seen.header("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(
        seen.header("x-forwarded-host"),
        Some(proxy.traffic_addr.to_string()),
        "the client's host"
    );
    let metrics = proxy.metrics.render();
    let other = [
        ("gen_ai_operation_name", "_OTHER"),
        ("gen_ai_provider_name", "_OTHER"),
        ("gen_ai_request_model", "unknown"),
        ("outcome", "ok"),
    ];
    assert_eq!(
        prom::value(&metrics, "tokenmeter_requests_total", &other),
        1.0,
        "counted, not metered: OpenTelemetry's _OTHER, no model read"
    );
    assert!(
        prom::find(
            &metrics,
            "gen_ai_server_request_duration_seconds_count",
            &[("gen_ai_operation_name", "_OTHER")]
        )
        .is_empty(),
        "other paths are not token streams"
    );
    assert!(
        prom::find(
            &metrics,
            "tokenmeter_requests_total",
            &[("gen_ai_operation_name", "other")]
        )
        .is_empty(),
        "one spelling of other"
    );
}

#[tokio::test]
async fn a_typo_of_an_api_path_is_passed_through_and_counted_as_other() {
    // `/v1/chat/completion` ends like llama.cpp's `/completion`: it must not be metered as
    // llama.cpp (nor read, nor have usage injected), only proxied and counted as _OTHER.
    let mut backend = Backend::start(|_| Script::json(404, r#"{"detail":"Not Found"}"#)).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;
    let streamed = client::post(proxy.traffic_addr, "/v1/chat/completion", body).await;
    assert_eq!(streamed.status, 404, "the backend's answer");
    assert_eq!(streamed.text(), r#"{"detail":"Not Found"}"#, "unchanged");
    let seen = backend.next_request().await;
    assert!(
        seen.head.starts_with("POST /v1/chat/completion HTTP/1.1"),
        "{}",
        seen.head
    );
    assert_eq!(
        seen.body,
        body.as_bytes(),
        "the body streamed through untouched: no include_usage injected"
    );
    let metrics = proxy.metrics.render();
    let typo = [
        ("gen_ai_operation_name", "_OTHER"),
        ("gen_ai_provider_name", "_OTHER"),
        ("gen_ai_request_model", "unknown"),
        ("outcome", "client_error"),
    ];
    assert_eq!(
        prom::value(&metrics, "tokenmeter_requests_total", &typo),
        1.0,
        "counted under _OTHER, its model unread"
    );
    for (label, value) in [
        ("gen_ai_operation_name", "text_completion"),
        ("gen_ai_provider_name", "llama_cpp"),
    ] {
        assert!(
            prom::find(&metrics, "tokenmeter_requests_total", &[(label, value)]).is_empty(),
            "not metered as llama.cpp's /completion ({label}={value})"
        );
    }
    assert_eq!(
        prom::sum(&metrics, "tokenmeter_usage_injections_total", &[]),
        0.0,
        "no injection decided for a path that is no API"
    );
}

#[tokio::test]
async fn h2c_clients_stream_through_unchanged() {
    let backend = Backend::start(|_| fixture_script(Duration::from_millis(5))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let streamed = client::open_with(proxy.traffic_addr, Protocol::H2c, "POST", CHAT, BODY, &[])
        .await
        .collect()
        .await;
    assert_eq!(streamed.status, 200);
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-usage.sse"),
        "same bytes over h2c"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0
    );
}

#[tokio::test]
async fn admin_serves_metrics_health_and_readiness_apart_from_traffic() {
    let mut backend = Backend::start(|_| fixture_script(Duration::from_millis(2))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert!(streamed.error.is_none(), "clean end: {:?}", streamed.error);
    let seen = backend.next_request().await;

    // What the proxy can have measured of that one request (support/timeline.rs): exact on any
    // machine, each window as wide as the delays that happened.
    let writes = backend.writes();
    assert_eq!(writes.len(), 11, "the fixture's 10 events and the end");
    let at = timeline::arrivals(&writes, &streamed);
    let start = timeline::request_start(&streamed, &seen);
    let first = timeline::write_with(&writes, b"\"Hello\"");
    let last = first + 6;
    let decode = Window::between(at[first], at[last]);
    let exact = |n: f64| Window { low: n, high: n };

    let (status, text) = client::get(proxy.admin_addr, "/metrics").await;
    assert_eq!(status, 200);
    let histograms = prom::histogram_names(&text);
    // Each histogram of a token stream, the series of the one request: its observations and
    // what they sum to.
    for (name, labels, count, sum) in [
        (
            "gen_ai_server_time_to_first_token_seconds",
            &[][..],
            1.0,
            Window::between(start, at[first]),
        ),
        (
            "gen_ai_server_time_per_output_token_seconds",
            &[],
            1.0,
            decode.per(6.0),
        ),
        (
            "gen_ai_server_request_duration_seconds",
            &[],
            1.0,
            Window::between(start, at[writes.len() - 1]),
        ),
        (
            "gen_ai_client_token_usage",
            &[("gen_ai_token_type", "input")],
            1.0,
            exact(12.0),
        ),
        (
            "gen_ai_client_token_usage",
            &[("gen_ai_token_type", "output")],
            1.0,
            exact(7.0),
        ),
        ("tokenmeter_inter_token_latency_seconds", &[], 6.0, decode),
        (
            "tokenmeter_time_to_first_byte_seconds",
            &[],
            1.0,
            Window::between(start, at[0]),
        ),
    ] {
        assert!(
            histograms.iter().any(|h| h == name),
            "{name} is a histogram:\n{text}"
        );
        assert_eq!(
            prom::value(&text, &format!("{name}_count"), labels),
            count,
            "{name} {labels:?}: observations of the one request"
        );
        sum.assert_contains(
            &format!("{name} {labels:?} sum"),
            prom::value(&text, &format!("{name}_sum"), labels),
        );
    }
    for name in &histograms {
        let infinity = prom::find(&text, &format!("{name}_bucket"), &[("le", "+Inf")]);
        assert!(!infinity.is_empty(), "{name} has _bucket series up to +Inf");
        for top in infinity {
            let labels: Vec<(&str, &str)> = top
                .labels
                .iter()
                .filter(|(k, _)| *k != "le")
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let count = prom::value(&text, &format!("{name}_count"), &labels);
            assert_eq!(top.value, count, "{name}: +Inf bucket equals _count");
            let sum = prom::value(&text, &format!("{name}_sum"), &labels);
            assert!(
                sum.is_finite(),
                "{name} {labels:?}: one finite _sum beside its _count, {sum}"
            );
        }
    }
    assert!(!text.contains("quantile="), "no summaries");

    assert_eq!(client::get(proxy.admin_addr, "/healthz").await.0, 200);
    assert_eq!(client::get(proxy.admin_addr, "/readyz").await.0, 200);
    let (_, upstream) = client::get(proxy.traffic_addr, "/metrics").await;
    assert!(
        upstream.contains("chatcmpl") && !upstream.contains("tokenmeter_requests_total"),
        "the traffic port proxies /metrics upstream; it never serves the proxy's own: {upstream}"
    );
}

#[tokio::test]
async fn promtool_accepts_the_scrape() {
    let backend = Backend::start(|_| fixture_script(Duration::from_millis(2))).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    for _ in 0..3 {
        client::post(proxy.traffic_addr, CHAT, BODY).await;
    }
    let (_, text) = client::get(proxy.admin_addr, "/metrics").await;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed (Debian package `prometheus`; .ci/run installs it)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).expect("write scrape");
    }
    let output = child.wait_with_output().expect("promtool ran");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{report}\n{text}"
    );
}

#[tokio::test]
async fn graceful_shutdown_lets_streams_finish_and_turns_readiness_off() {
    // The stream's rest waits for the test's word: it is in flight for as long as the checks
    // below take, however slow the machine.
    let release = Arc::new(Notify::new());
    let upstream = RawUpstream::start({
        let release = Arc::clone(&release);
        move |_request, mut stream| {
            let release = Arc::clone(&release);
            async move {
                let events = events_of(&fixture("vllm-chat-usage.sse"));
                let (first, rest) = events.split_first().expect("events");
                for bytes in [
                    raw::chunked_head(200, "text/event-stream"),
                    raw::chunk(first),
                ] {
                    if !raw::write(&mut stream, &bytes).await {
                        return;
                    }
                }
                release.notified().await;
                for event in rest {
                    if !raw::write(&mut stream, &raw::chunk(event)).await {
                        return;
                    }
                }
                raw::write(&mut stream, raw::LAST_CHUNK).await;
            }
        }
    })
    .await;
    let mut config = config_for(&upstream.url);
    // Far longer than the test: a shutdown that ends with the stream did not wait it out.
    config.server.shutdown_grace = Duration::from_secs(60);
    let proxy = start_proxy(config).await;
    let traffic = proxy.traffic_addr;
    let admin = proxy.admin_addr;
    let mut stream = client::open(traffic, CHAT, BODY).await;
    let first = stream.next_frame().await.expect("frame").expect("ok");
    assert!(!first.1.is_empty());

    let metrics = Arc::clone(&proxy.metrics);
    let shutdown = tokio::spawn(proxy.shutdown());
    // Readiness turns off while the stream is still running (it waits for `release`).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = client::get(admin, "/readyz").await;
        if status == 503 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never turned 503"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        tokio::net::TcpStream::connect(traffic).await.is_err(),
        "new connections are refused while draining"
    );
    assert!(
        !shutdown.is_finished(),
        "the shutdown waits for the stream in flight"
    );
    release.notify_one();
    let rest = stream.collect_after(first).await;
    assert!(
        rest.error.is_none(),
        "the in-flight stream finished cleanly"
    );
    assert_eq!(
        rest.bytes(),
        fixture("vllm-chat-usage.sse"),
        "to the end, whole"
    );
    // 10 s: the drain ends with the stream, in milliseconds on a loaded machine; a shutdown that
    // waited for the grace period would take 60 s.
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("shutdown completes once streams are done, not at the grace's end")
        .expect("no panic");
    let text = metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
        1.0
    );
}

#[tokio::test]
async fn shutdown_past_the_grace_period_cuts_streams_and_counts_them() {
    let mut steps: Vec<Step> = events_of(&fixture("vllm-chat-usage.sse"))
        .into_iter()
        .take(2)
        .map(|e| Step::Chunk(Duration::from_millis(5), e))
        .collect();
    steps.push(Step::Pause(Duration::from_secs(30)));
    let backend = Backend::start(move |_| Script {
        status: 200,
        content_type: "text/event-stream".to_owned(),
        steps: steps.clone(),
    })
    .await;
    let mut config = config_for(&backend.url);
    config.server.shutdown_grace = Duration::from_millis(200);
    let proxy = start_proxy(config).await;
    let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
    stream.next_frame().await.expect("frame").expect("ok");
    let metrics = Arc::clone(&proxy.metrics);
    let started = tokio::time::Instant::now();
    proxy.shutdown().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "waited the grace period: {took:?}"
    );
    assert_eq!(
        backend.writes().len(),
        2,
        "the backend was still in its 30 s pause: the stream was cut, not waited for"
    );
    // After the 200 ms grace the shutdown only drops connections and stops tasks: milliseconds,
    // even with the grace timer late on a loaded 2-core machine; 3 s is 15 times the grace.
    assert!(
        took < Duration::from_secs(3),
        "cut at the grace period's end: {took:?}"
    );
    let rest = stream.collect().await;
    assert!(rest.error.is_some(), "the stream was cut, not ended");
    assert!(!rest.text().contains("[DONE]"), "nothing after the cut");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let cancelled = || {
        prom::sum(
            &metrics.render(),
            "tokenmeter_requests_total",
            &[("outcome", "cancelled")],
        )
    };
    while cancelled() < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cut stream counted as cancelled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(cancelled(), 1.0, "counted once");
}

/// RFC 9110 §6.6.1: a proxy that forwards a response without `Date` must add one (the time it
/// received it); a `Date` the server sent passes unchanged.
#[tokio::test]
async fn a_date_is_added_only_where_the_server_sent_none() {
    const SERVER_DATE: &str = "Tue, 01 Dec 2026 06:00:00 GMT";
    let upstream = support::raw::RawUpstream::start(|request, mut stream| async move {
        let date = if request.head.contains("x-with-date: 1") {
            format!("date: {SERVER_DATE}\r\n")
        } else {
            String::new()
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{date}content-length: 2\r\n\r\n{{}}"
        );
        support::raw::write(&mut stream, response.as_bytes()).await;
    })
    .await;
    let proxy = start_proxy(config_for(&upstream.url)).await;
    let get = |with_date: bool| {
        let headers: &'static [(&'static str, &'static str)] = if with_date {
            &[("x-with-date", "1")]
        } else {
            &[]
        };
        client::open_with(
            proxy.traffic_addr,
            Protocol::Http1,
            "GET",
            "/v1/models",
            "",
            headers,
        )
    };
    let with = get(true).await.collect().await;
    let dates: Vec<_> = with.headers.get_all("date").iter().collect();
    assert_eq!(
        dates,
        vec![SERVER_DATE],
        "the server's Date passes unchanged, and only once"
    );
    let without = get(false).await.collect().await;
    let added = without
        .headers
        .get("date")
        .and_then(|value| value.to_str().ok())
        .expect("a Date header is added");
    assert!(
        added.ends_with(" GMT") && added != SERVER_DATE,
        "the proxy's own IMF-fixdate: {added}"
    );
}
