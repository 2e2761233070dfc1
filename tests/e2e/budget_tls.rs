//! Budgets in a Redis reached over TLS (`rediss://`), as managed Redis services require: Debian's
//! `redis-server` with a TLS port and certificates made here. A store that trusts the right CA
//! holds the budget to the token, with a client certificate where Redis asks for one; a CA that
//! does not match stops `serve` at start with a message naming the keys, and a handshake that
//! fails while serving is decided by `on_store_error` and counted (`op="connect", error="tls"`).

use crate::support;
use std::process::Command;
use std::time::Duration;

use support::backend::{replay, Backend};
use support::budget::{completion_tokens, output_per_day, send_as};
use support::client::Streamed;
use support::redis::{Certificates, Redis};
use support::tls::Ca;
use support::{config_for, prom, start_proxy, wait_for_metric};
use tokenmeter::config::{Config, OnStoreError, StoreTlsConfig, TenantSource};

fn config(upstream: &str, redis: &Redis, tls: StoreTlsConfig, policy: OnStoreError) -> Config {
    let mut config = config_for(upstream);
    config.tenants.sources = vec![TenantSource::Header];
    let budgets = &mut config.tenants.budgets;
    budgets.store = redis.tls_url();
    budgets.store_tls = tls;
    budgets.on_store_error = policy;
    // Long enough that a loaded machine never times out a Redis that is up.
    budgets.store_timeout = Duration::from_secs(2);
    budgets
        .tenant
        .insert("team-a".to_owned(), output_per_day(1_000_000));
    config
}

/// One request as team-a, answered within 10 s (a request waits for Redis at most its 2 s store
/// timeout; the rest is a zero-delay replay on loopback).
async fn send(addr: std::net::SocketAddr) -> Streamed {
    send_as(addr, "team-a", Duration::from_secs(10)).await
}

/// Serves three requests through `config` and checks Redis holds what they used.
async fn served_to_the_token(config: Config, redis: &Redis) {
    let proxy = start_proxy(config).await;
    let mut served = 0;
    for _ in 0..3 {
        let streamed = send(proxy.traffic_addr).await;
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        served += completion_tokens(&streamed) as i64;
    }
    wait_for_metric(&proxy, "tokenmeter_budget_settlements_pending", &[], 0.0).await;
    assert_eq!(
        redis.sum("tokenmeter:{team-a}:day:*"),
        served,
        "Redis holds what was served"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_budget_store_errors_total", &[]),
        0.0,
        "no store error over TLS"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_budget_store_seconds_count",
            &[("op", "admit")]
        ),
        3.0,
        "each admission one round trip to Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_store_holds_the_budget_with_and_without_a_client_certificate() {
    let certs = Certificates::new();
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let trusting = StoreTlsConfig {
        ca: Some(certs.ca.clone()),
        ..StoreTlsConfig::default()
    };

    // Redis that does not ask for a client certificate: the CA is enough.
    let redis = certs.redis(false);
    let only_ca = config(&backend.url, &redis, trusting.clone(), OnStoreError::Deny);
    served_to_the_token(only_ca, &redis).await;

    // Redis that requires one: served with it...
    let strict = certs.redis(true);
    let identified = StoreTlsConfig {
        cert: Some(certs.client.0.clone()),
        key: Some(certs.client.1.clone()),
        ..trusting.clone()
    };
    let with_cert = config(&backend.url, &strict, identified, OnStoreError::Deny);
    served_to_the_token(with_cert, &strict).await;

    // ...and without it, `deny` answers 503 once the admission timed out, and the store finds
    // out why on a connection of its own: the handshake Redis refused, counted as TLS.
    let proxy = start_proxy(config(&backend.url, &strict, trusting, OnStoreError::Deny)).await;
    let refused = send(proxy.traffic_addr).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let admit = [("op", "admit"), ("error", "timeout")];
    let connect = [("op", "connect"), ("error", "tls")];
    wait_for_metric(&proxy, "tokenmeter_budget_store_errors_total", &admit, 1.0).await;
    wait_for_metric(
        &proxy,
        "tokenmeter_budget_store_errors_total",
        &connect,
        1.0,
    )
    .await;
    drop(certs.dir);
}

#[test]
fn a_ca_that_does_not_match_stops_serve_at_start_naming_the_keys() {
    let certs = Certificates::new();
    let redis = certs.redis(false);
    let other = Ca::new("another CA");
    let wrong_ca = certs.dir.write("other-ca.crt", &other.pem);
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n\
         [tenants]\nsources = [\"header\"]\n\
         [tenants.budgets]\nstore = \"{}\"\non_store_error = \"deny\"\nstore_timeout = \"5s\"\n\
         [tenants.budgets.store_tls]\nca = \"{}\"\n\
         [tenants.budgets.default]\ntokens_per_day = 1000\n",
        support::ports::free_port(),
        support::ports::free_port(),
        redis.tls_url(),
        wrong_ca.display()
    );
    let path = certs.dir.write("tokenmeter.toml", &config);
    let stderr = refused_start(&path);
    assert!(
        stderr.contains("tenants.budgets.store_tls") && stderr.contains("UnknownIssuer"),
        "names the keys and what rustls said: {stderr}"
    );

    // A CA file that is not one is refused naming its key, before any connection.
    std::fs::write(&wrong_ca, "not a certificate").expect("write");
    let stderr = refused_start(&path);
    assert!(
        stderr.contains("tenants.budgets.store_tls.ca"),
        "names the key: {stderr}"
    );
}

/// Runs `tokenmeter serve --config path` (none of the variables that would override the file),
/// which must refuse to start: exit status 1, within 30 s (it connects to Redis once, with a 5 s
/// store timeout; a binary that started serving instead is killed and the test fails). Its
/// stderr.
fn refused_start(path: &std::path::Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokenmeter"))
        .args(["serve", "--config"])
        .arg(path)
        .env_remove("TOKENMETER_BUDGET_STORE")
        .env_remove("TOKENMETER_LISTEN")
        .env_remove("TOKENMETER_ADMIN_LISTEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tokenmeter runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tokenmeter serve was still running after 30 s: it did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(1), "start refused: {stderr}");
    assert!(
        !stderr.contains("tokenmeter serving"),
        "refused before it said it was serving: {stderr}"
    );
    stderr
}
