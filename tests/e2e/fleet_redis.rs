//! Gateway replicas that act as one fleet (`[fleet]`): two tokenmeter replicas share their load
//! through a real Redis (Debian's `redis-server` on a loopback port of its own). A replica
//! balances away from a backend the other one loaded; a replica that stops is forgotten within
//! two intervals; with the store killed each replica routes on its own view (counted), serves
//! every request meanwhile, and joins the fleet again once the store is back; the load is shared
//! over TLS with a client certificate and through a Redis Cluster as well; a gated pool publishes
//! each tenant's work; a placement reaches the others as news between rounds. (One designation for the fleet: `fleet_designation.rs`; llama.cpp slots
//! split between gateways: `fleet_llama.rs`.)

use crate::support;
use std::time::Duration;

use support::backend::{Backend, Script, Seen};
use support::client::{self, OpenStream, Protocol};
use support::redis::{Certificates, Cluster, Redis};
use support::{config_for, prom, start_proxy, wait_for_metric};
use tokenmeter::config::{BalanceLoad, Config, PoolConfig, QueueConfig, StoreTlsConfig};
use tokenmeter::server::ServerHandle;

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

/// A replica named `name` with pool `p` of `urls`, balanced by streams, in the fleet of
/// `redis`.
fn replica(urls: &[&str], redis: &Redis, name: &str) -> Config {
    replica_at(urls, redis.url(), StoreTlsConfig::default(), false, name)
}

/// [`replica`] with the fleet's store at `store`, over TLS by `tls`, a cluster when `cluster`.
fn replica_at(
    urls: &[&str],
    store: String,
    tls: StoreTlsConfig,
    cluster: bool,
    name: &str,
) -> Config {
    let mut config = config_for(urls[0]);
    config.pools = vec![PoolConfig {
        name: "p".to_owned(),
        urls: urls.iter().map(|url| (*url).to_owned()).collect(),
        balance: BalanceLoad::Streams,
        ..PoolConfig::default()
    }];
    config.fleet.store = store;
    config.fleet.store_tls = tls;
    config.fleet.store_cluster = cluster;
    config.fleet.interval = INTERVAL;
    config.fleet.replica = name.to_owned();
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
    // Replica two reads one other replica (a round after replica one's first write: the news
    // may have brought the streams before it).
    wait_for_metric(&two, "tokenmeter_fleet_replicas", &[], 1.0).await;
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
async fn a_placement_reaches_the_other_replicas_as_news_long_before_the_next_round() {
    let redis = Redis::start();
    let (a, b) = (
        holding(Duration::from_secs(30)).await,
        holding(Duration::from_secs(30)).await,
    );
    // Rounds 60 s apart: after the first, only the news can carry replica one's streams to
    // replica two within the test.
    let slow = |mut config: Config| {
        config.fleet.interval = Duration::from_secs(60);
        config
    };
    let one = start_proxy(slow(replica(&[&a.url], &redis, "one"))).await;
    let two = start_proxy(slow(replica(&[&a.url, &b.url], &redis, "two"))).await;
    wait_for_metric(&two, "tokenmeter_fleet_news_listening", &[], 1.0).await;
    // Replica two's first round is over before any stream opens: the next is a minute away.
    let rounds = [("outcome", "ok")];
    wait_for_metric(&two, "tokenmeter_fleet_syncs_total", &rounds, 1.0).await;
    let held = open_streams(&one, 3).await;
    wait_for_metric(
        &two,
        "tokenmeter_backend_fleet_streams",
        &[("pool", "p"), ("backend", label(&a.url))],
        3.0,
    )
    .await;
    let news = |proxy: &ServerHandle, outcome| {
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_fleet_news_total",
            &[("outcome", outcome)],
        )
    };
    let (sent, heard) = (news(&one, "sent"), news(&two, "heard"));
    assert!(
        (1.0..=3.0).contains(&sent) && heard == sent,
        "one message per placement at most, each heard: sent {sent}, heard {heard}"
    );
    assert_eq!(
        prom::sum(
            &two.metrics.render(),
            "tokenmeter_fleet_syncs_total",
            &rounds
        ),
        1.0,
        "no round of replica two's since the streams opened"
    );
    let mine = open_streams(&two, 3).await;
    assert_eq!(
        (streams_on(&two, &a.url), streams_on(&two, &b.url)),
        (0.0, 3.0),
        "replica two's streams went where the fleet's load is least"
    );
    drop((held, mine));
    // The streams ended: one's next news says so (a backend's load told, zeros too).
    let ended = news(&one, "sent");
    let _ = open_streams(&one, 1).await;
    wait_for_metric(
        &two,
        "tokenmeter_backend_fleet_streams",
        &[("pool", "p"), ("backend", label(&a.url))],
        1.0,
    )
    .await;
    assert!(news(&one, "sent") > ended);
    one.shutdown().await;
    two.shutdown().await;
}

/// Replica one (named `one`, of `first`) holds three streams on backend `a`; replica two (of
/// `second`) sees them through the store.
async fn shared_through(a: &Backend, first: Config, second: Config) {
    let one = start_proxy(first).await;
    let two = start_proxy(second).await;
    let held = open_streams(&one, 3).await;
    wait_for_metric(
        &two,
        "tokenmeter_backend_fleet_streams",
        &[("pool", "p"), ("backend", label(&a.url))],
        3.0,
    )
    .await;
    drop(held);
    one.shutdown().await;
    two.shutdown().await;
}

#[tokio::test]
async fn the_load_is_shared_over_tls_with_a_client_certificate_and_through_a_cluster() {
    let a = holding(Duration::from_secs(30)).await;
    // A Redis that asks for a client certificate, as managed services can.
    let certs = Certificates::new();
    let redis = certs.redis(true);
    let tls = StoreTlsConfig {
        ca: Some(certs.ca.clone()),
        cert: Some(certs.client.0.clone()),
        key: Some(certs.client.1.clone()),
    };
    let over_tls = |name: &str| replica_at(&[&a.url], redis.tls_url(), tls.clone(), false, name);
    shared_through(&a, over_tls("one"), over_tls("two")).await;
    // A cluster of three nodes: the fleet's one hash is one slot, on whichever node holds it.
    let cluster = Cluster::start();
    let clustered = |name: &str| {
        replica_at(
            &[&a.url],
            cluster.url(),
            StoreTlsConfig::default(),
            true,
            name,
        )
    };
    shared_through(&a, clustered("one"), clustered("two")).await;
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
    // What replica one wrote: which of its writings it is, its line for backend a and the split
    // of llama.cpp slots it reserves by (every replica of a fleet publishes one), stamped with
    // its write on the store's clock, to expire two intervals after it. (Replica two may have
    // heard of the streams as news before the next round wrote them.)
    let load = format!("load\tp\t{}\t2\t0\t0", label(&a.url));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let entry = loop {
        let entry = redis
            .cli(&["hget", "tokenmeter:fleet:{load}", "one"])
            .expect("replica one's entry");
        if entry.contains(&load) || tokio::time::Instant::now() > deadline {
            break entry;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (expires, published) = entry.split_once(' ').expect("<expires> <payload>");
    let (written, published) = published
        .strip_prefix("written\t")
        .and_then(|rest| rest.split_once('\n'))
        .expect("led by the store's stamp");
    let (stamp, published) = published.split_once('\n').expect("three lines");
    let stamp: Vec<&str> = stamp.split('\t').collect();
    assert!(
        stamp.len() == 3
            && stamp[0] == "stamp"
            && stamp[1].len() == 16
            && stamp[2].parse::<u64>().is_ok_and(|n| n > 1),
        "which of its writings: {stamp:?}"
    );
    let (written_load, slots) = published.split_once('\n').expect("three lines");
    assert_eq!(written_load, load);
    let partition = slots.strip_prefix("slots\t").expect("the slots' partition");
    assert!(
        partition.len() == 16 && partition.chars().all(|c| c.is_ascii_hexdigit()),
        "the partition of llama.cpp slots it reserves by, as 16 hex digits: {slots}"
    );
    let time = redis.cli_all(&["time"]);
    let mut time = time
        .lines()
        .map(|n| n.parse::<u64>().expect("TIME's fields"));
    let now_ms = time.next().expect("seconds") * 1000 + time.next().expect("microseconds") / 1000;
    let expires = expires.parse::<u64>().expect("milliseconds");
    let written = written.parse::<u64>().expect("milliseconds");
    let left = expires as i64 - now_ms as i64;
    assert!(
        left <= 2 * INTERVAL.as_millis() as i64,
        "expires within two intervals of the store's clock: {left} ms left"
    );
    assert_eq!(
        expires - written,
        2 * INTERVAL.as_millis() as u64,
        "the stamp is the write's time on the store's clock"
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
    wait_for_metric(&two, "tokenmeter_fleet_news_listening", &[], 1.0).await;
    redis.kill();
    wait_for_metric(&two, "tokenmeter_fleet_own_view", &[], 1.0).await;
    // The news' subscription ended with the store; it is made again once the store is back.
    wait_for_metric(&two, "tokenmeter_fleet_news_listening", &[], 0.0).await;
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
    wait_for_metric(&two, "tokenmeter_fleet_news_listening", &[], 1.0).await;
    drop(served);
    two.shutdown().await;
    three.shutdown().await;
}

#[tokio::test]
async fn a_gated_pool_publishes_each_tenants_work_in_flight_and_let_through() {
    let redis = Redis::start();
    let a = holding(Duration::from_secs(30)).await;
    let mut config = replica(&[&a.url], &redis, "one");
    config.pools[0].balance = BalanceLoad::Slo;
    config.pools[0].queue = Some(QueueConfig {
        tenant_header: Some(http::HeaderName::from_static("x-team")),
        equal_shares: true,
        ..QueueConfig::default()
    });
    config.validate().expect("valid config");
    let one = start_proxy(config).await;
    let headers = [("x-team", "acme")];
    let mut stream = client::open_with(
        one.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        BODY,
        &headers,
    )
    .await;
    stream
        .next_frame()
        .await
        .expect("the first token")
        .expect("read");
    // Within an interval or two, its entry says what acme holds and was let through: the same
    // while its one stream runs (its prompt and the 256 output tokens it may ask for).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        let entry = redis
            .cli(&["hget", "tokenmeter:fleet:{load}", "one"])
            .unwrap_or_default();
        if let Some(line) = entry.lines().find(|l| l.starts_with("tenant\tp\tacme\t")) {
            break line.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tenant line: {entry}"
        );
        tokio::time::sleep(INTERVAL / 5).await;
    };
    let fields: Vec<u64> = line
        .split('\t')
        .skip(3)
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(fields.len(), 2, "{line}");
    assert_eq!(fields[0], fields[1], "in flight, and let through: {line}");
    assert!(fields[0] > 256, "its prompt and max_tokens: {line}");
    drop(stream);
    one.shutdown().await;
}
