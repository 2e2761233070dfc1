//! `tenants.upstream_key_file` end to end: tenants authenticate to the proxy with their own keys
//! and every upstream request of theirs (the forward, a retry on another backend, a hand-off's
//! prefill, a passthrough) carries the backend's key instead, never the client's; without it
//! the client's `Authorization` reaches the backend byte for byte. A bad key file refuses the
//! start or the reload naming the key and the path, never the key, and a new key applies on reload.

use crate::support;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokenmeter::config::{Anonymous, Config, HandoffConfig, TenantSource};
use tokenmeter::server::ServerHandle;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use support::backend::{replay, Backend, Report, Script, Seen};
use support::client::{open_with, Protocol, Streamed};
use support::tls::TempDir;
use support::{config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const CLIENT_KEY: &str = "tenant-key-a";
const BACKEND_KEY: &str = "sk-backend-0123456789";

fn digest(key: &str) -> String {
    tokenmeter::tenant::keys::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The keys file (the client's key is tenant `team-a`'s) and the backend's key file.
fn key_files(dir: &TempDir) -> (PathBuf, PathBuf) {
    let keys = dir.write("keys", &format!("sha256:{} team-a\n", digest(CLIENT_KEY)));
    let backend = dir.write("backend-key", &format!("{BACKEND_KEY}\n"));
    (keys, backend)
}

/// Tenants by API key (refused without one), the backend's key from `backend_key`.
fn swapping(mut config: Config, keys: &Path, backend_key: Option<&Path>) -> Config {
    config.tenants.sources = vec![TenantSource::ApiKey];
    config.tenants.keys_file = Some(keys.to_owned());
    config.tenants.anonymous = Anonymous::Refuse;
    config.tenants.upstream_key_file = backend_key.map(Path::to_owned);
    config.validate().expect("valid config");
    config
}

async fn send(proxy: &ServerHandle, method: &str, path: &str, authorization: &str) -> Streamed {
    let body = if method == "GET" { "" } else { BODY };
    open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        method,
        path,
        body,
        &[("authorization", authorization)],
    )
    .await
    .collect()
    .await
}

/// The `authorization` lines of a request head exactly as the backend read them.
fn authorization_lines(seen: &Seen) -> Vec<&str> {
    seen.head
        .split("\r\n")
        .filter(|line| {
            line.split_once(':')
                .is_some_and(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        })
        .collect()
}

fn backend_key_only(seen: &Seen, what: &str) {
    assert_eq!(
        authorization_lines(seen),
        [format!("authorization: Bearer {BACKEND_KEY}").as_str()],
        "{what}: the backend's key, once"
    );
    assert!(
        !seen.head.contains(CLIENT_KEY),
        "{what}: the client's key never reaches the backend: {}",
        seen.head
    );
}

#[tokio::test]
async fn the_backend_sees_its_own_key_and_never_the_clients() {
    let dir = TempDir::new("upstream-key");
    let (keys, backend_key) = key_files(&dir);
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(swapping(
        config_for(&backend.url),
        &keys,
        Some(&backend_key),
    ))
    .await;
    let bearer = format!("Bearer {CLIENT_KEY}");

    let streamed = send(&proxy, "POST", CHAT, &bearer).await;
    assert_eq!(streamed.status, 200);
    backend_key_only(&backend.next_request().await, "a metered stream");
    let passthrough = send(&proxy, "GET", "/v1/models", &bearer).await;
    assert_eq!(passthrough.status, 200);
    backend_key_only(&backend.next_request().await, "a passthrough");

    // The client's key still names its tenant, and a key the proxy does not know goes nowhere.
    let refused = send(&proxy, "POST", CHAT, "Bearer someone-else").await;
    assert_eq!(refused.status, 401);
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tenant_requests_total",
            &[("tenant", "team-a"), ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[]),
        3.0,
        "the refusal reached no backend"
    );
    while let Ok(report) = backend.reports.try_recv() {
        assert!(
            !matches!(report, Report::Request(_)),
            "the refused request reached no backend: {report:?}"
        );
    }

    // A new key applies on reload; a key file gone refuses the reload and the running key stays.
    std::fs::write(&backend_key, "sk-backend-rotated\n").expect("rotate the key");
    let config = swapping(config_for(&backend.url), &keys, Some(&backend_key));
    proxy.reload(config.clone()).await.expect("reload");
    assert_eq!(send(&proxy, "POST", CHAT, &bearer).await.status, 200);
    let rotated = backend.next_request().await;
    assert_eq!(
        authorization_lines(&rotated),
        ["authorization: Bearer sk-backend-rotated"],
        "the rotated key"
    );
    std::fs::remove_file(&backend_key).expect("remove the key file");
    let refused = proxy
        .reload(config)
        .await
        .expect_err("a missing key file refuses the reload");
    assert!(
        refused.starts_with(&format!(
            "tenants.upstream_key_file {}: ",
            backend_key.display()
        )),
        "{refused}"
    );
    assert!(!refused.contains("sk-backend"), "never the key: {refused}");
    assert_eq!(send(&proxy, "POST", CHAT, &bearer).await.status, 200);
    assert_eq!(
        authorization_lines(&backend.next_request().await),
        ["authorization: Bearer sk-backend-rotated"],
        "the running key stays"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn without_the_key_file_the_clients_authorization_passes_byte_for_byte() {
    let dir = TempDir::new("upstream-key-off");
    let (keys, _) = key_files(&dir);
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(swapping(config_for(&backend.url), &keys, None)).await;
    // Odd but valid: the scheme's case and two spaces must reach the backend as they were sent.
    let sent = format!("bearer  {CLIENT_KEY}");
    assert_eq!(send(&proxy, "POST", CHAT, &sent).await.status, 200);
    let seen = backend.next_request().await;
    assert_eq!(
        authorization_lines(&seen),
        [format!("authorization: {sent}").as_str()],
        "the client's header, unchanged"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_bad_key_file_refuses_the_start_naming_the_key_and_the_path() {
    let dir = TempDir::new("upstream-key-start");
    let (keys, _) = key_files(&dir);
    let empty = dir.write("empty-key", "\n");
    let spaced = dir.write("spaced-key", "sk-secret one\n");
    let missing = dir.path("no-such-key");
    for (path, message) in [
        (&missing, None),
        (&empty, Some("is empty")),
        (&spaced, Some("the key must be one word of printable ASCII")),
    ] {
        let config = swapping(config_for("http://127.0.0.1:1"), &keys, Some(path));
        let traffic = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let Err(err) = tokenmeter::server::spawn_with_hooks(config, traffic, admin, Vec::new())
        else {
            panic!("{} must refuse the start", path.display());
        };
        let text = err.to_string();
        let named = format!("tenants.upstream_key_file {}: ", path.display());
        match message {
            Some(message) => assert_eq!(text, format!("{named}{message}")),
            None => assert!(text.starts_with(&named), "{text}"),
        }
        assert!(!text.contains("sk-secret"), "never the key: {text}");
    }
}

/// A prefill answer offering vLLM's KV-transfer parameters.
const PREFILL_ANSWER: &str = r#"{"id":"cmpl-p","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"length"}],"usage":{"prompt_tokens":900,"completion_tokens":1,"total_tokens":901},"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[7],"remote_engine_id":"engine-a","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}}"#;

#[tokio::test]
async fn a_handed_off_prefill_carries_the_backends_key_too() {
    let dir = TempDir::new("upstream-key-handoff");
    let (keys, backend_key) = key_files(&dir);
    let mut prefill = Backend::start(|_: &Seen| Script::json(200, PREFILL_ANSWER)).await;
    let mut decode = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    // The prefill backend answers at once. Its timeout is not what is tested here: past it the
    // request would fall back (`prefill_timeout`, not `remote`), so it is generous, for a loaded
    // 2-core machine (was 2 s).
    let handoff = HandoffConfig {
        min_prompt_tokens: 1000,
        prefill_timeout: Duration::from_secs(30),
        ..HandoffConfig::default()
    };
    let config = support::handoff_pools(&prefill.url, &decode.url, handoff);
    let proxy = start_proxy(swapping(config, &keys, Some(&backend_key))).await;
    let long = format!(
        r#"{{"model":"m1","stream":true,"max_tokens":7,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(8000)
    );
    let streamed = open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        &long,
        &[("authorization", &format!("Bearer {CLIENT_KEY}"))],
    )
    .await
    .collect()
    .await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    let asked = prefill.next_request().await;
    let sent: Value = serde_json::from_slice(&asked.body).expect("the prefill request");
    assert_eq!(sent["max_tokens"], 1, "a prefill request");
    backend_key_only(&asked, "the prefill");
    backend_key_only(&decode.next_request().await, "the decode");
    assert_eq!(
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_disaggregated_requests_total",
            &[("result", "remote")]
        ),
        1.0,
        "handed off"
    );
    proxy.shutdown().await;
}

/// A backend that reads each request, reports its head, and closes the connection without an
/// answer: the proxy retries the request on another backend.
async fn breaking_backend() -> (String, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buffer = Vec::new();
            let read = support::backend::read_request(&mut stream, &mut buffer).await;
            // Requests only: a health check after the failure is not one of the client's.
            if let Some(seen) = read.filter(|seen| seen.head.starts_with("POST ")) {
                let _ = tx.send(seen);
            }
        }
    });
    (url, rx)
}

#[tokio::test]
async fn a_retry_on_another_backend_carries_the_backends_key() {
    let dir = TempDir::new("upstream-key-retry");
    let (keys, backend_key) = key_files(&dir);
    let (breaking, mut broken) = breaking_backend().await;
    let mut good = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = config_for(&good.url);
    config.upstream.urls = vec![breaking, good.url.clone()];
    config.routing.retries = 1;
    let proxy = start_proxy(swapping(config, &keys, Some(&backend_key))).await;
    let bearer = format!("Bearer {CLIENT_KEY}");
    // The balancer picks either backend first; within a few requests one lands on the breaking
    // backend and is retried on the good one.
    let mut retried = None;
    for _ in 0..32 {
        assert_eq!(send(&proxy, "POST", CHAT, &bearer).await.status, 200);
        backend_key_only(&good.next_request().await, "the answering backend");
        if let Ok(seen) = broken.try_recv() {
            retried = Some(seen);
            break;
        }
    }
    let first_attempt = retried.expect("a request reached the breaking backend first");
    backend_key_only(&first_attempt, "the first attempt, before the retry");
    proxy.shutdown().await;
}
