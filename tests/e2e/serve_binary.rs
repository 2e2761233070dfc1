//! The real binary: `tokenmeter serve` configured by environment, drained by SIGTERM, and refusing a
//! bad config with the key named.

use crate::support;
use crate::support::otlp;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::backend::{replay, Backend, Script};
use support::ports::free_port;
use support::{client, events_of, fixture};

const BIN: &str = env!("CARGO_BIN_EXE_tokenmeter");

/// How long a test waits for the binary to do what it does at once (start, apply a reload): the
/// bound only turns a hang into a failure, and is seconds so that a debug binary on a loaded 2-core
/// machine never reaches it.
const PATIENCE: Duration = Duration::from_secs(20);

/// Waits (at most [`PATIENCE`]) until the binary's admin port answers `/readyz` with 200.
async fn wait_ready(admin_addr: std::net::SocketAddr) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(admin_addr).await.is_ok()
            && client::get(admin_addr, "/readyz").await.0 == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the admin port did not become ready");
}

#[tokio::test]
async fn serve_runs_from_env_and_drains_on_sigterm() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::from_millis(2))).await;
    let (traffic, admin) = (free_port(), free_port());
    let child = Command::new(BIN)
        .arg("serve")
        .env("TOKENMETER_LISTEN", format!("127.0.0.1:{traffic}"))
        .env("TOKENMETER_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
        .env("TOKENMETER_UPSTREAM", &backend.url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokenmeter serve starts");
    let admin_addr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic_addr = format!("127.0.0.1:{traffic}").parse().expect("addr");

    wait_ready(admin_addr).await;

    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;
    let streamed = client::post(traffic_addr, "/v1/chat/completions", body).await;
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-no-usage.sse"),
        "usage injected and stripped"
    );
    let (_, metrics) = client::get(admin_addr, "/metrics").await;
    assert_eq!(
        support::prom::sum(
            &metrics,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0,
        "exact count from the injected usage"
    );

    let pid = child.id().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "SIGTERM sent");
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    assert!(
        exited.status.success(),
        "exit 0 after draining: {:?}",
        exited.status
    );
    let log = String::from_utf8_lossy(&exited.stderr);
    assert!(log.contains("draining"), "the drain is logged: {log}");
    assert!(!log.contains("Hi\""), "no prompt text in the log: {log}");
}

#[test]
fn bad_config_is_refused_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("tokenmeter-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[upstream]\nidle_timeout = \"soon\"\n").expect("write config");
    let output = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("tokenmeter runs");
    assert_eq!(output.status.code(), Some(1), "start refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("upstream.idle_timeout") && stderr.contains("invalid duration"),
        "the message names the key and the problem: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shipped_config_checks() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokenmeter.toml");
    let output = Command::new(BIN)
        .args(["serve", "--check", "--config", config])
        .output()
        .expect("tokenmeter runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains("ttft: 800ms"),
        "the parsed config is printed: {printed}"
    );
}

/// A child process killed when the test ends early (a failed assert), so none is left running.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `tokenmeter_config_reloads_total{result}` as the admin port says it now.
async fn reloads(admin: std::net::SocketAddr, result: &str) -> f64 {
    let (_, metrics) = client::get(admin, "/metrics").await;
    support::prom::sum(
        &metrics,
        "tokenmeter_config_reloads_total",
        &[("result", result)],
    )
}

/// Polls the admin port until `tokenmeter_config_reloads_total{result}` is `value` (at most
/// [`PATIENCE`]).
async fn wait_for_reloads(admin: std::net::SocketAddr, result: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = reloads(admin, result).await;
        if seen == value {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reloads {{result={result}}} stayed at {seen}, expected {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_file_watch_and_sighup_reload_the_config_file() {
    let vllm = |_: &support::backend::Seen| {
        Script::sse(
            events_of(&fixture("vllm-chat-usage.sse"))
                .into_iter()
                .map(|e| (Duration::from_millis(1), e))
                .collect(),
        )
    };
    let mut a = Backend::start(vllm).await;
    let mut b = Backend::start(vllm).await;
    let (traffic, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("tokenmeter-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tokenmeter.toml");
    let write = |upstream: &str, watch: bool| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{traffic}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             watch_config = {watch}\nwatch_interval = \"100ms\"\n[upstream]\nurls = [\"{upstream}\"]\n"
        );
        std::fs::write(&path, text).expect("write config");
    };
    write(&a.url, true);
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokenmeter serve starts");
    let mut child = KillOnDrop(Some(child));
    let admin_addr: std::net::SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic_addr: std::net::SocketAddr = format!("127.0.0.1:{traffic}").parse().expect("addr");
    wait_ready(admin_addr).await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let chat = "/v1/chat/completions";
    client::post(traffic_addr, chat, body).await;
    a.next_request().await;

    // The watch sees the new file. How long it took to apply it, on this machine under whatever
    // load it has, is the measure of "the watch would have applied it by now" below.
    let written = tokio::time::Instant::now();
    write(&b.url, true);
    wait_for_reloads(admin_addr, "ok", 1.0).await;
    let applied_in = written.elapsed();
    client::post(traffic_addr, chat, body).await;
    b.next_request().await;

    // A broken file is refused; the running config stays.
    std::fs::write(&path, "[upstream]\nurls = [\"ftp://nowhere\"]\n").expect("write");
    wait_for_reloads(admin_addr, "error", 1.0).await;
    client::post(traffic_addr, chat, body).await;
    b.next_request().await;

    // A file that turns the watch off, then a change only SIGHUP applies.
    write(&a.url, false);
    wait_for_reloads(admin_addr, "ok", 2.0).await;
    write(&b.url, false);
    // Nothing to wait for: what must not happen is a reload. So watch for one, for four times what
    // the watch took to apply a change above (and at least four of its 100 ms intervals): a watch
    // still on would have applied this change well within that, however loaded the machine.
    let window = (applied_in * 4).max(Duration::from_millis(400));
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        assert_eq!(
            reloads(admin_addr, "ok").await,
            2.0,
            "the watch is off: the change waits for SIGHUP"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client::post(traffic_addr, chat, body).await;
    a.next_request().await;
    let pid = child
        .0
        .as_ref()
        .map(|c| c.id().to_string())
        .unwrap_or_default();
    let hup = Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill runs");
    assert!(hup.success(), "SIGHUP sent");
    wait_for_reloads(admin_addr, "ok", 3.0).await;
    client::post(traffic_addr, chat, body).await;
    b.next_request().await;

    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let child = child.0.take().expect("still ours");
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let log = String::from_utf8_lossy(&exited.stderr);
    assert!(
        log.contains("config reload refused") && log.contains("upstream.urls[0]"),
        "the refusal is logged with the key: {log}"
    );
    assert!(log.contains("SIGHUP"), "the trigger is logged: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_opentelemetry_variables_turn_tracing_on_and_sigterm_sends_the_last_spans() {
    let receiver = otlp::Receiver::start(otlp::Protocol::Grpc).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::from_millis(2))).await;
    let (traffic, admin) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("TOKENMETER_LISTEN", format!("127.0.0.1:{traffic}"))
        .env("TOKENMETER_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
        .env("TOKENMETER_UPSTREAM", &backend.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "sidecar-7")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tokenmeter serve starts");
    let admin_addr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic_addr = format!("127.0.0.1:{traffic}").parse().expect("addr");
    wait_ready(admin_addr).await;

    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;
    let streamed = client::post(traffic_addr, "/v1/chat/completions", body).await;
    assert_eq!(streamed.status, 200);
    // The default batch delay is 1 s: SIGTERM at once, and the spans still arrive (flushed at
    // exit; the 10 s only turn spans that never come into a failure).
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let spans = receiver.wait_for_spans(2, Duration::from_secs(10)).await;
    let server = spans
        .iter()
        .find(|s| s.kind_name() == "server")
        .expect("the server span");
    assert_eq!(server.name, "chat m");
    assert_eq!(
        server.resource.get("service.name").and_then(|v| v.as_str()),
        Some("sidecar-7")
    );
    assert_eq!(
        server
            .resource
            .get("deployment.environment")
            .and_then(|v| v.as_str()),
        Some("test")
    );
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("joined")
        .expect("waited");
    assert!(status.success(), "a clean exit: {status}");
}
