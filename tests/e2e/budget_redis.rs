//! Tenant budgets shared through a real Redis (Debian's `redis-server` on a loopback port of its
//! own): two tokenmeter replicas enforce one budget under concurrent clients, and Redis killed
//! and started again under each `on_store_error` policy — no request waits on it past
//! `store_timeout`, the policy applies, and the counts reconcile, to the token, once it is back;
//! and a replica that refuses a tenant near its day's budget reads the fleet's figure in its
//! used-ratio gauge.

use crate::support;
use std::sync::Arc;
use std::time::Duration;

use support::backend::{replay, Backend, Script};
use support::budget::{completion_tokens, output_per_day, send_as, BODY, CHAT, RESERVATION};
use support::client::{open_with, Protocol, Streamed};
use support::redis::Redis;
use support::{config_for, prom, start_proxy, wait_for_metric};
use tokenmeter::config::{Config, Limits, OnStoreError, TenantSource};
use tokenmeter::server::ServerHandle;

/// Team-a's tokens of the day in Redis, over the days the test spans.
const TEAM_A_DAY: &str = "tokenmeter:{team-a}:day:*";
/// The store timeout of the outage tests: each request waits this long for a dead Redis.
const OUTAGE_TIMEOUT: Duration = Duration::from_millis(500);

/// `timeout`: long enough that a loaded test machine never times out a Redis that is up.
fn shared(
    upstream: &str,
    redis: &Redis,
    limits: Limits,
    policy: OnStoreError,
    timeout: Duration,
) -> Config {
    let mut config = config_for(upstream);
    config.tenants.sources = vec![TenantSource::Header];
    let budgets = &mut config.tenants.budgets;
    budgets.store = redis.url();
    budgets.on_store_error = policy;
    budgets.store_timeout = timeout;
    budgets.tenant.insert("team-a".to_owned(), limits);
    config
}

/// Sends one request as team-a; no request may take longer than 5 s (none waits on Redis past
/// its timeout). The property is the bound, kept generous: a request waits for Redis at most its
/// store timeout (0.5 s in the outage tests, 2 s with Redis up), and the rest is a zero-delay
/// replay on loopback, milliseconds; the seconds left over are for a loaded 2-core machine.
async fn send(addr: std::net::SocketAddr) -> Streamed {
    send_as(addr, "team-a", Duration::from_secs(5)).await
}

/// A Redis, a backend, and a proxy in front of it whose team-a has a budget it will not reach,
/// for the outage tests.
async fn outage_setup(policy: OnStoreError) -> (Redis, Backend, ServerHandle) {
    let redis = Redis::start();
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let config = shared(
        &backend.url,
        &redis,
        output_per_day(1_000_000),
        policy,
        OUTAGE_TIMEOUT,
    );
    let proxy = start_proxy(config).await;
    (redis, backend, proxy)
}

async fn settled(proxy: &ServerHandle) {
    wait_for_metric(proxy, "tokenmeter_budget_settlements_pending", &[], 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_in_front_of_one_redis_enforce_one_budget() {
    let redis = Redis::start();
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    const BUDGET: u64 = 300;
    let config = shared(
        &backend.url,
        &redis,
        output_per_day(BUDGET),
        OnStoreError::Deny,
        Duration::from_secs(2),
    );
    let replicas = Arc::new([start_proxy(config.clone()).await, start_proxy(config).await]);
    // Eight clients, each alternating between the replicas until refused three times in a row.
    let mut clients = Vec::new();
    for client in 0..8usize {
        let replicas = Arc::clone(&replicas);
        clients.push(tokio::spawn(async move {
            let (mut admitted, mut tokens, mut refused, mut in_a_row) = ([0u64; 2], 0, 0, 0);
            let mut sent = [0u64; 2];
            for n in 0..100usize {
                let replica = (client + n) % 2;
                let streamed = send(replicas[replica].traffic_addr).await;
                sent[replica] += 1;
                match streamed.status.as_u16() {
                    200 => {
                        admitted[replica] += 1;
                        tokens += completion_tokens(&streamed);
                        in_a_row = 0;
                    }
                    429 => {
                        refused += 1;
                        in_a_row += 1;
                        if in_a_row == 3 {
                            break;
                        }
                    }
                    other => panic!("unexpected status {other}: {}", streamed.text()),
                }
            }
            (admitted, tokens, refused, sent)
        }));
    }
    let (mut admitted, mut tokens, mut refused) = ([0u64; 2], 0u64, 0u64);
    let mut sent = [0u64; 2];
    for client in clients {
        let (a, t, r, s) = client.await.expect("a client");
        for replica in 0..2 {
            admitted[replica] += a[replica];
            sent[replica] += s[replica];
        }
        tokens += t;
        refused += r;
    }
    assert!(
        admitted[0] > 0 && admitted[1] > 0,
        "both replicas admitted requests: {admitted:?}"
    );
    assert!(
        tokens <= BUDGET + 2 * RESERVATION,
        "the clients got {tokens} tokens: within the budget of {BUDGET} plus one reservation per replica"
    );
    assert!(
        tokens + 7 + RESERVATION * 8 > BUDGET,
        "and the budget was used up ({tokens} of {BUDGET}) before the clients were refused"
    );
    for replica in replicas.iter() {
        settled(replica).await;
    }
    assert_eq!(
        redis.sum(TEAM_A_DAY),
        tokens as i64,
        "Redis holds exactly the tokens the clients were served"
    );
    let rejections: f64 = replicas
        .iter()
        .map(|replica| {
            prom::value(
                &replica.metrics.render(),
                "tokenmeter_budget_rejections_total",
                &[("tenant", "team-a"), ("limit", "tokens_per_day")],
            )
        })
        .sum();
    assert_eq!(
        rejections, refused as f64,
        "every 429 the clients saw is counted"
    );
    for (replica, sent) in replicas.iter().zip(sent) {
        let text = replica.metrics.render();
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_budget_store_seconds_count",
                &[("op", "admit")]
            ),
            sent as f64,
            "the Redis round trip is a histogram: one admission round trip per request"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_a_dead_redis_lets_requests_through_and_their_usage_lands_when_it_returns() {
    let (mut redis, _backend, proxy) = outage_setup(OnStoreError::Allow).await;
    let addr = proxy.traffic_addr;
    let mut served = 0;
    for _ in 0..5 {
        let streamed = send(addr).await;
        assert_eq!(streamed.status, 200);
        served += completion_tokens(&streamed);
    }
    settled(&proxy).await;
    assert_eq!(redis.sum(TEAM_A_DAY), served as i64);
    // (Counted from here: on a loaded machine a first admission can outlast the timeout too.)
    let before = proxy.metrics.render();
    let fallbacks_before = prom::value(
        &before,
        "tokenmeter_budget_store_fallbacks_total",
        &[("policy", "allow")],
    );
    let errors_before = prom::sum(
        &before,
        "tokenmeter_budget_store_errors_total",
        &[("op", "admit")],
    );

    redis.kill();
    // Load while Redis is gone: three clients, two requests each.
    let during: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(async move {
                let mut tokens = 0;
                for _ in 0..2 {
                    let streamed = send(addr).await;
                    assert_eq!(streamed.status, 200, "let through unchecked");
                    tokens += completion_tokens(&streamed);
                }
                tokens
            })
        })
        .collect();
    for client in during {
        served += client.await.expect("a client");
    }
    let text = proxy.metrics.render();
    let fallbacks = prom::value(
        &text,
        "tokenmeter_budget_store_fallbacks_total",
        &[("policy", "allow")],
    );
    assert_eq!(
        fallbacks - fallbacks_before,
        6.0,
        "each request of the outage"
    );
    let errors = prom::sum(
        &text,
        "tokenmeter_budget_store_errors_total",
        &[("op", "admit")],
    );
    assert_eq!(
        errors - errors_before,
        6.0,
        "each unchecked admission is a store error"
    );
    // The outage's six settlements wait for Redis, each queued when its request ended (which may
    // be a moment after its client read the last byte).
    wait_for_metric(&proxy, "tokenmeter_budget_settlements_pending", &[], 6.0).await;

    redis.restart();
    settled(&proxy).await;
    assert_eq!(
        redis.sum(TEAM_A_DAY),
        served as i64,
        "once Redis is back it holds every token served, the outage's included"
    );
    let streamed = send(addr).await;
    assert_eq!(streamed.status, 200);
    served += completion_tokens(&streamed);
    settled(&proxy).await;
    assert_eq!(redis.sum(TEAM_A_DAY), served as i64);
    assert_eq!(
        prom::value(
            &proxy.metrics.render(),
            "tokenmeter_budget_store_fallbacks_total",
            &[("policy", "allow")]
        ),
        fallbacks,
        "checked again once Redis is back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deny_a_dead_redis_answers_503_until_it_returns() {
    let (mut redis, _backend, proxy) = outage_setup(OnStoreError::Deny).await;
    let addr = proxy.traffic_addr;
    assert_eq!(send(addr).await.status, 200);

    redis.kill();
    for _ in 0..4 {
        let refused = send(addr).await;
        assert_eq!(refused.status, 503);
        let json: serde_json::Value =
            serde_json::from_slice(&refused.bytes()).expect("a JSON error");
        assert_eq!(json["error"]["type"], "service_unavailable");
        assert_eq!(
            refused
                .headers
                .get("retry-after")
                .and_then(|value| value.to_str().ok()),
            Some("1")
        );
    }
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_budget_rejections_total",
            &[("tenant", "team-a"), ("limit", "store_unavailable")]
        ),
        4.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_budget_store_fallbacks_total",
            &[("policy", "deny")]
        ),
        4.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-a"), ("outcome", "overloaded")]
        ),
        4.0,
        "turned away by tokenmeter, never sent upstream"
    );

    redis.restart();
    // The connection comes back on its own; until it has, requests are still refused. It retries
    // with a backoff of at most 2 s; the 20 s only turn a connection that never comes back into a
    // failure, with room for a loaded machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let streamed = send(addr).await;
        if streamed.status == 200 {
            break;
        }
        assert_eq!(streamed.status, 503);
        assert!(
            tokio::time::Instant::now() < deadline,
            "requests were admitted again once Redis was back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settled(&proxy).await;
    assert_eq!(
        redis.sum(TEAM_A_DAY),
        14,
        "the two admitted requests' 7 output tokens each, nothing of the refused ones"
    );
}

/// A stream whose usage chunk reports 62 output tokens.
fn using_62() -> Script {
    let events = [
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}"#,
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"m1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":62,"total_tokens":67}}"#,
        "data: [DONE]",
    ];
    Script::sse(
        events
            .into_iter()
            .map(|event| (Duration::ZERO, format!("{event}\n\n").into_bytes()))
            .collect(),
    )
}

/// Team-a's request reserving 50 output tokens.
async fn send_50(addr: std::net::SocketAddr) -> Streamed {
    let body = BODY.replace(r#""max_tokens":10"#, r#""max_tokens":50"#);
    open_with(
        addr,
        Protocol::Http1,
        "POST",
        CHAT,
        &body,
        &[("x-tenant-id", "team-a")],
    )
    .await
    .collect()
    .await
}

fn day_ratio(proxy: &ServerHandle) -> f64 {
    prom::value(
        &proxy.metrics.render(),
        "tokenmeter_budget_used_ratio",
        &[("tenant", "team-a"), ("limit", "tokens_per_day")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_refuses_a_tenant_at_93_percent_of_its_day_reads_93_percent() {
    // 200 tokens a day; each request reserves its max_tokens (50) and uses 62. Replica A serves
    // three (186 used, 93 %); replica B, which never admitted team-a, refuses the fourth: its
    // gauge comes from the refusal alone, the fleet's count that Redis answered.
    let redis = Redis::start();
    let backend = Backend::start(|_| using_62()).await;
    let config = shared(
        &backend.url,
        &redis,
        output_per_day(200),
        OnStoreError::Deny,
        Duration::from_secs(2),
    );
    let a = start_proxy(config.clone()).await;
    let b = start_proxy(config).await;
    for n in 1..=3u64 {
        assert_eq!(
            send_50(a.traffic_addr).await.status,
            200,
            "request {n} on A"
        );
        wait_for_metric(
            &a,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-a")],
            n as f64,
        )
        .await;
        settled(&a).await;
    }
    assert_eq!(
        redis.sum(TEAM_A_DAY),
        186,
        "Redis holds the three requests' usage"
    );
    assert_eq!(
        day_ratio(&a),
        186.0 / 200.0,
        "A's gauge follows its settlements: the day's count Redis answered"
    );
    assert!(
        prom::find(
            &b.metrics.render(),
            "tokenmeter_budget_used_ratio",
            &[("tenant", "team-a")]
        )
        .is_empty(),
        "B has admitted nothing of team-a's yet"
    );
    let refused = send_50(b.traffic_addr).await;
    assert_eq!(
        refused.status, 429,
        "186 used + 50 reserved > 200 on either replica"
    );
    let ratio = day_ratio(&b);
    assert_eq!(ratio, 186.0 / 200.0, "B refused team-a at 93 % of its day");
    assert!(
        ratio > 0.9,
        "over the 90 % of TokenmeterTenantNearDailyBudget"
    );
}
