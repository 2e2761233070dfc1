//! Gateway replicas that act as one fleet (`[fleet]`): two tokenmeter replicas share their load
//! through a real Redis (Debian's `redis-server` on a loopback port of its own). A replica
//! balances away from a backend the other one loaded; a replica that stops is forgotten within
//! two intervals; with the store killed each replica routes on its own view (counted), serves
//! every request meanwhile, and joins the fleet again once the store is back. In front of
//! simulated replicas with `balance = "slo"`, the replica with the least name designates the
//! prefill-heavy replica from the documents the other one placed, the other follows, and the
//! leader's chats start elsewhere.

use crate::support;
use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::backend::{Backend, Script, Seen};
use support::client::{self, OpenStream};
use support::redis::Redis;
use support::{config_for, prom, start_proxy, wait_for_metric};
use tokenmeter::config::{Affinity, BalanceLoad, Config, PoolConfig};
use tokenmeter::server::ServerHandle;
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
/// The fleet's interval in these tests (the default): a replica's entry lives two of them, long
/// past any pause a loaded test machine gives its task.
const INTERVAL: Duration = Duration::from_millis(250);

/// A backend whose streams each hold for `hold`: one token, then the end.
async fn holding(hold: Duration) -> Backend {
    Backend::start(move |_: &Seen| {
        Script::sse(vec![
            (
                Duration::ZERO,
                br#"data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}

"#
                .to_vec(),
            ),
            (hold, b"data: [DONE]\n\n".to_vec()),
        ])
    })
    .await
}

/// A replica named `replica` with pool `p` of `urls`, balanced by streams, in the fleet of
/// `redis`.
fn replica(urls: &[&str], redis: &Redis, replica: &str) -> Config {
    let mut config = config_for(urls[0]);
    config.pools = vec![PoolConfig {
        name: "p".to_owned(),
        urls: urls.iter().map(|url| (*url).to_owned()).collect(),
        balance: BalanceLoad::Streams,
        ..PoolConfig::default()
    }];
    config.fleet.store = redis.url();
    config.fleet.interval = INTERVAL;
    config.fleet.replica = replica.to_owned();
    config.validate().expect("valid config");
    config
}

/// The label the proxy gives a backend of base URL `url`.
fn label(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// The streams `proxy` itself has open on the backend of `url`.
fn streams_on(proxy: &ServerHandle, url: &str) -> f64 {
    prom::sum(
        &proxy.metrics.render(),
        "tokenmeter_backend_inflight",
        &[("backend", label(url))],
    )
}

/// Opens `n` streams through `proxy` and returns them open (their first token read).
async fn open_streams(proxy: &ServerHandle, n: usize) -> Vec<OpenStream> {
    let mut open = Vec::new();
    for _ in 0..n {
        let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
        stream
            .next_frame()
            .await
            .expect("the first token")
            .expect("read");
        open.push(stream);
    }
    open
}

#[tokio::test]
async fn a_replica_balances_away_from_the_backend_another_replica_loaded() {
    let redis = Redis::start();
    let (a, b) = (
        holding(Duration::from_secs(30)).await,
        holding(Duration::from_secs(30)).await,
    );
    // Replica one reaches only backend a; replica two both.
    let one = start_proxy(replica(&[&a.url], &redis, "one")).await;
    let two = start_proxy(replica(&[&a.url, &b.url], &redis, "two")).await;
    let held = open_streams(&one, 3).await;
    wait_for_metric(
        &two,
        "tokenmeter_backend_fleet_streams",
        &[("pool", "p"), ("backend", label(&a.url))],
        3.0,
    )
    .await;
    assert_eq!(
        prom::sum(&two.metrics.render(), "tokenmeter_fleet_replicas", &[]),
        1.0,
        "replica two reads one other replica"
    );
    // Alone, replica two would put its second stream on a (one stream each); with the fleet's
    // view, a carries three more, so all three go to b.
    let mine = open_streams(&two, 3).await;
    assert_eq!(
        (streams_on(&two, &a.url), streams_on(&two, &b.url)),
        (0.0, 3.0),
        "replica two's streams went where the fleet's load is least"
    );
    drop((held, mine));
    one.shutdown().await;
    two.shutdown().await;
}

#[tokio::test]
async fn a_replica_that_stops_is_forgotten_and_a_dead_store_leaves_each_on_its_own_view() {
    let mut redis = Redis::start();
    let a = holding(Duration::from_secs(30)).await;
    let one = start_proxy(replica(&[&a.url], &redis, "one")).await;
    let two = start_proxy(replica(&[&a.url], &redis, "two")).await;
    let held = open_streams(&one, 2).await;
    let fleet_streams = [("pool", "p"), ("backend", label(&a.url))];
    wait_for_metric(
        &two,
        "tokenmeter_backend_fleet_streams",
        &fleet_streams,
        2.0,
    )
    .await;
    // What replica one wrote: its line for backend a, to expire two intervals after its write on
    // the store's clock.
    let entry = redis
        .cli(&["hget", "tokenmeter:fleet:{load}", "one"])
        .expect("replica one's entry");
    let (expires, published) = entry.split_once(' ').expect("<expires> <payload>");
    assert_eq!(published, format!("load\tp\t{}\t2\t0\t0", label(&a.url)));
    let time = redis.cli_all(&["time"]);
    let mut time = time
        .lines()
        .map(|n| n.parse::<u64>().expect("TIME's fields"));
    let now_ms = time.next().expect("seconds") * 1000 + time.next().expect("microseconds") / 1000;
    let left = expires.parse::<u64>().expect("milliseconds") as i64 - now_ms as i64;
    assert!(
        left <= 2 * INTERVAL.as_millis() as i64,
        "expires within two intervals of the store's clock: {left} ms left"
    );

    // Replica one stops publishing (its server gone, its streams held open by the backend):
    // its entry expires on the store's clock two intervals after its last write.
    drop(held);
    one.shutdown().await;
    wait_for_metric(&two, "tokenmeter_fleet_replicas", &[], 0.0).await;
    wait_for_metric(
        &two,
        "tokenmeter_backend_fleet_streams",
        &fleet_streams,
        0.0,
    )
    .await;

    // The store killed: replica two routes on its own view, says so, and serves meanwhile.
    let three = start_proxy(replica(&[&a.url], &redis, "three")).await;
    wait_for_metric(&two, "tokenmeter_fleet_replicas", &[], 1.0).await;
    redis.kill();
    wait_for_metric(&two, "tokenmeter_fleet_own_view", &[], 1.0).await;
    let text = two.metrics.render();
    assert_eq!(prom::sum(&text, "tokenmeter_fleet_replicas", &[]), 0.0);
    assert!(
        prom::sum(
            &text,
            "tokenmeter_fleet_syncs_total",
            &[("outcome", "error")]
        ) + prom::sum(
            &text,
            "tokenmeter_fleet_syncs_total",
            &[("outcome", "timeout")]
        ) > 0.0,
        "the failed rounds are counted"
    );
    let served = open_streams(&two, 1).await;
    assert_eq!(streams_on(&two, &a.url), 1.0, "served without the store");

    // The store back: both join the fleet again.
    redis.restart();
    wait_for_metric(&two, "tokenmeter_fleet_own_view", &[], 0.0).await;
    wait_for_metric(&two, "tokenmeter_fleet_replicas", &[], 1.0).await;
    drop(served);
    two.shutdown().await;
    three.shutdown().await;
}

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

/// Sends a prompt of about `tokens` tokens, unique to `n`, through `proxy`, to its end.
async fn send(proxy: &ServerHandle, n: usize, tokens: usize) {
    let mut text = format!("request {n}: ");
    while text.len() < tokens * 4 {
        text.push_str("lorem ipsum dolor sit amet ");
    }
    let body = json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": [{"role": "user", "content": text}],
        "stream": true, "max_tokens": 4, "ignore_eos": true,
    });
    let streamed = client::post(proxy.traffic_addr, CHAT, &body.to_string()).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
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
    leader.shutdown().await;
    follower.shutdown().await;
}
