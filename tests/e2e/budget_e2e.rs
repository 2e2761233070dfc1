//! Tenant budgets end to end, in one replica (the embedded store): a request over a budget is
//! answered 429 with `retry-after` and an OpenAI-style error and never reaches the backend; a
//! reservation is settled with the exact usage; a stream slot is held until the stream ends and a
//! stream already admitted is never cut; a request that alone is over a limit is told waiting
//! will not help; a reload changes a budget for new requests; the used-ratio gauge reads the
//! tenant's real use when it is refused. The shared store is tests/e2e/budget_redis.rs.

use crate::support;
use std::time::Duration;

use support::backend::{replay, Backend, Report, Script};
use support::client::{open_with, Protocol, Streamed};
use support::gated::Gated;
use support::{config_for, fixture, prom, start_proxy, wait_for_metric};
use tokenmeter::config::{Config, Counts, Limits, TenantSource};

const CHAT: &str = "/v1/chat/completions";
/// The replayed stream's usage: 12 prompt and 7 completion tokens.
const OUTPUT_TOKENS: u64 = 7;

fn body(max_tokens: Option<u64>) -> String {
    let limit = max_tokens.map_or(String::new(), |n| format!(r#""max_tokens":{n},"#));
    format!(
        r#"{{"model":"m1","stream":true,"stream_options":{{"include_usage":true}},{limit}"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

fn with_budget(upstream: &str, limits: Limits) -> Config {
    let mut config = config_for(upstream);
    config.tenants.sources = vec![TenantSource::Header];
    config
        .tenants
        .budgets
        .tenant
        .insert("team-a".to_owned(), limits);
    config
}

async fn send(addr: std::net::SocketAddr, tenant: &str, body: &str) -> Streamed {
    open_with(
        addr,
        Protocol::Http1,
        "POST",
        CHAT,
        body,
        &[("x-tenant-id", tenant)],
    )
    .await
    .collect()
    .await
}

fn error_of(streamed: &Streamed) -> serde_json::Value {
    let json: serde_json::Value = serde_json::from_slice(&streamed.bytes()).expect("a JSON error");
    json["error"].clone()
}

fn header(streamed: &Streamed, name: &str) -> Option<String> {
    streamed
        .headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test]
async fn a_tenant_over_its_daily_tokens_gets_a_429_and_the_backend_never_sees_it() {
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    // Output tokens only, so each reservation is exactly max_tokens (10); each request uses 7.
    let limits = Limits {
        counts: Counts::Output,
        tokens_per_day: Some(25),
        ..Limits::default()
    };
    let proxy = start_proxy(with_budget(&backend.url, limits)).await;
    let ten = body(Some(10));
    for n in 1..=3u64 {
        let streamed = send(proxy.traffic_addr, "team-a", &ten).await;
        assert_eq!(
            streamed.status,
            200,
            "request {n}: {} of 25 used",
            7 * (n - 1)
        );
        backend.next_request().await;
        wait_for_metric(
            &proxy,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-a")],
            n as f64,
        )
        .await;
    }
    let refused = send(proxy.traffic_addr, "team-a", &ten).await;
    assert_eq!(refused.status, 429, "21 used + 10 reserved > 25");
    let error = error_of(&refused);
    assert_eq!(error["type"], "rate_limit_exceeded");
    let message = error["message"].as_str().expect("a message");
    assert!(
        message.starts_with(
            "tenant budget exceeded: tokens_per_day limit 25, used 21, this request needs 10 tokens; retry in"
        ),
        "the message says which limit, what is used and what was asked: {message}"
    );
    let retry: u64 = header(&refused, "retry-after")
        .expect("retry-after")
        .parse()
        .expect("whole seconds");
    let retry_ms: u64 = header(&refused, "retry-after-ms")
        .expect("retry-after-ms")
        .parse()
        .expect("milliseconds");
    assert!(
        retry > 0 && retry <= 86_400 && retry == retry_ms.div_ceil(1000),
        "until UTC midnight: {retry} s, {retry_ms} ms"
    );
    // Another tenant has no budget of its own and there is no default: not limited. Its request
    // (11 tokens asked, where team-a asked 10) is the next the backend sees: the refused one,
    // answered before this one was sent, never reached it.
    let eleven = body(Some(11));
    assert_eq!(
        send(proxy.traffic_addr, "team-b", &eleven).await.status,
        200
    );
    let next = backend.next_request().await;
    assert!(
        String::from_utf8_lossy(&next.body).contains(r#""max_tokens":11"#),
        "after the three admitted, the backend's next request is team-b's: {}",
        String::from_utf8_lossy(&next.body)
    );
    // Every request the backend read is reported before it answers it: none is pending.
    while let Ok(report) = backend.reports.try_recv() {
        assert!(
            !matches!(report, Report::Request(_)),
            "the refused request never reached the backend: {report:?}"
        );
    }
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_budget_rejections_total",
            &[("tenant", "team-a"), ("limit", "tokens_per_day")]
        ),
        1.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_budget_used_ratio",
            &[("tenant", "team-a"), ("limit", "tokens_per_day")]
        ),
        21.0 / 25.0,
        "refused at 21 of 25 used (the settled usage of the three, not a reservation's view)"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-a"), ("outcome", "client_error")]
        ),
        1.0,
        "the refusal is the tenant's client error"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tenant_tokens_total",
            &[("tenant", "team-a"), ("gen_ai_token_type", "output")]
        ),
        (3 * OUTPUT_TOKENS) as f64
    );
}

/// A stream whose usage chunk reports `completion_tokens` output tokens.
fn using(completion_tokens: u64) -> Script {
    let events = [
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}"#.to_owned(),
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#.to_owned(),
        format!(
            r#"data: {{"id":"c","object":"chat.completion.chunk","model":"m1","choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":{completion_tokens},"total_tokens":{}}}}}"#,
            completion_tokens + 5
        ),
        "data: [DONE]".to_owned(),
    ];
    Script::sse(
        events
            .into_iter()
            .map(|event| (Duration::ZERO, format!("{event}\n\n").into_bytes()))
            .collect(),
    )
}

/// The used-ratio gauge of team-a's `limit`.
fn used_ratio(text: &str, limit: &str) -> f64 {
    prom::value(
        text,
        "tokenmeter_budget_used_ratio",
        &[("tenant", "team-a"), ("limit", limit)],
    )
}

#[tokio::test]
async fn a_tenant_refused_at_93_percent_of_its_day_reads_93_percent() {
    // The report of #43: 200 tokens a day; each request reserves its max_tokens (50) and uses
    // 62. After three, 186 are used (93 %) and the fourth (186 + 50 > 200) is refused. The gauge
    // used to read the counts before the last admission: 124 / 200 = 0.62.
    let backend = Backend::start(|_| using(62)).await;
    let limits = Limits {
        counts: Counts::Output,
        tokens_per_day: Some(200),
        ..Limits::default()
    };
    let proxy = start_proxy(with_budget(&backend.url, limits)).await;
    let fifty = body(Some(50));
    for n in 1..=3u64 {
        assert_eq!(
            send(proxy.traffic_addr, "team-a", &fifty).await.status,
            200,
            "request {n}: {} of 200 used",
            62 * (n - 1)
        );
        wait_for_metric(
            &proxy,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-a")],
            n as f64,
        )
        .await;
        // Settled (the budget's hook runs before the tenant counters): the day's exact count.
        assert_eq!(
            used_ratio(&proxy.metrics.render(), "tokens_per_day"),
            (62 * n) as f64 / 200.0,
            "after request {n} settled, its exact usage is in the gauge"
        );
    }
    let refused = send(proxy.traffic_addr, "team-a", &fifty).await;
    assert_eq!(refused.status, 429, "186 used + 50 reserved > 200");
    assert!(
        error_of(&refused)["message"]
            .as_str()
            .is_some_and(|message| message.contains("tokens_per_day limit 200, used 186")),
        "the refusal says what the gauge says: {}",
        refused.text()
    );
    let text = proxy.metrics.render();
    let ratio = used_ratio(&text, "tokens_per_day");
    assert_eq!(ratio, 186.0 / 200.0, "refused at 93 % of its day");
    assert!(
        ratio > 0.9,
        "over the 90 % of TokenmeterTenantNearDailyBudget"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_budget_rejections_total",
            &[("tenant", "team-a"), ("limit", "tokens_per_day")]
        ),
        1.0
    );
}

#[tokio::test]
async fn a_stream_holds_its_slot_until_it_ends_and_is_never_cut() {
    // The first stream stays open until the second request has been refused.
    let backend = Gated::start(false, 1).await;
    let limits = Limits {
        concurrent_streams: Some(1),
        ..Limits::default()
    };
    let proxy = start_proxy(with_budget(&backend.url, limits)).await;
    let request = body(Some(10));
    let mut first = open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        &request,
        &[("x-tenant-id", "team-a")],
    )
    .await;
    assert_eq!(first.status, 200);
    let head = first
        .next_frame()
        .await
        .expect("a frame")
        .expect("no error");
    let second = send(proxy.traffic_addr, "team-a", &request).await;
    assert_eq!(second.status, 429, "the one slot is taken");
    assert_eq!(error_of(&second)["type"], "rate_limit_exceeded");
    assert_eq!(header(&second, "retry-after").as_deref(), Some("1"));
    backend.open();
    let first = first.collect_after(head).await;
    assert!(first.error.is_none(), "the admitted stream ran to its end");
    let whole = fixture("vllm-chat-usage.sse");
    assert!(first.bytes() == whole, "every byte of it, unchanged");
    wait_for_metric(
        &proxy,
        "tokenmeter_tenant_requests_total",
        &[("tenant", "team-a"), ("outcome", "ok")],
        1.0,
    )
    .await;
    assert_eq!(
        send(proxy.traffic_addr, "team-a", &request).await.status,
        200,
        "the slot came back when the stream ended"
    );
    assert_eq!(
        prom::value(
            &proxy.metrics.render(),
            "tokenmeter_budget_rejections_total",
            &[("tenant", "team-a"), ("limit", "concurrent_streams")]
        ),
        1.0
    );
}

#[tokio::test]
async fn a_request_alone_over_a_limit_is_told_that_waiting_will_not_help() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let limits = Limits {
        counts: Counts::Output,
        tokens_per_minute: Some(40),
        ..Limits::default()
    };
    let mut config = with_budget(&backend.url, limits);
    config.tenants.budgets.default_max_tokens = 50;
    let proxy = start_proxy(config).await;
    // No max_tokens: the default 50 is reserved, more than the limit.
    let refused = send(proxy.traffic_addr, "team-a", &body(None)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        error_of(&refused)["message"],
        "this request needs 50 tokens, more than the tenant's tokens_per_minute limit of 40; lower max_tokens or the prompt"
    );
    assert_eq!(
        header(&refused, "retry-after"),
        None,
        "retrying cannot help"
    );
    // Naming a smaller max_tokens fits.
    assert_eq!(
        send(proxy.traffic_addr, "team-a", &body(Some(20)))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_reload_that_changes_a_budget_applies_to_new_requests() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let tight = Limits {
        counts: Counts::Output,
        tokens_per_day: Some(10),
        ..Limits::default()
    };
    let mut config = with_budget(&backend.url, tight);
    let proxy = start_proxy(config.clone()).await;
    let ten = body(Some(10));
    assert_eq!(send(proxy.traffic_addr, "team-a", &ten).await.status, 200);
    wait_for_metric(
        &proxy,
        "tokenmeter_tenant_requests_total",
        &[("tenant", "team-a")],
        1.0,
    )
    .await;
    assert_eq!(
        send(proxy.traffic_addr, "team-a", &ten).await.status,
        429,
        "7 used + 10 reserved > 10"
    );
    config.tenants.budgets.tenant.insert(
        "team-a".to_owned(),
        Limits {
            counts: Counts::Output,
            tokens_per_day: Some(100),
            ..Limits::default()
        },
    );
    proxy.reload(config).await.expect("reload");
    assert_eq!(
        send(proxy.traffic_addr, "team-a", &ten).await.status,
        200,
        "the new budget applies, with what was used kept"
    );
}

#[tokio::test]
async fn without_a_tenant_source_every_request_shares_the_default_budget() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = config_for(&backend.url);
    config.tenants.budgets.default = Limits {
        requests_per_minute: Some(2),
        ..Limits::default()
    };
    let proxy = start_proxy(config).await;
    let request = body(Some(10));
    for expected in [200, 200, 429] {
        assert_eq!(
            send(proxy.traffic_addr, "whoever", &request).await.status,
            expected
        );
    }
    // Not a generation: not limited.
    let (status, _) = support::client::get(proxy.traffic_addr, "/v1/models").await;
    assert_ne!(status, 429, "only generation requests are budgeted");
    assert_eq!(
        prom::value(
            &proxy.metrics.render(),
            "tokenmeter_budget_rejections_total",
            &[("tenant", "anonymous"), ("limit", "requests_per_minute")]
        ),
        1.0
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_frees_its_slot() {
    // The stream cannot end before the client leaves: the gate stays shut until then.
    let backend = Gated::start(false, 1).await;
    let limits = Limits {
        concurrent_streams: Some(1),
        ..Limits::default()
    };
    let proxy = start_proxy(with_budget(&backend.url, limits)).await;
    let request = body(Some(10));
    let mut first = open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        &request,
        &[("x-tenant-id", "team-a")],
    )
    .await;
    assert_eq!(first.status, 200);
    first
        .next_frame()
        .await
        .expect("a frame")
        .expect("no error");
    first.disconnect();
    wait_for_metric(
        &proxy,
        "tokenmeter_tenant_requests_total",
        &[("tenant", "team-a"), ("outcome", "cancelled")],
        1.0,
    )
    .await;
    backend.open();
    assert_eq!(
        send(proxy.traffic_addr, "team-a", &request).await.status,
        200,
        "the cancelled stream was settled and its slot freed"
    );
}
