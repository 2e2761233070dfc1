//! Two gateway replicas in front of one llama.cpp handoff pool (`[fleet]` on a real Redis, two
//! real `llama-server`s, `scripts/llama/build.sh`): each reserves only its share of each server's
//! slots, so no slot is given twice and the decode server computes one prompt token of every
//! handed-off prompt while both gateways send at once. Then one gateway is killed while the
//! other streams: that stream runs to its end, and the survivor takes the dead one's slots.

use crate::support;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokenmeter::config::{Config, HandoffConfig, HandoffProtocol};
use tokenmeter::server::ServerHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::client::{self, Protocol};
use support::llama::LlamaServer;
use support::redis::Redis;
use support::{prom, start_proxy, wait_for_metric};

const CHAT: &str = "/v1/chat/completions";
/// The fleet's interval (the default).
const INTERVAL: Duration = Duration::from_millis(250);
/// The header the test marks each request with, to tell which gateway it went through.
const GATEWAY: &str = "x-test-gateway";

/// What the gateways sent over one connection.
type Sent = Arc<Mutex<Vec<u8>>>;

/// A TCP relay in front of the decode server that keeps every byte the gateways send it, to read
/// which slot each chat request named and which gateway it came through.
struct Recorder {
    url: String,
    /// Each connection's bytes, gateway to server.
    connections: Arc<Mutex<Vec<Sent>>>,
}

impl Recorder {
    async fn start(server: String) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let connections: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let kept = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let sent = Arc::new(Mutex::new(Vec::new()));
                kept.lock().expect("lock").push(Arc::clone(&sent));
                tokio::spawn(relay(client, server.clone(), sent));
            }
        });
        Recorder { url, connections }
    }

    /// The (gateway, slot) of every chat request sent so far; the slot `None` where the request
    /// named none.
    fn chats(&self) -> Vec<(String, Option<u64>)> {
        let connections = self.connections.lock().expect("lock");
        let mut chats = Vec::new();
        for sent in connections.iter() {
            let text = String::from_utf8_lossy(&sent.lock().expect("lock")).into_owned();
            for request in text.split("POST ").skip(1) {
                if !request.starts_with(CHAT) {
                    continue;
                }
                let gateway = request
                    .lines()
                    .find_map(|line| line.strip_prefix(&format!("{GATEWAY}: ")))
                    .unwrap_or("?")
                    .to_owned();
                let slot = request.split("\"id_slot\":").nth(1).and_then(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().ok()
                });
                chats.push((gateway, slot));
            }
        }
        chats
    }

    /// Forgets what was sent so far.
    fn clear(&self) {
        self.connections.lock().expect("lock").clear();
    }
}

/// Relays one connection, keeping what the client sent in `sent`.
async fn relay(client: TcpStream, server: String, sent: Sent) {
    let Ok(upstream) = TcpStream::connect(server.trim_start_matches("http://")).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    let requests = async {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            let n = from_client.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            sent.lock().expect("lock").extend_from_slice(&buffer[..n]);
            if to_server.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    };
    let answers = async {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    };
    tokio::select! {
        () = requests => {}
        () = answers => {}
    }
}

/// A slot directory of its own (the servers take `--slot-save-path` with a trailing slash).
fn slot_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenmeter-fleet-llama-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("slot dir");
    dir
}

/// A server of two slots saving to and restoring from `dir`.
async fn server(dir: &std::path::Path) -> Option<LlamaServer> {
    let path = format!("{}/", dir.display());
    LlamaServer::start_with(2, 4096, &["--slot-save-path", &path]).await
}

/// Gateway `replica` of the fleet of `redis`: pools `prefill` and `decode` (llama.cpp's
/// protocol, prompts of 300 estimated tokens or more handed off), a request waiting as long as
/// it takes for a slot of its gateway's share.
fn gateway(
    prefill: &str,
    decode: &str,
    dir: &std::path::Path,
    redis: &Redis,
    replica: &str,
) -> Config {
    let handoff = HandoffConfig {
        protocol: HandoffProtocol::Llamacpp,
        min_prompt_tokens: 300,
        prefill_timeout: Duration::from_secs(60),
        slot_dir: Some(dir.to_owned()),
        slot_wait: Duration::from_secs(60),
        ..HandoffConfig::default()
    };
    let mut config = support::handoff_pools(prefill, decode, handoff);
    config.fleet.store = redis.url();
    config.fleet.interval = INTERVAL;
    config.fleet.replica = replica.to_owned();
    config.validate().expect("valid config");
    config
}

/// A chat of 800 words unique to `n` (about 860 tokens on the test model, 400 estimated:
/// handed off), asking `tokens` tokens whatever the model says.
fn document(n: usize, tokens: u32) -> String {
    let words = vec!["w"; 800].join(" ");
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"request {n}: {words}"}}],"max_tokens":{tokens},"ignore_eos":true,"temperature":0,"stream":true}}"#
    )
}

/// Streams `document(n, tokens)` to the gateway at `addr`, marked as sent through `name`; the
/// stream's text.
async fn stream(addr: SocketAddr, name: &'static str, n: usize, tokens: u32) -> String {
    let headers = [(GATEWAY, name)];
    let body = document(n, tokens);
    let open = client::open_with(addr, Protocol::Http1, "POST", CHAT, &body, &headers).await;
    let streamed = open.collect().await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    streamed.text()
}

/// [`stream`]s `document(n, tokens)`; its `timings`.
async fn send(addr: SocketAddr, name: &'static str, n: usize, tokens: u32) -> Value {
    let text = stream(addr, name, n, tokens).await;
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event.get("timings").cloned())
        .next_back()
        .expect("a timings member")
}

/// Asserts the decode server computed only the last prompt token of request `n`.
fn restored(timings: &Value, n: usize) {
    assert_eq!(
        timings["prompt_n"], 1,
        "request {n}: only the last prompt token computed on the decode server: {timings}"
    );
    assert!(
        timings["cache_n"].as_u64().is_some_and(|n| n >= 800),
        "request {n}: the rest came from the restored slot: {timings}"
    );
}

/// `proxy`'s handed-off requests with `result`.
fn results(proxy: &ServerHandle, result: &str) -> f64 {
    prom::sum(
        &proxy.metrics.render(),
        "tokenmeter_disaggregated_requests_total",
        &[("pool", "decode"), ("result", result)],
    )
}

#[tokio::test]
async fn two_gateways_share_the_slots_of_one_handoff_pool_and_one_survives_the_others_death() {
    let dir = slot_dir();
    let Some(prefill) = server(&dir).await else {
        return;
    };
    let Some(decode) = server(&dir).await else {
        return;
    };
    let recorder = Recorder::start(decode.url.clone()).await;
    let redis = Redis::start();
    let a = start_proxy(gateway(&prefill.url, &recorder.url, &dir, &redis, "gw-a")).await;
    let b = start_proxy(gateway(&prefill.url, &recorder.url, &dir, &redis, "gw-b")).await;
    let gateways = [("a", &a), ("b", &b)];
    for (_, gateway) in gateways {
        wait_for_metric(gateway, "tokenmeter_fleet_replicas", &[], 1.0).await;
    }
    // A first request through each makes its slot tables (a server's slot count is learned on
    // first use); then each holds one slot of each server.
    for (n, (name, gateway)) in gateways.into_iter().enumerate() {
        send(gateway.traffic_addr, name, n, 1).await;
    }
    let labels = |url: &str| [("backend", url.trim_start_matches("http://").to_owned())];
    for (_, gateway) in gateways {
        for url in [&prefill.url, &recorder.url] {
            let [(key, label)] = labels(url);
            wait_for_metric(
                gateway,
                "tokenmeter_fleet_slots_owned",
                &[(key, &label)],
                1.0,
            )
            .await;
        }
    }
    recorder.clear();
    let before: Vec<f64> = gateways.iter().map(|(_, g)| results(g, "remote")).collect();

    // Two rounds of two documents through each gateway at once: four requests for two slots
    // of each server, so each gateway's second request waits for its first's slot.
    let mut n = 10;
    for _round in 0..2 {
        let mut sent = Vec::new();
        for (name, gateway) in gateways {
            for _ in 0..2 {
                n += 1;
                let addr = gateway.traffic_addr;
                sent.push((n, tokio::spawn(send(addr, name, n, 4))));
            }
        }
        for (n, task) in sent {
            restored(&task.await.expect("the request's task"), n);
        }
    }
    for ((_, gateway), before) in gateways.iter().zip(before) {
        assert_eq!(
            results(gateway, "remote") - before,
            4.0,
            "every document handed off"
        );
    }
    let chats = recorder.chats();
    assert_eq!(chats.len(), 8, "{chats:?}");
    let slots_of = |name: &str| -> Vec<Option<u64>> {
        let mut slots: Vec<Option<u64>> = chats
            .iter()
            .filter(|(gateway, _)| gateway == name)
            .map(|(_, slot)| *slot)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    };
    assert_eq!(
        (slots_of("a"), slots_of("b")),
        (vec![Some(0)], vec![Some(1)]),
        "gw-a (first by name) reserves slot 0 of the decode server, gw-b slot 1: {chats:?}"
    );

    // gw-b killed while gw-a streams: gw-a's stream runs to its end, and two intervals after
    // gw-b's last write gw-a takes its slots.
    let addr = a.traffic_addr;
    let streaming = tokio::spawn(stream(addr, "a", 100, 200));
    wait_for_metric(&a, "tokenmeter_streams_active", &[], 1.0).await;
    b.shutdown().await;
    wait_for_metric(&a, "tokenmeter_fleet_replicas", &[], 0.0).await;
    let [(key, label)] = labels(&recorder.url);
    wait_for_metric(&a, "tokenmeter_fleet_slots_owned", &[(key, &label)], 2.0).await;
    let text = streaming.await.expect("the stream's task");
    assert!(
        text.contains("\"predicted_n\":200") && text.ends_with("data: [DONE]\n\n"),
        "gw-a's stream ran to its end through gw-b's death: {text}"
    );
    recorder.clear();
    let both = tokio::join!(send(addr, "a", 200, 4), send(addr, "a", 201, 4));
    restored(&both.0, 200);
    restored(&both.1, 201);
    let mut slots: Vec<Option<u64>> = recorder.chats().into_iter().map(|(_, s)| s).collect();
    slots.sort_unstable();
    assert_eq!(slots, [Some(0), Some(1)], "gw-a reserves both slots now");
    a.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
