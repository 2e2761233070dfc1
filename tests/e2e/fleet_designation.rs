//! One designation for a fleet of gateway replicas (`[fleet]`): two tokenmeter replicas in front
//! of three simulated Llama-3.1-8B replicas with `balance = "slo"`, sharing through a real Redis.
//! The replica with the least name designates the prefill-heavy replica from the documents the
//! other one placed (it places none itself), the other follows its choice, and the leader's chats
//! start elsewhere. Then the leader is killed mid-stream: the other leads from the designation it
//! followed, and its own stream goes on to its end.

use crate::support;
use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::client;
use support::redis::Redis;
use support::{config_for, prom, start_proxy, wait_for_metric};
use tokenmeter::config::{Affinity, BalanceLoad, Config, PoolConfig};
use tokenmeter::server::ServerHandle;
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

const CHAT: &str = "/v1/chat/completions";
/// The fleet's interval (the default).
const INTERVAL: Duration = Duration::from_millis(250);

async fn start_sim() -> SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let config = SimConfig::profile("llama-3.1-8b-h100").expect("profile");
    sim::spawn(listener, config).await.expect("sim starts")
}

/// A replica named `replica` with pool `p` placing by `balance = "slo"` on `sims` (so it
/// designates prefill-heavy replicas), in the fleet of `redis`.
fn placing(sims: &[SimHandle], redis: &Redis, replica: &str) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![PoolConfig {
        name: "p".to_owned(),
        urls: sims
            .iter()
            .map(|sim| format!("http://{}", sim.local_addr()))
            .collect(),
        balance: BalanceLoad::Slo,
        affinity: Affinity::None,
        ..PoolConfig::default()
    }];
    // Trusted from the first request: the estimate is what the test sends.
    config
        .routing
        .model_tokens_per_byte
        .insert("meta-llama/Llama-3.1-8B-Instruct".to_owned(), 0.25);
    config.fleet.store = redis.url();
    config.fleet.interval = INTERVAL;
    config.fleet.replica = replica.to_owned();
    config.validate().expect("valid config");
    config
}

/// A streamed request of a prompt of about `tokens` tokens, unique to `n`, asking `output`
/// tokens.
fn body(n: usize, tokens: usize, output: usize) -> String {
    let mut text = format!("request {n}: ");
    while text.len() < tokens * 4 {
        text.push_str("lorem ipsum dolor sit amet ");
    }
    json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": [{"role": "user", "content": text}],
        "stream": true, "max_tokens": output, "ignore_eos": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

/// Sends a prompt of about `tokens` tokens, unique to `n`, through `proxy`, to its end.
async fn send(proxy: &ServerHandle, n: usize, tokens: usize) {
    let streamed = client::post(proxy.traffic_addr, CHAT, &body(n, tokens, 4)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
}

/// `proxy`'s designation moves in pool `p` so far.
fn moves(proxy: &ServerHandle) -> f64 {
    prom::sum(
        &proxy.metrics.render(),
        "tokenmeter_prefill_heavy_moves_total",
        &[("pool", "p")],
    )
}

/// The backends `proxy` holds prefill-heavy now.
fn prefill_heavy(proxy: &ServerHandle) -> Vec<String> {
    let mut heavy: Vec<String> = prom::find(
        &proxy.metrics.render(),
        "tokenmeter_backend_prefill_heavy",
        &[("pool", "p")],
    )
    .into_iter()
    .filter(|sample| sample.value == 1.0)
    .filter_map(|sample| sample.labels.get("backend").cloned())
    .collect();
    heavy.sort();
    heavy
}

/// Requests `proxy` served, by backend.
fn served(proxy: &ServerHandle) -> HashMap<String, f64> {
    let mut by_backend = HashMap::new();
    for sample in prom::find(&proxy.metrics.render(), "tokenmeter_requests_total", &[]) {
        if let Some(backend) = sample.labels.get("backend") {
            *by_backend.entry(backend.clone()).or_insert(0.0) += sample.value;
        }
    }
    by_backend
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_name_designates_from_the_fleets_documents_and_the_other_follows() {
    let redis = Redis::start();
    let sims = [start_sim().await, start_sim().await, start_sim().await];
    let leader = start_proxy(placing(&sims, &redis, "gw-a")).await;
    let follower = start_proxy(placing(&sims, &redis, "gw-b")).await;
    wait_for_metric(&leader, "tokenmeter_fleet_replicas", &[], 1.0).await;
    // Documents of 6 000 tokens (a 0.3 s prefill: a stall past 4 x 35 ms) through the follower
    // alone: the leader places none, and designates from what the follower offered.
    for n in 0..4 {
        send(&follower, 500 + n, 6_000).await;
    }
    wait_for_metric(
        &follower,
        "tokenmeter_fleet_designates",
        &[("pool", "p")],
        0.0,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let designated = loop {
        let (led, followed) = (prefill_heavy(&leader), prefill_heavy(&follower));
        if led.len() == 1 && led == followed {
            break led;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "one replica designated, the same by both: {led:?} by gw-a, {followed:?} by gw-b"
        );
        tokio::time::sleep(INTERVAL / 5).await;
    };
    let metrics = leader.metrics.render();
    assert_eq!(
        prom::value(&metrics, "tokenmeter_fleet_designates", &[("pool", "p")]),
        1.0,
        "gw-a leads: its name is the least"
    );
    assert!(
        prom::value(
            &metrics,
            "tokenmeter_prefill_demand_tokens_per_second",
            &[("pool", "p")]
        ) > 0.0,
        "the leader measured the documents the follower placed: {metrics}"
    );
    assert_eq!(
        served(&leader).values().sum::<f64>(),
        0.0,
        "the leader placed none"
    );
    // The documents placed before the designation reached the follower (an interval or two)
    // went where nothing was designated yet, and each replica that took one stays marked
    // stalling for STALL_LINGER (2 s) after its prefill: past that, only the designation
    // speaks. Chats through the leader then, documents still expected (several a second,
    // lately): none starts on the designated replica.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in 0..6 {
        send(&leader, 600 + n, 100).await;
    }
    let chats = served(&leader);
    assert_eq!(chats.values().sum::<f64>(), 6.0);
    assert_eq!(
        chats.get(&designated[0]).copied().unwrap_or(0.0),
        0.0,
        "no chat on the prefill-heavy replica {designated:?}: {chats:?}"
    );

    // The leader killed while the follower streams (200 tokens, ~2 s): the leader's entry
    // expires two intervals after its last write, and the follower leads from the designation
    // it followed: no move, and its stream goes on to its end.
    let moved = moves(&follower);
    let addr = follower.traffic_addr;
    let streaming =
        tokio::spawn(async move { client::post(addr, CHAT, &body(700, 100, 200)).await });
    wait_for_metric(&follower, "tokenmeter_streams_active", &[], 1.0).await;
    leader.shutdown().await;
    wait_for_metric(&follower, "tokenmeter_fleet_replicas", &[], 0.0).await;
    wait_for_metric(
        &follower,
        "tokenmeter_fleet_designates",
        &[("pool", "p")],
        1.0,
    )
    .await;
    assert_eq!(
        prefill_heavy(&follower),
        designated,
        "the new leader keeps the designation it followed"
    );
    let streamed = streaming.await.expect("the stream's task");
    assert_eq!(streamed.status, 200);
    let text = streamed.text();
    assert!(
        text.contains("\"completion_tokens\":200") && text.trim_end().ends_with("data: [DONE]"),
        "the follower's stream ran to its end through the leader's death: {text}"
    );
    // Documents keep coming, through the new leader alone: it designates from them, and the
    // designation does not move.
    for n in 0..2 {
        send(&follower, 800 + n, 6_000).await;
    }
    tokio::time::sleep(INTERVAL * 2).await;
    assert_eq!(prefill_heavy(&follower), designated);
    assert_eq!(moves(&follower), moved, "no designation moved on the way");
    follower.shutdown().await;
}
