//! TLS to upstreams against a real TLS server: nginx terminating TLS (with a test CA) in front of
//! a scripted vLLM-like backend. Streams arrive byte for byte and are metered exactly; pooled TLS
//! connections are reused; SNI and the Host header name the backend; a client certificate is
//! presented to an upstream that requires one; and expired, wrong-host and untrusted certificates
//! each give a clear 502 and a counted outcome.

use crate::support;
use std::time::Duration;

use tokenmeter::config::{Config, PoolConfig, UpstreamTlsConfig};

use support::backend::{Backend, Script, Seen};
use support::nginx::{tls_server, Nginx};
use support::ports::free_port;
use support::tls::{Ca, LeafSpec, TempDir};
use support::{client, config_for, fixture, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"max_tokens":7,"stream_options":{"include_usage":true}}"#;

fn vllm(seen: &Seen) -> Script {
    support::backend::replay("vllm-chat-usage.sse", Duration::from_millis(2))(seen)
}

/// A proxy config whose one pool is `url`, with `tls` for it.
fn proxy_to(url: &str, tls: UpstreamTlsConfig) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![PoolConfig {
        name: "hosted".to_owned(),
        urls: vec![url.to_owned()],
        tls: Some(tls),
        ..PoolConfig::default()
    }];
    config.validate().expect("valid config");
    config
}

fn trusting(ca: &std::path::Path) -> UpstreamTlsConfig {
    UpstreamTlsConfig {
        ca: Some(ca.to_owned()),
        ..UpstreamTlsConfig::default()
    }
}

#[tokio::test]
async fn streams_through_an_nginx_tls_upstream_byte_for_byte_on_one_reused_connection() {
    let dir = TempDir::new("tls-upstream");
    let ca = Ca::new("upstream test CA");
    let backend = Backend::start(vllm).await;
    let (cert, key) = ca
        .leaf(&LeafSpec {
            names: &["localhost", "backend.test"],
            client: false,
            expired: false,
        })
        .write(&dir, "nginx");
    let ca_file = dir.write("ca.crt", &ca.pem);
    let port = free_port();
    let servers = tls_server(
        port,
        &cert.display().to_string(),
        &key.display().to_string(),
        &backend.url,
        "",
    );
    let nginx = Nginx::start(&dir, &servers, &[port]);

    let proxy = start_proxy(proxy_to(
        &format!("https://localhost:{port}"),
        trusting(&ca_file),
    ))
    .await;
    for i in 0..3 {
        let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
        assert_eq!(streamed.status, 200, "request {i}: {}", streamed.text());
        assert_eq!(
            streamed.bytes(),
            fixture("vllm-chat-usage.sse"),
            "request {i}: the stream arrives unchanged through TLS"
        );
    }
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
        3.0
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        21.0,
        "7 tokens per stream, exact from usage"
    );
    let log = nginx.access_log_of(3).await;
    assert_eq!(log.len(), 3, "three requests reached nginx: {log:?}");
    // No race with the next request: the connection is back in the proxy's pool once the proxy
    // read the body's end, before the client can see that end and send again.
    assert!(
        log.iter().all(|line| line[0] == log[0][0]),
        "one TLS connection carried all three (pooled and reused): {log:?}"
    );
    assert!(
        log.iter()
            .all(|line| line[1] == "localhost" && line[2] == "localhost"),
        "SNI and Host name the URL's host: {log:?}"
    );

    // An upstream addressed by IP, verified (and named in SNI) as `server_name`.
    let by_ip = start_proxy(proxy_to(
        &format!("https://127.0.0.1:{port}"),
        UpstreamTlsConfig {
            server_name: Some("backend.test".to_owned()),
            ..trusting(&ca_file)
        },
    ))
    .await;
    let streamed = client::post(by_ip.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.bytes(), fixture("vllm-chat-usage.sse"));
    let log = nginx.access_log_of(4).await;
    assert_eq!(
        log.last().map(|line| line[1].as_str()),
        Some("backend.test"),
        "SNI is the configured server_name: {log:?}"
    );
}

#[tokio::test]
async fn a_client_certificate_is_presented_to_an_upstream_that_requires_one() {
    let dir = TempDir::new("tls-upstream-mtls");
    let ca = Ca::new("upstream test CA");
    let backend = Backend::start(vllm).await;
    let (cert, key) = ca.server().write(&dir, "nginx");
    let ca_file = dir.write("ca.crt", &ca.pem);
    let (client_cert, client_key) = ca.client("tokenmeter").write(&dir, "client");
    let port = free_port();
    let require = format!(
        "ssl_client_certificate {};\n    ssl_verify_client on;",
        ca_file.display()
    );
    let servers = tls_server(
        port,
        &cert.display().to_string(),
        &key.display().to_string(),
        &backend.url,
        &require,
    );
    let nginx = Nginx::start(&dir, &servers, &[port]);
    let url = format!("https://localhost:{port}");

    let with_cert = start_proxy(proxy_to(
        &url,
        UpstreamTlsConfig {
            cert: Some(client_cert),
            key: Some(client_key),
            ..trusting(&ca_file)
        },
    ))
    .await;
    let streamed = client::post(with_cert.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert_eq!(streamed.bytes(), fixture("vllm-chat-usage.sse"));

    let without = start_proxy(proxy_to(&url, trusting(&ca_file))).await;
    let refused = client::post(without.traffic_addr, CHAT, BODY).await;
    assert_eq!(
        refused.status,
        400,
        "nginx answers a client without a certificate 400: {}",
        refused.text()
    );
    let log = nginx.access_log_of(2).await;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log[0][3].contains("CN=tokenmeter"),
        "nginx saw tokenmeter's client certificate: {log:?}"
    );
    assert_eq!(
        log[1][3], "-",
        "no certificate from the proxy without one (nginx logs `-`): {log:?}"
    );
}

#[tokio::test]
async fn expired_wrong_host_and_untrusted_certificates_give_a_clear_502_and_are_counted() {
    let dir = TempDir::new("tls-upstream-bad");
    let ca = Ca::new("upstream test CA");
    let stranger = Ca::new("a CA nobody trusts");
    let backend = Backend::start(vllm).await;
    let ca_file = dir.write("ca.crt", &ca.pem);
    let cases = [
        (
            "expired",
            ca.leaf(&LeafSpec {
                names: &["localhost"],
                client: false,
                expired: true,
            }),
            "expired",
        ),
        (
            "wrong-host",
            ca.leaf(&LeafSpec {
                names: &["elsewhere.test"],
                client: false,
                expired: false,
            }),
            "not valid for name",
        ),
        ("untrusted", stranger.server(), "UnknownIssuer"),
    ];
    let mut servers = String::new();
    let mut ports = Vec::new();
    for (name, leaf, _) in &cases {
        let (cert, key) = leaf.write(&dir, name);
        let port = free_port();
        servers.push_str(&tls_server(
            port,
            &cert.display().to_string(),
            &key.display().to_string(),
            &backend.url,
            "",
        ));
        ports.push(port);
    }
    let nginx = Nginx::start(&dir, &servers, &ports);

    for ((name, _, reason), port) in cases.iter().zip(&ports) {
        let proxy = start_proxy(proxy_to(
            &format!("https://localhost:{port}"),
            trusting(&ca_file),
        ))
        .await;
        let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
        assert_eq!(streamed.status, 502, "{name}: {}", streamed.text());
        let error: serde_json::Value =
            serde_json::from_slice(&streamed.bytes()).expect("a JSON error");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("TLS handshake with localhost failed") && message.contains(reason),
            "{name}: the error says why ({reason:?}): {message}"
        );
        assert_eq!(
            error["error"]["type"], "upstream_unavailable",
            "{name}: {error}"
        );
        let text = proxy.metrics.render();
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_requests_total",
                &[("outcome", "upstream_error")]
            ),
            1.0,
            "{name}: the failure is counted as an upstream error"
        );
    }
    assert!(
        nginx.access_log().is_empty(),
        "no request was sent over an unverified connection"
    );
}
