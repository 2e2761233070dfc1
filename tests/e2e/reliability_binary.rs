//! The real binary under SIGTERM with streams in flight, and its logs after a run full of secrets.

use crate::support;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::backend::{Backend, Script};
use support::gated::Gated;
use support::ports::free_port;
use support::{client, fixture};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_tokenmeter");
const CHAT: &str = "/v1/chat/completions";
/// How long a test waits for something the binary does at once (start, turn unready, close its
/// listener): the bound only turns a hang into a failure, and is seconds so that a debug binary on
/// a loaded 2-core machine never reaches it.
const PATIENCE: Duration = Duration::from_secs(20);

struct Serve {
    child: Child,
    traffic: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    /// stdout and stderr, read as they come (a full pipe would block a chatty child).
    output: Arc<Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Serve {
    /// Sends SIGTERM and waits for the exit; returns the status and everything the child wrote.
    async fn stop(mut self) -> (std::process::ExitStatus, String) {
        sigterm(&self.child);
        let mut child = self.child;
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .expect("join")
            .expect("wait");
        for reader in self.readers.drain(..) {
            reader.join().expect("reader");
        }
        let output = String::from_utf8_lossy(&self.output.lock().expect("lock")).into_owned();
        (status, output)
    }
}

fn drain(
    mut pipe: impl Read + Send + 'static,
    into: Arc<Mutex<Vec<u8>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 65536];
        while let Ok(n) = pipe.read(&mut buffer) {
            if n == 0 {
                break;
            }
            into.lock().expect("lock").extend_from_slice(&buffer[..n]);
        }
    })
}

/// Starts `tokenmeter serve` and waits (bounded) until it is ready.
async fn serve(upstream: &str, log_level: &str, extra_env: &[(&str, &str)]) -> Serve {
    let (traffic, admin) = (free_port(), free_port());
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .env("TOKENMETER_LISTEN", format!("127.0.0.1:{traffic}"))
        .env("TOKENMETER_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
        .env("TOKENMETER_UPSTREAM", upstream)
        .env("RUST_LOG", log_level)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in extra_env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("tokenmeter serve starts");
    let output = Arc::new(Mutex::new(Vec::new()));
    let readers = vec![
        drain(child.stdout.take().expect("stdout"), Arc::clone(&output)),
        drain(child.stderr.take().expect("stderr"), Arc::clone(&output)),
    ];
    let admin = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic = format!("127.0.0.1:{traffic}").parse().expect("addr");
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(admin).await.is_ok()
            && client::get(admin, "/readyz").await.0 == 200
        {
            return Serve {
                child,
                traffic,
                admin,
                output,
                readers,
            };
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("tokenmeter serve never became ready");
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "SIGTERM sent");
}

/// Streams in flight when SIGTERM arrives.
const IN_FLIGHT: usize = 40;

#[tokio::test]
async fn sigterm_under_load_drains_every_stream_and_exits_0() {
    // Every stream stays in flight, its first event read, until the test has seen the drain
    // begin; then they run to their end, well inside the 30 s default grace.
    let backend = Gated::start(false, 1).await;
    let proxy = serve(&backend.url, "info", &[]).await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let mut streams = Vec::new();
    for _ in 0..IN_FLIGHT {
        let mut stream = client::open(proxy.traffic, CHAT, body).await;
        let (_, first) = stream.next_frame().await.expect("frame").expect("ok");
        streams.push((first, stream));
    }
    let (traffic, admin) = (proxy.traffic, proxy.admin);
    let stopped = tokio::spawn(proxy.stop());

    // Readiness goes first, then the listener closes.
    let deadline = Instant::now() + PATIENCE;
    loop {
        match tokio::net::TcpStream::connect(admin).await {
            Ok(_) if client::get(admin, "/readyz").await.0 == 503 => break,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "/readyz turned 503 while draining"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let deadline = Instant::now() + PATIENCE;
    while tokio::net::TcpStream::connect(traffic).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "new connections are refused while draining"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !stopped.is_finished(),
        "the process waits for its streams in flight"
    );

    backend.open();
    let whole = fixture("vllm-chat-usage.sse");
    for (i, (first, stream)) in streams.into_iter().enumerate() {
        let rest = stream.collect().await;
        assert!(rest.error.is_none(), "stream {i} finished cleanly");
        let mut bytes = first.to_vec();
        bytes.extend(rest.bytes());
        assert!(bytes == whole, "stream {i} arrived byte for byte");
    }
    let (status, log) = stopped.await.expect("no panic");
    assert!(status.success(), "exit 0: {status:?}");
    // Drained within the grace period: the server itself says which came first, the last stream's
    // end or the grace's (its drain is a race between the two, logged either way), so this holds
    // however long a loaded machine took, and fails whenever the grace ran out.
    assert!(
        log.contains("all streams finished") && !log.contains("grace period over"),
        "a full drain, within the grace period, is logged: {log}"
    );
}

#[tokio::test]
async fn secrets_never_reach_the_logs() {
    const KEY: &str = "sk-SECRETKEY0123456789abcdef";
    const API_KEY: &str = "SECRETAPIKEY-x-api-key-value";
    const PROMPT: &str = "SECRETPROMPT the launch codes are 0000";
    const COMPLETION: &str = "SECRETCOMPLETION here they are";
    let completion_event = format!(
        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{COMPLETION}\"}},\"finish_reason\":null}}]}}\n\n"
    );
    let backend = Backend::start(move |seen| {
        if seen.head.contains("fail") {
            Script::json(
                500,
                &format!(r#"{{"error":{{"message":"{COMPLETION}","type":"server_error"}}}}"#),
            )
        } else {
            Script::sse(vec![
                (Duration::ZERO, completion_event.clone().into_bytes()),
                (Duration::ZERO, b"data: [DONE]\n\n".to_vec()),
            ])
        }
    })
    .await;
    // Every module at trace, and a small body limit so the 413 path logs too.
    let proxy = serve(&backend.url, "trace", &[]).await;
    let headers = [
        ("authorization", &*format!("Bearer {KEY}")),
        ("x-api-key", API_KEY),
        ("api-key", API_KEY),
        ("cookie", &*format!("session={KEY}")),
    ];
    let body = |stream: bool| {
        format!(
            r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"{PROMPT}"}}]}}"#
        )
    };
    for (path, stream, status) in [
        (CHAT, true, 200),
        (CHAT, false, 200),
        ("/v1/completions", true, 200),
        ("/v1/chat/completions/fail", true, 500),
        ("/v1/embeddings", false, 200),
    ] {
        let got = client::open_with(
            proxy.traffic,
            client::Protocol::Http1,
            "POST",
            path,
            &body(stream),
            &headers,
        )
        .await
        .collect()
        .await;
        assert_eq!(
            got.status.as_u16(),
            status,
            "{path} answered with the backend's status"
        );
    }
    // A body over the limit (16 MiB), with the secret in it.
    let huge = format!(
        "{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":\"{PROMPT}{}\"}}]}}",
        "x".repeat(17 * 1024 * 1024)
    );
    let got = client::open_with(
        proxy.traffic,
        client::Protocol::H2c,
        "POST",
        CHAT,
        &huge,
        &headers,
    )
    .await
    .collect()
    .await;
    assert_eq!(got.status, 413, "over the body limit");

    let (status, log) = proxy.stop().await;
    assert!(status.success(), "exit 0");
    assert!(log.lines().count() > 10, "trace logging was on: {log}");
    for secret in [
        "SECRETKEY",
        "SECRETAPIKEY",
        "SECRETPROMPT",
        "SECRETCOMPLETION",
        "launch codes",
    ] {
        assert!(
            !log.contains(secret),
            "{secret} leaked into the log:\n{}",
            log.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    println!("checked {} log lines at trace level", log.lines().count());
}
