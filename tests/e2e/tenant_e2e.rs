//! Tenants end to end: who is calling (a header, an API key by its hash), refusals that never
//! repeat a key, each tenant's exact tokens and requests, a bounded tenant label under 10 000
//! distinct names, tracked tenants' histograms, and a reload with a bad or a new keys file.

use crate::support;
use std::time::Duration;

use support::backend::{replay, Backend};
use support::client::{open_with, Protocol};
use support::gated::Gated;
use support::{config_for, prom, start_proxy};
use tokenmeter::config::{Anonymous, Config, TenantSource};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
/// `printf %s key-a | sha256sum`, `printf %s key-b | sha256sum`.
const KEY_A: &str = "key-a";
const KEY_B: &str = "key-b";

fn digest(key: &str) -> String {
    tokenmeter::tenant::keys::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn keys_file(dir: &std::path::Path, lines: &[(&str, &str)]) -> std::path::PathBuf {
    let path = dir.join("keys");
    let text: String = lines
        .iter()
        .map(|(key, tenant)| format!("sha256:{} {tenant}\n", digest(key)))
        .collect();
    std::fs::write(&path, text).expect("write keys");
    path
}

fn with_keys(upstream: &str, keys: &std::path::Path, anonymous: Anonymous) -> Config {
    let mut config = config_for(upstream);
    config.tenants.sources = vec![TenantSource::ApiKey];
    config.tenants.keys_file = Some(keys.to_owned());
    config.tenants.anonymous = anonymous;
    config
}

async fn send(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> support::client::Streamed {
    open_with(addr, Protocol::Http1, "POST", CHAT, BODY, headers)
        .await
        .collect()
        .await
}

/// The replayed fixture's events up to and including the first token event ("Hello"): what a
/// held stream has written.
const HELD_EVENTS: usize = 2;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenmeter-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[tokio::test]
async fn api_keys_name_tenants_and_unknown_ones_are_refused_without_echo() {
    let dir = temp_dir("tenant-keys");
    let keys = keys_file(&dir, &[(KEY_A, "team-a"), (KEY_B, "team-b")]);
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(with_keys(&backend.url, &keys, Anonymous::Refuse)).await;

    for (key, times) in [(KEY_A, 2), (KEY_B, 1)] {
        let bearer = format!("Bearer {key}");
        for _ in 0..times {
            let streamed = send(proxy.traffic_addr, &[("authorization", &bearer)]).await;
            assert_eq!(streamed.status, 200);
            let seen = backend.next_request().await;
            assert_eq!(
                seen.header("authorization").as_deref(),
                Some(bearer.as_str()),
                "the key passes upstream unchanged"
            );
        }
    }
    for (headers, reason) in [
        (vec![("authorization", "Bearer key-zzz")], "unknown API key"),
        (
            vec![("authorization", "Basic a2V5LXp6eg==")],
            "malformed Authorization",
        ),
        (vec![], "no tenant"),
    ] {
        let refused = send(proxy.traffic_addr, &headers).await;
        assert_eq!(refused.status, 401, "{headers:?}");
        let body: serde_json::Value = serde_json::from_slice(&refused.bytes()).expect("JSON");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(reason), "{message}");
        assert_eq!(body["error"]["type"], "authentication_error");
        assert!(!refused.text().contains("zzz"), "the key is never repeated");
    }
    // A key of 64 KiB: one more unknown key (its hash is looked up), never echoed.
    let huge = format!("Bearer {}", "k".repeat(64 * 1024));
    let refused = send(proxy.traffic_addr, &[("authorization", &huge)]).await;
    assert_eq!(refused.status, 401, "a key of 64 KiB is refused");
    assert!(
        refused.text().contains("unknown API key"),
        "{}",
        refused.text()
    );
    assert!(
        !refused.text().contains("kkkk"),
        "the key is never repeated"
    );
    let text = proxy.metrics.render();
    let tokens = |tenant: &str, kind: &str| {
        prom::sum(
            &text,
            "tokenmeter_tenant_tokens_total",
            &[("tenant", tenant), ("gen_ai_token_type", kind)],
        )
    };
    assert_eq!(
        (tokens("team-a", "input"), tokens("team-a", "output")),
        (24.0, 14.0)
    );
    assert_eq!(
        (tokens("team-b", "input"), tokens("team-b", "output")),
        (12.0, 7.0)
    );
    let requests = |tenant: &str, outcome: &str| {
        prom::sum(
            &text,
            "tokenmeter_tenant_requests_total",
            &[("tenant", tenant), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("team-a", "ok"), 2.0);
    assert_eq!(requests("team-b", "ok"), 1.0);
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[("outcome", "client_error")]
        ),
        4.0,
        "the refusals are counted as client errors"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_tenant_requests_total", &[]),
        3.0,
        "refused requests have no tenant"
    );
    // The sum over tenants is the proxy's own count, to the token.
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tenant_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
    );
    proxy.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn ten_thousand_tenant_names_make_a_bounded_label() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = config_for(&backend.url);
    config.tenants.sources = vec![TenantSource::Header];
    config.tenants.max_tenant_labels = 20;
    config.tenants.tracked = vec!["tracked-1".to_owned()];
    let proxy = start_proxy(config).await;
    let addr = proxy.traffic_addr;
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..16 {
        tasks.spawn(async move {
            for i in (worker..10_000).step_by(16) {
                let name = format!("tenant-{i}");
                let streamed = send(addr, &[("x-tenant-id", &name)]).await;
                assert_eq!(streamed.status, 200);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("worker");
    }
    send(addr, &[("x-tenant-id", "tracked-1")]).await;
    send(addr, &[("x-tenant-id", &"x".repeat(16 * 1024))]).await;
    send(addr, &[]).await;
    let text = proxy.metrics.render();
    let tenants: std::collections::BTreeSet<String> =
        prom::find(&text, "tokenmeter_tenant_requests_total", &[])
            .into_iter()
            .filter_map(|sample| sample.labels.get("tenant").cloned())
            .collect();
    assert!(
        tenants.len() <= 20 + 3,
        "at most the budget, the tracked one, other and anonymous: {}",
        tenants.len()
    );
    for must in ["other", "anonymous", "tracked-1"] {
        assert!(tenants.contains(must), "{must} in {tenants:?}");
    }
    assert_eq!(
        prom::sum(&text, "tokenmeter_tenant_requests_total", &[]),
        10_003.0,
        "every request counted once"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tenant_time_to_first_token_seconds_count",
            &[]
        ),
        1.0,
        "a histogram for the tracked tenant only"
    );
    // The replayed stream has 7 token events (the role-only first chunk carries no token): 6
    // gaps, of the tracked tenant's one stream only.
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tenant_inter_token_latency_seconds_count",
            &[]
        ),
        6.0,
        "every gap of the tracked tenant's stream, and no other stream's"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tenant_inter_token_latency_seconds_count",
            &[("tenant", "tracked-1")]
        ),
        6.0
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_reload_with_a_bad_keys_file_is_refused_and_a_new_key_applies() {
    let dir = temp_dir("tenant-reload");
    let keys = keys_file(&dir, &[(KEY_A, "team-a")]);
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let config = with_keys(&backend.url, &keys, Anonymous::Refuse);
    let proxy = start_proxy(config.clone()).await;
    let bearer_b = format!("Bearer {KEY_B}");
    assert_eq!(
        send(proxy.traffic_addr, &[("authorization", &bearer_b)])
            .await
            .status,
        401
    );

    std::fs::write(&keys, "sha256:nothex team-b\n").expect("write");
    let refused = proxy
        .reload(config.clone())
        .await
        .expect_err("a bad keys file");
    assert!(
        refused.contains(&keys.display().to_string()) && refused.contains("line 1"),
        "{refused}"
    );
    let bearer_a = format!("Bearer {KEY_A}");
    assert_eq!(
        send(proxy.traffic_addr, &[("authorization", &bearer_a)])
            .await
            .status,
        200,
        "the running keys stay"
    );

    keys_file(&dir, &[(KEY_A, "team-a"), (KEY_B, "team-b")]);
    proxy.reload(config).await.expect("reload");
    assert_eq!(
        send(proxy.traffic_addr, &[("authorization", &bearer_b)])
            .await
            .status,
        200
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-b")]
        ),
        1.0
    );
    proxy.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn usage_records_sum_to_the_counters_and_the_clients_usage() {
    let dir = temp_dir("tenant-usage");
    let keys = keys_file(&dir, &[(KEY_A, "team-a"), (KEY_B, "team-b")]);
    let records = dir.join("usage.jsonl");
    let backend = Gated::start(true, HELD_EVENTS).await;
    let mut config = with_keys(&backend.url, &keys, Anonymous::Allow);
    config.tenants.usage.path = records.display().to_string();
    let proxy = start_proxy(config).await;
    let body = r#"{"model":"m1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let mut client_output = 0u64;
    for key in [KEY_A, KEY_A, KEY_B] {
        let bearer = format!("Bearer {key}");
        let streamed = open_with(
            proxy.traffic_addr,
            Protocol::Http1,
            "POST",
            CHAT,
            body,
            &[("authorization", &bearer)],
        )
        .await
        .collect()
        .await;
        let text = streamed.text();
        let usage = text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
            .find_map(|event| event["usage"]["completion_tokens"].as_u64())
            .expect("the client asked for usage");
        client_output += usage;
    }
    // A client of team-b that leaves after its first token, which is as far as its stream got:
    // the backend holds the rest until the end of the test.
    backend.close();
    let bearer_b = format!("Bearer {KEY_B}");
    let mut open = open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        body,
        &[("authorization", &bearer_b)],
    )
    .await;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("Hello") {
        let (_, frame) = open.next_frame().await.expect("a frame").expect("no error");
        seen.extend_from_slice(&frame);
    }
    open.disconnect();
    support::wait_for_metric(
        &proxy,
        "tokenmeter_tenant_requests_total",
        &[("outcome", "cancelled")],
        1.0,
    )
    .await;
    let text = proxy.metrics.render();
    // Shutting down closes the log: every finished request's record is on disk.
    proxy.shutdown().await;
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&records)
        .expect("records")
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 4, "one record per request: {lines:#?}");
    for tenant in ["team-a", "team-b"] {
        for (field, kind) in [("input_tokens", "input"), ("output_tokens", "output")] {
            let summed: u64 = lines
                .iter()
                .filter(|record| record["tenant"] == tenant)
                .filter_map(|record| record[field].as_u64())
                .sum();
            let counter = prom::sum(
                &text,
                "tokenmeter_tenant_tokens_total",
                &[("tenant", tenant), ("gen_ai_token_type", kind)],
            );
            assert_eq!(
                summed as f64, counter,
                "{tenant} {kind}: records = counters"
            );
        }
    }
    let finished_output: u64 = lines
        .iter()
        .filter(|record| record["outcome"] == "ok")
        .filter_map(|record| record["output_tokens"].as_u64())
        .sum();
    assert_eq!(
        finished_output, client_output,
        "the clients' own usage, to the token"
    );
    let cancelled: Vec<_> = lines
        .iter()
        .filter(|record| record["outcome"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["tenant"], "team-b");
    assert_eq!(
        cancelled[0]["output_tokens"].as_u64(),
        Some(1),
        "what it streamed: the one token event before the backend held the rest"
    );
    for record in &lines {
        assert!(
            record["time"].as_str().unwrap_or("").ends_with('Z'),
            "RFC 3339 UTC"
        );
        assert_eq!(record["model"], "m1");
        assert!(record["e2e_ms"].as_f64().is_some());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A request refused at `server.max_connections` starts where every request does: it is counted
/// under its tenant, and exported as a span of its client's trace carrying its tenant and its 503.
#[tokio::test]
async fn a_request_refused_at_the_connection_limit_has_its_tenant_and_its_trace() {
    use support::client;
    use support::otlp::{Protocol as Otlp, Receiver};
    use tokio::io::AsyncWriteExt;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let receiver = Receiver::start(Otlp::HttpProtobuf).await;
    let backend = Backend::start(|_| support::backend::Script::json(200, r#"{"data":[]}"#)).await;
    let mut config = config_for(&backend.url);
    config.tenants.sources = vec![TenantSource::Header];
    config.server.max_connections = 1;
    config.tracing.endpoint = Some(receiver.endpoint());
    config.tracing.protocol = Some(tokenmeter::config::OtlpProtocol::HttpProtobuf);
    config.tracing.batch_delay = Duration::from_millis(20);
    // Only a bound for a collector that fails: an export to the in-process receiver takes
    // milliseconds.
    config.tracing.export_timeout = Some(Duration::from_secs(5));
    let proxy = start_proxy(config).await;

    // The one connection the limit allows, held open, proven accepted by team-b's request (read
    // to its last chunk, so that request has ended).
    let mut held = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    held.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nx-tenant-id: team-b\r\n\r\n")
        .await
        .expect("send");
    let answer = client::read_chunked_answer(&mut held).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 200 "),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let refused = send(
        proxy.traffic_addr,
        &[("x-tenant-id", "team-a"), ("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(refused.status, 503, "past the connection limit");
    assert_eq!(refused.headers["connection"], "close");

    support::wait_for_metric(
        &proxy,
        "tokenmeter_tenant_requests_total",
        &[("tenant", "team-b")],
        1.0,
    )
    .await;
    let text = proxy.metrics.render();
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("tokenmeter_tenant_requests_total{"))
        .collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            r#"tokenmeter_tenant_requests_total{tenant="team-a",outcome="overloaded"} 1"#,
            r#"tokenmeter_tenant_requests_total{tenant="team-b",outcome="ok"} 1"#,
        ],
        "the refused request is counted under its tenant"
    );

    // team-b's server span and its attempt, and the refused request's server span.
    let spans = receiver.wait_for_spans(3, Duration::from_secs(10)).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let refused: Vec<_> = spans
        .iter()
        .filter(|span| span.int_attr("http.response.status_code") == Some(503))
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one span of the refused request: {spans:#?}"
    );
    let span = refused[0];
    assert_eq!(span.kind_name(), "server");
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (TRACE, PARENT),
        "it continues the client's trace"
    );
    assert_eq!(span.str_attr("tokenmeter.tenant"), Some("team-a"));
    assert_eq!(span.str_attr("tokenmeter.outcome"), Some("overloaded"));
    assert_eq!(span.int_attr("tokenmeter.attempts"), Some(0));
    assert_eq!(
        (span.status_code, span.status_message.as_str()),
        (2, "overloaded"),
        "an error status: overloaded is the server's error"
    );
    let served: Vec<_> = spans
        .iter()
        .filter(|span| {
            span.kind_name() == "server" && span.str_attr("tokenmeter.tenant") == Some("team-b")
        })
        .collect();
    assert_eq!(served.len(), 1, "team-b's span carries its tenant too");
    drop(held);
    proxy.shutdown().await;
}
