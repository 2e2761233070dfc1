//! Prefill/decode disaggregation on a real engine: two llama.cpp servers (`scripts/llama/build.sh`)
//! sharing a slot directory, the prefill's KV cache saved on one and restored into a slot of the
//! other that the proxy reserved. The decode server's own `timings` show it computed one prompt
//! token; the directory holds no file afterwards; slots come back whatever happened to the request.

use crate::support;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokenmeter::config::{Config, HandoffConfig, HandoffProtocol};
use tokenmeter::server::ServerHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use support::llama::LlamaServer;
use support::{client, prom, start_proxy, wait_for_metric};

const CHAT: &str = "/v1/chat/completions";

/// A TCP relay in front of a llama-server that holds the answers to its first `hold` chat
/// completion requests after their head, until the test releases them; everything else passes.
/// The test, not the engine's speed, then decides when a prefill is answered or a stream ends, so
/// the order of events the test is about holds on a fast machine and a loaded one alike.
struct Relay {
    url: String,
    release: watch::Sender<bool>,
    /// One message per chat completion request passed on to the server.
    completions: mpsc::UnboundedReceiver<()>,
}

/// What each of the relay's connections shares.
struct Shared {
    server: SocketAddr,
    hold: usize,
    seen: AtomicUsize,
    completions: mpsc::UnboundedSender<()>,
}

/// A request line the proxy's HTTP/1.1 client writes for a chat completion, a prefill's included.
const COMPLETION: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\n";

impl Relay {
    async fn start(server: SocketAddr, hold: usize) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (release, released) = watch::channel(false);
        let (completions, seen) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            server,
            hold,
            seen: AtomicUsize::new(0),
            completions,
        });
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, Arc::clone(&shared), released.clone()));
            }
        });
        Relay {
            url,
            release,
            completions: seen,
        }
    }

    /// Waits (at most a minute: the bound only turns a lost request into a failure) until the
    /// server has been sent one more chat completion request.
    async fn next_completion(&mut self) {
        tokio::time::timeout(Duration::from_secs(60), self.completions.recv())
            .await
            .expect("a completion request reached the server")
            .expect("the relay runs");
    }

    /// Lets every held answer through.
    fn release(&self) {
        self.release.send_replace(true);
    }
}

/// Relays one connection; when either side closes, both are.
async fn relay(client: TcpStream, shared: Arc<Shared>, mut released: watch::Receiver<bool>) {
    let Ok(server) = TcpStream::connect(shared.server).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // Whether the answer to the request in flight on this connection is held (the proxy's client
    // sends a connection's next request only once it has the whole answer to the last).
    let (held_tx, held_rx) = watch::channel(false);
    let requests = async {
        let mut buffer = [0u8; 16 * 1024];
        // The end of the last read, so that a request line split between two reads is found.
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = from_client.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            let bytes = &buffer[..n];
            tail.extend_from_slice(bytes);
            let completion = tail.windows(COMPLETION.len()).position(|w| w == COMPLETION);
            if let Some(at) = completion {
                let index = shared.seen.fetch_add(1, Ordering::SeqCst);
                held_tx.send_replace(index < shared.hold);
                tail.drain(..at + COMPLETION.len());
            }
            let keep = tail.len().saturating_sub(COMPLETION.len());
            tail.drain(..keep);
            if to_server.write_all(bytes).await.is_err() {
                return;
            }
            if completion.is_some() {
                let _ = shared.completions.send(());
            }
        }
    };
    let answers = async {
        let mut buffer = [0u8; 16 * 1024];
        // Bytes of a held answer's head seen so far, to find where its body starts.
        let mut head: Vec<u8> = Vec::new();
        loop {
            let n = from_server.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            let mut bytes = &buffer[..n];
            if *held_rx.borrow() && !*released.borrow() {
                let before = head.len();
                head.extend_from_slice(bytes);
                if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    let split = (end + 4).saturating_sub(before).min(bytes.len());
                    if to_client.write_all(&bytes[..split]).await.is_err() {
                        return;
                    }
                    bytes = &bytes[split..];
                    head.clear();
                    if released.wait_for(|released| *released).await.is_err() {
                        return;
                    }
                }
            }
            if to_client.write_all(bytes).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = answers => {}
    }
}

/// A slot directory of its own (the servers take `--slot-save-path` with a trailing slash).
fn slot_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenmeter-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("slot dir");
    dir
}

fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read the slot dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Starts a server with `slots` slots saving to `dir` (`None`: no slot actions).
async fn server(slots: u32, dir: Option<&PathBuf>) -> Option<LlamaServer> {
    let path = dir.map(|dir| format!("{}/", dir.display()));
    let extra: Vec<&str> = match &path {
        Some(path) => vec!["--slot-save-path", path],
        None => Vec::new(),
    };
    LlamaServer::start_with(slots, 4096, &extra).await
}

/// Pools `prefill` and `decode` (llama.cpp's protocol, prompts of 300 estimated tokens or more
/// handed off), every request to `decode`.
fn config(prefill: &str, decode: &str, dir: &Path) -> Config {
    let handoff = HandoffConfig {
        protocol: HandoffProtocol::Llamacpp,
        min_prompt_tokens: 300,
        prefill_timeout: Duration::from_secs(30),
        slot_dir: Some(dir.to_owned()),
        slot_wait: Duration::from_millis(200),
        ..HandoffConfig::default()
    };
    support::handoff_pools(prefill, decode, handoff)
}

/// A chat of `n` words (about 2n tokens on the test model, n/2 estimated before calibration).
fn chat(n: usize, max_tokens: u32) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}],"max_tokens":{max_tokens},"temperature":0,"stream":true}}"#,
        vec!["w"; n].join(" ")
    )
}

/// The `timings` of a stream's last event that has them.
fn timings(stream: &str) -> Value {
    stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event.get("timings").cloned())
        .next_back()
        .expect("a timings member")
}

fn results(proxy: &ServerHandle, result: &str) -> f64 {
    prom::sum(
        &proxy.metrics.render(),
        "tokenmeter_disaggregated_requests_total",
        &[("pool", "decode"), ("result", result)],
    )
}

/// Waits until the slot directory is empty (a removal runs on its own task). The proxy removes a
/// file as soon as its restore is over or its request ends; the 5 s bound only turns a file left
/// behind into a failure, with seconds for a loaded machine to run that task.
async fn empties(dir: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !files_in(dir).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "files left: {:?}",
            files_in(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_decode_server_computes_one_prompt_token_of_a_handed_off_prompt() {
    let dir = slot_dir("handoff");
    let Some(prefill) = server(2, Some(&dir)).await else {
        return;
    };
    let Some(decode) = server(2, Some(&dir)).await else {
        return;
    };
    let proxy = start_proxy(config(&prefill.url, &decode.url, &dir)).await;

    for turn in 0..3 {
        let streamed = client::post(proxy.traffic_addr, CHAT, &chat(1200, 4)).await;
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        assert!(streamed.text().ends_with("data: [DONE]\n\n"));
        let timings = timings(&streamed.text());
        assert_eq!(
            timings["prompt_n"], 1,
            "turn {turn}: only the last prompt token was computed on the decode server: {timings}"
        );
        assert!(
            timings["cache_n"].as_u64().is_some_and(|n| n > 1000),
            "turn {turn}: the rest came from the restored slot: {timings}"
        );
    }
    assert_eq!(
        results(&proxy, "remote"),
        3.0,
        "three handoffs, the slots came back each time"
    );
    let text = proxy.metrics.render();
    for phase in ["prefill", "transfer", "decode_first_token"] {
        assert_eq!(
            prom::value(
                &text,
                "tokenmeter_disaggregation_phase_seconds_count",
                &[("pool", "decode"), ("phase", phase)]
            ),
            3.0,
            "{phase}"
        );
    }
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        12.0,
        "4 tokens a request, the prefill's own token not counted"
    );
    empties(&dir).await;

    // A short prompt prefills where it decodes, in a slot the proxy names.
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat(20, 4)).await;
    assert_eq!(streamed.status, 200);
    assert!(timings(&streamed.text())["prompt_n"]
        .as_u64()
        .is_some_and(|n| n > 1));
    assert_eq!(results(&proxy, "local_short"), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_decode_server_that_cannot_restore_prefills_the_request_itself() {
    let dir = slot_dir("norestore");
    let Some(prefill) = server(1, Some(&dir)).await else {
        return;
    };
    // No --slot-save-path: its restore is refused.
    let Some(decode) = server(1, None).await else {
        return;
    };
    let proxy = start_proxy(config(&prefill.url, &decode.url, &dir)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat(1200, 4)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert!(
        timings(&streamed.text())["prompt_n"]
            .as_u64()
            .is_some_and(|n| n > 1000),
        "the decode server computed the prompt"
    );
    assert_eq!(results(&proxy, "transfer_failed"), 1.0);
    empties(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_client_gone_during_the_prefill_gives_its_slots_and_file_back() {
    let dir = slot_dir("gone");
    let Some(prefill) = server(1, Some(&dir)).await else {
        return;
    };
    let Some(decode) = server(1, Some(&dir)).await else {
        return;
    };
    let mut relay = Relay::start(prefill.addr, 1).await;
    let proxy = start_proxy(config(&relay.url, &decode.url, &dir)).await;
    let body = chat(1600, 4);
    let mut raw = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    raw.write_all(head.as_bytes()).await.expect("head");
    raw.write_all(body.as_bytes()).await.expect("body");
    // Leave once the prefill is on the prefill server: its answer is held there (the relay), so
    // the request is still in its prefill phase when the proxy sees the client go, however fast
    // the server computes it. (Left to the server's speed, a fast machine had the handoff done
    // first, and the request counted `remote`.)
    relay.next_completion().await;
    drop(raw);
    wait_for_metric(
        &proxy,
        "tokenmeter_disaggregated_requests_total",
        &[("pool", "decode"), ("result", "client_gone")],
        1.0,
    )
    .await;
    // Both one-slot servers' slots are free again: the next handoff gets them (and waits on the
    // prefill server for the abandoned prefill, if it still runs). Its answer is not held.
    relay.release();
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat(1200, 4)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert_eq!(results(&proxy, "slots_busy"), 0.0);
    assert_eq!(
        results(&proxy, "remote"),
        1.0,
        "slots reserved again on both servers"
    );
    empties(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_prefill_server_that_cannot_save_or_is_down_leaves_the_decode_server_to_prefill() {
    let dir = slot_dir("nosave");
    // No --slot-save-path on the prefill server: its save is refused.
    let Some(prefill) = server(1, None).await else {
        return;
    };
    let Some(decode) = server(1, Some(&dir)).await else {
        return;
    };
    let proxy = start_proxy(config(&prefill.url, &decode.url, &dir)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat(1200, 4)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert!(
        timings(&streamed.text())["prompt_n"]
            .as_u64()
            .is_some_and(|n| n > 1000),
        "the decode server computed the prompt"
    );
    assert_eq!(results(&proxy, "transfer_failed"), 1.0);

    // The prefill server gone: no slots to learn, the decode server prefills.
    let (url, addr) = (prefill.url.clone(), prefill.addr);
    // Dropped, it is killed (SIGKILL), and its port closes with it: the 5 s only bound a server
    // that outlives its kill.
    drop(prefill);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the prefill server stopped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = start_proxy(config(&url, &decode.url, &dir)).await;
    let streamed = client::post(down.traffic_addr, CHAT, &chat(1200, 4)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert_eq!(results(&down, "prefill_unavailable"), 1.0);
    empties(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_request_that_finds_every_decode_slot_held_goes_without_one_after_the_wait() {
    let dir = slot_dir("busy");
    let Some(prefill) = server(1, Some(&dir)).await else {
        return;
    };
    let Some(decode) = server(1, Some(&dir)).await else {
        return;
    };
    // The first answer of the decode server is held after its head until the test releases it:
    // the stream holds its slot for as long as the test needs, not for as long as the server
    // takes to write 200 tokens.
    let relay = Relay::start(decode.addr, 1).await;
    let mut config = config(&prefill.url, &relay.url, &dir);
    if let Some(handoff) = config.pools[1].handoff.as_mut() {
        handoff.slot_wait = Duration::from_millis(100);
    }
    let proxy = start_proxy(config).await;
    // One long answer holds the decode server's only slot.
    let holder = client::open(proxy.traffic_addr, CHAT, &chat(20, 200)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, &chat(20, 4)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    assert_eq!(
        results(&proxy, "slots_busy"),
        1.0,
        "counted, and served all the same"
    );
    relay.release();
    assert_eq!(
        holder.collect().await.status,
        200,
        "the held stream ran to its end"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
