//! TLS to clients with real TLS peers: curl (HTTP/1.1 and h2 by ALPN) and the official OpenAI
//! SDK against `[server.tls]`; client certificates (mTLS) accepted, missing or wrong ones refused
//! and counted; the admin listener on its own TLS; certificates rotated under open streams.

use crate::support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokenmeter::config::{Config, ServerTlsConfig};

use support::backend::{Backend, Script, Seen};
use support::raw::{self, chunk, chunked_head, RawRequest, RawUpstream, LAST_CHUNK};
use support::tls::{client_config, Ca, TempDir};
use support::{client, config_for, fixture, prom, start_proxy, wait_for_metric};
use tokio::sync::watch;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"max_tokens":7,"stream_options":{"include_usage":true}}"#;

/// The vLLM fixture's events, `gap` apart.
fn vllm(gap: Duration) -> impl Fn(&Seen) -> Script {
    support::backend::replay("vllm-chat-usage.sse", gap)
}

fn tls_table(cert: &Path, key: &Path) -> ServerTlsConfig {
    ServerTlsConfig {
        cert: cert.to_owned(),
        key: key.to_owned(),
        client_ca: None,
        reload_interval: Duration::from_secs(10),
    }
}

/// A proxy config in front of `backend` whose listeners both serve the `localhost` certificate
/// of `ca` (files in `dir`).
fn tls_config(backend: &Backend, ca: &Ca, dir: &TempDir) -> (Config, PathBuf) {
    let (cert, key) = ca.server().write(dir, "server");
    let ca_file = dir.write("ca.crt", &ca.pem);
    let mut config = config_for(&backend.url);
    config.server.tls = Some(tls_table(&cert, &key));
    config.server.admin_tls = Some(tls_table(&cert, &key));
    config.validate().expect("valid config");
    (config, ca_file)
}

async fn run(command: &mut Command) -> Output {
    let mut command = std::mem::replace(command, Command::new("true"));
    tokio::task::spawn_blocking(move || {
        command
            .output()
            .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"))
    })
    .await
    .expect("the command ran")
}

/// `curl` against the proxy's `localhost` name pinned to its loopback port.
fn curl(port: u16, ca: &Path) -> Command {
    let mut curl = Command::new("curl");
    curl.args(["-sSN", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")]);
    curl
}

fn chat_url(port: u16) -> String {
    format!("https://localhost:{port}{CHAT}")
}

#[tokio::test]
async fn curl_streams_over_tls_in_http1_and_h2_byte_for_byte_and_scrapes_over_tls() {
    let dir = TempDir::new("tls-curl");
    let ca = Ca::new("tokenmeter test CA");
    let mut backend = Backend::start(vllm(Duration::from_millis(2))).await;
    let (config, ca_file) = tls_config(&backend, &ca, &dir);
    let proxy = start_proxy(config).await;
    let port = proxy.traffic_addr.port();
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let out = run(curl(port, &ca_file).args([
            flag,
            "-w",
            "\n%{http_version}",
            "-H",
            "content-type: application/json",
            "-d",
            BODY,
            &chat_url(port),
        ]))
        .await;
        assert!(out.status.success(), "curl {flag}: {out:?}");
        let at = out
            .stdout
            .iter()
            .rposition(|b| *b == b'\n')
            .expect("curl printed the version");
        let body = out.stdout[..at].to_vec();
        let used = String::from_utf8_lossy(&out.stdout[at + 1..]).into_owned();
        assert_eq!(used, version, "ALPN chose HTTP/{version} for curl {flag}");
        assert_eq!(
            body,
            fixture("vllm-chat-usage.sse"),
            "curl {flag}: the stream arrives unchanged over TLS"
        );
        let seen = backend.next_request().await;
        assert_eq!(
            seen.header("x-forwarded-proto").as_deref(),
            Some("https"),
            "the backend learns the client used TLS"
        );
    }

    let admin = proxy.admin_addr.port();
    let out = run(curl(admin, &ca_file).arg(format!("https://localhost:{admin}/metrics"))).await;
    assert!(out.status.success(), "scrape over TLS: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = [("gen_ai_operation_name", "chat"), ("outcome", "ok")];
    assert_eq!(prom::sum(&text, "tokenmeter_requests_total", &ok), 2.0);
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        14.0,
        "7 tokens per stream, from usage"
    );
    let plain = run(Command::new("curl").args([
        "-sS",
        "--max-time",
        "5",
        &format!("http://127.0.0.1:{admin}/metrics"),
    ]))
    .await;
    assert!(
        !plain.status.success(),
        "the admin listener with TLS does not answer plain HTTP"
    );
}

#[tokio::test]
async fn the_openai_sdk_streams_over_tls() {
    let dir = TempDir::new("tls-sdk");
    let ca = Ca::new("tokenmeter test CA");
    let backend = Backend::start(vllm(Duration::from_millis(2))).await;
    let (config, ca_file) = tls_config(&backend, &ca, &dir);
    let proxy = start_proxy(config).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_stream.py"
    );
    let base = format!("https://localhost:{}/v1", proxy.traffic_addr.port());
    let out = run(Command::new("python3")
        .args([script, "--base-url", &base, "--usage", "--ca"])
        .arg(&ca_file))
    .await;
    assert!(
        out.status.success(),
        "the SDK streamed over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value =
        serde_json::from_slice(out.stdout.trim_ascii()).expect("one JSON line");
    assert_eq!(seen["content_chunks"], 7, "{seen}");
    assert_eq!(seen["usage"]["completion_tokens"], 7, "{seen}");
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
        1.0
    );
}

#[tokio::test]
async fn client_certificates_are_required_and_wrong_ones_refused_and_counted() {
    let dir = TempDir::new("tls-mtls");
    let ca = Ca::new("tokenmeter test CA");
    let stranger = Ca::new("someone else's CA");
    let backend = Backend::start(vllm(Duration::from_millis(1))).await;
    let (mut config, ca_file) = tls_config(&backend, &ca, &dir);
    if let Some(tls) = config.server.tls.as_mut() {
        tls.client_ca = Some(ca_file.clone());
    }
    let proxy = start_proxy(config).await;
    let port = proxy.traffic_addr.port();
    let (good_cert, good_key) = ca.client("app").write(&dir, "app");
    let (bad_cert, bad_key) = stranger.client("intruder").write(&dir, "intruder");

    let post = |cert: Option<(&PathBuf, &PathBuf)>| {
        let mut curl = curl(port, &ca_file);
        if let Some((cert, key)) = cert {
            curl.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        curl.args(["-H", "content-type: application/json", "-d", BODY])
            .arg(chat_url(port));
        curl
    };
    let accepted = run(&mut post(Some((&good_cert, &good_key)))).await;
    assert!(
        accepted.status.success(),
        "a certificate of the CA: {accepted:?}"
    );
    assert_eq!(accepted.stdout, fixture("vllm-chat-usage.sse"));

    for (what, cert) in [
        ("no certificate", None),
        ("another CA's certificate", Some((&bad_cert, &bad_key))),
    ] {
        let refused = run(&mut post(cert)).await;
        assert!(
            !refused.status.success(),
            "{what} is refused: {}",
            String::from_utf8_lossy(&refused.stdout)
        );
    }
    wait_for_metric(
        &proxy,
        "tokenmeter_tls_handshake_failures_total",
        &[("listener", "traffic"), ("reason", "certificate")],
        2.0,
    )
    .await;

    let plain = run(Command::new("curl").args([
        "-sS",
        "--max-time",
        "5",
        &format!("http://127.0.0.1:{port}{CHAT}"),
    ]))
    .await;
    assert!(!plain.status.success(), "plain HTTP on the TLS port fails");
    wait_for_metric(
        &proxy,
        "tokenmeter_tls_handshake_failures_total",
        &[("listener", "traffic"), ("reason", "protocol")],
        1.0,
    )
    .await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[]),
        1.0,
        "refused handshakes never became requests"
    );
}

/// A vLLM-like upstream replaying the fixture's events; the first request's stream stops after
/// its first event until `resume` turns true, so it is open for certain across whatever the test
/// does meanwhile. Later requests stream at once.
async fn paused_first_stream(resume: watch::Receiver<bool>) -> RawUpstream {
    let requests = Arc::new(AtomicUsize::new(0));
    RawUpstream::start(move |_request: RawRequest, mut stream| {
        let mut resume = resume.clone();
        let first = requests.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let events = support::events_of(&fixture("vllm-chat-usage.sse"));
            raw::write(&mut stream, &chunked_head(200, "text/event-stream")).await;
            for (i, event) in events.iter().enumerate() {
                if first && i == 1 {
                    let _ = resume.wait_for(|resumed| *resumed).await;
                }
                raw::write(&mut stream, &chunk(event)).await;
            }
            raw::write(&mut stream, LAST_CHUNK).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_rotated_certificate_serves_new_connections_and_open_streams_finish() {
    let dir = TempDir::new("tls-rotate");
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let (resume, paused) = watch::channel(false);
    let upstream = paused_first_stream(paused).await;
    let (cert, key) = old_ca.server().write(&dir, "server");
    let old_ca_file = dir.write("ca.crt", &old_ca.pem);
    let mut config = config_for(&upstream.url);
    config.server.tls = Some(ServerTlsConfig {
        reload_interval: Duration::from_millis(100),
        ..tls_table(&cert, &key)
    });
    config.validate().expect("valid config");
    let new_ca_file = dir.write("new-ca.crt", &new_ca.pem);
    let proxy = start_proxy(config).await;
    let trust_old = Arc::new(client_config(&old_ca_file, None));
    let trust_new = Arc::new(client_config(&new_ca_file, None));

    // Opened before the rotation, and held open by the upstream until after it. (Its only bound
    // is the proxy's 10 s idle timeout, which the steps below, a file poll every 100 ms and two
    // loopback handshakes, stay far inside even on a loaded 2-core machine.)
    let mut open = client::open_tls(proxy.traffic_addr, Arc::clone(&trust_old), CHAT, BODY).await;
    let first = open.next_frame().await.expect("a first frame").expect("ok");

    new_ca.server().write(&dir, "server");
    wait_for_metric(
        &proxy,
        "tokenmeter_tls_certificate_reloads_total",
        &[("listener", "traffic"), ("result", "ok")],
        1.0,
    )
    .await;

    let fresh = client::open_tls(proxy.traffic_addr, Arc::clone(&trust_new), CHAT, BODY)
        .await
        .collect()
        .await;
    assert_eq!(
        fresh.bytes(),
        fixture("vllm-chat-usage.sse"),
        "a new connection gets the new certificate and a whole stream"
    );
    let stale = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let refused = tokio_rustls::TlsConnector::from(trust_old)
        .connect(
            rustls_pki_types::ServerName::try_from("localhost").expect("name"),
            stale,
        )
        .await;
    assert!(
        refused.is_err(),
        "a client trusting only the old CA no longer verifies the proxy"
    );

    resume.send_replace(true);
    let rest = open.collect_after(first).await;
    assert!(
        rest.error.is_none(),
        "the open stream was not cut: {rest:?}"
    );
    assert_eq!(
        rest.bytes(),
        fixture("vllm-chat-usage.sse"),
        "the stream opened before the rotation finished byte for byte"
    );
    assert_eq!(
        upstream.request_count(),
        2,
        "both streams reached the upstream"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
        2.0
    );
}
