//! End to end: `balance = "slo"` in front of two simulated Llama-3.1-8B replicas, one four times
//! slower than the other (the same profile at `time_scale` 4). The proxy learns each replica's
//! latency from the requests it served, then places a burst where it predicts the most headroom:
//! the fast replica first, the slow one once the fast one's queue would make a prompt wait longer
//! there. Its predictions are counted against what each request measured. With a gateway queue
//! (`[pools.queue]`), a request no replica can serve within its TTFT target is shed with a 429, or
//! sent anyway, as the pool says.

use crate::support;
use std::collections::HashMap;
use std::net::SocketAddr;

use serde_json::json;
use tokenmeter::config::{
    Affinity, BalanceLoad, Config, OnDeadline, PoolConfig, PrefillHeavy, QueueConfig,
};
use tokenmeter::server::ServerHandle;
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

use support::{client, config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const POOL: &str = "chat";
const OUTPUT: u64 = 4;
/// Requests that teach the models before the burst.
const WARM_UP: usize = 24;
const BURST: usize = 8;

async fn start_sim(time_scale: f64) -> SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let mut config = SimConfig::profile("llama-3.1-8b-h100").expect("profile");
    config.time_scale = time_scale;
    sim::spawn(listener, config).await.expect("sim starts")
}

fn proxy_config(sims: &[&SimHandle]) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![PoolConfig {
        name: POOL.to_owned(),
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
    config.validate().expect("valid config");
    config
}

/// A prompt of about `tokens` tokens, unique to `n` from its first byte (no prompt cache helps).
fn prompt(n: usize, tokens: usize) -> String {
    let mut text = format!("request {n}: ");
    while text.len() < tokens * 4 {
        text.push_str("lorem ipsum dolor sit amet ");
    }
    text
}

async fn send(proxy: SocketAddr, n: usize, tokens: usize) {
    let streamed = try_send(proxy, n, tokens).await;
    assert_eq!(streamed.status, 200, "status: {}", streamed.text());
    assert!(
        streamed.text().ends_with("data: [DONE]\n\n"),
        "a whole stream"
    );
}

async fn try_send(proxy: SocketAddr, n: usize, tokens: usize) -> client::Streamed {
    let body = json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": [{"role": "user", "content": prompt(n, tokens)}],
        "stream": true, "max_tokens": OUTPUT, "ignore_eos": true,
    });
    client::post(proxy, CHAT, &body.to_string()).await
}

/// The value of the series `name` of the pool whose label `label` is `value`.
fn pool_series(metrics: &str, name: &str, label: &str, value: &str) -> f64 {
    prom::value(metrics, name, &[("pool", POOL), (label, value)])
}

/// Requests `label` served between two [`served`] readings.
fn delta(label: &str, before: &HashMap<String, f64>, after: &HashMap<String, f64>) -> f64 {
    after.get(label).copied().unwrap_or(0.0) - before.get(label).copied().unwrap_or(0.0)
}

/// Requests each replica served, by the proxy's counters.
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
async fn learns_each_replicas_speed_and_places_a_burst_by_predicted_headroom() {
    let fast = start_sim(1.0).await;
    let slow = start_sim(4.0).await;
    let fast_label = fast.local_addr().to_string();
    let slow_label = slow.local_addr().to_string();
    // Placement by headroom alone: with prefill-heavy replicas designated, a 2 000-token prompt
    // (a stall past 140 ms on the slow replica) would go to the slow one only once the fast one
    // missed, which the last test covers.
    let mut config = proxy_config(&[&fast, &slow]);
    config.pools[0].prefill_heavy = Some(PrefillHeavy::Off);
    let proxy = start_proxy(config).await;
    let addr = proxy.traffic_addr;

    // One at a time, prompts of 500 to 3 000 tokens: each replica's prefill rate is learned
    // (the cold pool spreads them, as its predictions are equal).
    for n in 0..WARM_UP {
        send(addr, n, 500 + (n * 397) % 2_500).await;
    }
    let learned = served(&proxy);
    assert!(
        learned.get(&slow_label).copied().unwrap_or(0.0) >= 1.0,
        "the slow replica was tried while the models were cold: {learned:?}"
    );
    let metrics = proxy.metrics.render();
    let counted = |kind: &str| {
        pool_series(
            &metrics,
            "tokenmeter_prediction_error_ratio_count",
            "kind",
            kind,
        )
    };
    assert_eq!(
        counted("ttft"),
        WARM_UP as f64,
        "every request held against its prediction"
    );
    assert_eq!(
        counted("tpot"),
        WARM_UP as f64,
        "every request's TPOT held against its prediction"
    );

    // Idle again: a 2 000-token prompt goes to the fast replica, every time.
    let before = served(&proxy);
    for n in 0..4 {
        send(addr, 100 + n, 2_000).await;
    }
    let after = served(&proxy);
    assert_eq!(
        delta(&fast_label, &before, &after),
        4.0,
        "an idle fast replica has the most headroom: {after:?}"
    );

    // A burst of eight 2 000-token prompts: about 0.1 s of prefill each on the fast replica, 0.4 s
    // on the slow one. Queued on the fast one, the fifth would wait ~0.5 s: some go to the slow
    // one, most to the fast one.
    let before = served(&proxy);
    let burst: Vec<_> = (0..BURST)
        .map(|n| tokio::spawn(send(addr, 200 + n, 2_000)))
        .collect();
    for task in burst {
        task.await.expect("request task");
    }
    let after = served(&proxy);
    let on_fast = delta(&fast_label, &before, &after);
    let on_slow = delta(&slow_label, &before, &after);
    assert_eq!(on_fast + on_slow, BURST as f64, "every request served");
    // A range, not a count: the split follows the learned rates, which come from measured
    // latencies. A loaded machine adds milliseconds to steps of 100 ms (fast) and 400 ms (slow),
    // and the burst's eight requests reach the proxy within milliseconds of each other, far less
    // than the 100 ms that would let the fast queue drain.
    assert!(
        (1.0..=3.0).contains(&on_slow),
        "the slow replica takes what would wait longer on the fast one: {on_fast} fast, {on_slow} slow"
    );
    let met = prom::value(
        &proxy.metrics.render(),
        "tokenmeter_slo_decisions_total",
        &[("pool", POOL), ("decision", "met")],
    );
    assert_eq!(
        met,
        (WARM_UP + 4 + BURST) as f64,
        "each was predicted to meet 800 ms / 35 ms"
    );
}

/// A 429 from the gate: `retry-after` and an OpenAI-style error naming the pool.
fn assert_shed(response: &client::Streamed) {
    assert_eq!(response.status, 429, "shed: {}", response.text());
    assert_eq!(
        response.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "a shed request is told to retry after a second"
    );
    let error: serde_json::Value = serde_json::from_str(&response.text()).expect("a JSON error");
    assert_eq!(error["error"]["type"], "rate_limit_exceeded", "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(POOL), "names the pool: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pool_sheds_what_it_cannot_serve_in_time_or_sends_it_late() {
    for on_deadline in [OnDeadline::Shed, OnDeadline::Send] {
        // One replica four times slower than an H100's 8B: a 2 000-token prompt prefills in about
        // 0.4 s, so with a 1 s TTFT target two queued ahead of a third make it miss.
        let slow = start_sim(4.0).await;
        let mut config = proxy_config(&[&slow]);
        config.slo.ttft = std::time::Duration::from_secs(1);
        config.pools[0].queue = Some(QueueConfig {
            on_deadline,
            ..QueueConfig::default()
        });
        config.validate().expect("valid config");
        let proxy = start_proxy(config).await;
        let addr = proxy.traffic_addr;
        for n in 0..12 {
            send(addr, n, 500 + (n * 397) % 2_500).await;
        }
        let burst: Vec<_> = (0..BURST)
            .map(|n| tokio::spawn(try_send(addr, 300 + n, 2_000)))
            .collect();
        let mut statuses = Vec::new();
        for task in burst {
            let response = task.await.expect("request task");
            if response.status == 429 {
                assert_shed(&response);
            } else {
                assert_eq!(response.status, 200, "{}", response.text());
                assert!(
                    response.text().ends_with("data: [DONE]\n\n"),
                    "a request the gate let through streams to its end"
                );
            }
            statuses.push(response.status.as_u16());
        }
        let ok = statuses.iter().filter(|s| **s == 200).count() as f64;
        let shed = statuses.iter().filter(|s| **s == 429).count() as f64;
        let metrics = proxy.metrics.render();
        let exits =
            |exit: &str| pool_series(&metrics, "tokenmeter_queue_exits_total", "exit", exit);
        match on_deadline {
            OnDeadline::Shed => {
                // Two fit (predicted ~0.4 s and ~0.8 s); a third is near the line, where the
                // learned rates (milliseconds of load on 400 ms steps) decide: a range.
                assert!(
                    (1.0..=3.0).contains(&ok),
                    "the first go, the rest are shed: {statuses:?}"
                );
                assert_eq!(
                    exits("shed_deadline"),
                    shed,
                    "every 429 left the gate as shed at its deadline"
                );
                assert_eq!(exits("late"), 0.0, "shedding sends nothing late");
                let overloaded = prom::sum(
                    &metrics,
                    "tokenmeter_requests_total",
                    &[("outcome", "overloaded")],
                );
                assert_eq!(overloaded, shed, "a shed request's outcome is counted");
            }
            OnDeadline::Send => {
                assert_eq!(shed, 0.0, "sent anyway: {statuses:?}");
                assert!(exits("late") >= 1.0, "some were late");
            }
        }
        // Every request of the run left the gate one way or another.
        let total: f64 = ["direct", "placed", "late", "shed_deadline", "shed_full"]
            .iter()
            .map(|exit| exits(exit))
            .sum();
        assert_eq!(total, 12.0 + BURST as f64, "{metrics}");
        assert_eq!(
            ok + shed,
            BURST as f64,
            "every burst request answered 200 or 429: {statuses:?}"
        );
        assert_eq!(
            prom::value(&metrics, "tokenmeter_queue_depth", &[("pool", POOL)]),
            0.0,
            "the queue is empty once every request has left it"
        );
    }
}

/// The prefill-heavy gauge of every backend of the pool, by backend.
fn prefill_heavy(proxy: &ServerHandle) -> HashMap<String, f64> {
    prom::find(
        &proxy.metrics.render(),
        "tokenmeter_backend_prefill_heavy",
        &[("pool", POOL)],
    )
    .into_iter()
    .filter_map(|sample| Some((sample.labels.get("backend")?.clone(), sample.value)))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_designate_a_prefill_heavy_replica_and_chats_start_elsewhere() {
    let sims = [
        start_sim(1.0).await,
        start_sim(1.0).await,
        start_sim(1.0).await,
    ];
    let proxy = start_proxy(proxy_config(&[&sims[0], &sims[1], &sims[2]])).await;
    let addr = proxy.traffic_addr;
    // Four documents of 6 000 tokens, one after another: each prefills for about 0.3 s, a stall
    // past 4 x 35 ms, so each is a long prompt; each takes longer than a refresh (250 ms), so
    // the next one's placement designates from the demand the last ones made.
    for n in 0..4 {
        send(addr, 500 + n, 6_000).await;
    }
    let roles = prefill_heavy(&proxy);
    assert_eq!(roles.len(), 3, "a gauge per backend: {roles:?}");
    let designated: Vec<&String> = roles
        .iter()
        .filter(|(_, value)| **value == 1.0)
        .map(|(backend, _)| backend)
        .collect();
    assert_eq!(
        designated.len(),
        1,
        "one replica covers 4 documents in about a second: {roles:?}"
    );
    let designated = designated[0].clone();
    let metrics = proxy.metrics.render();
    let moves = |way: &str| {
        pool_series(
            &metrics,
            "tokenmeter_prefill_heavy_moves_total",
            "move",
            way,
        )
    };
    assert_eq!(moves("in"), 1.0, "{metrics}");
    assert_eq!(moves("out"), 0.0, "{metrics}");
    let demand = prom::value(
        &metrics,
        "tokenmeter_prefill_demand_tokens_per_second",
        &[("pool", POOL)],
    );
    assert!(
        demand > 0.0 && demand < 24_000.0,
        "the documents' tokens per second, averaged over a window: {demand}"
    );
    assert_eq!(
        pool_series(
            &metrics,
            "tokenmeter_prediction_error_ratio_count",
            "kind",
            "gap"
        ),
        4.0,
        "each document's largest gap held against its prediction"
    );
    // Chats now, while documents have been coming more than one a second: each starts on a
    // replica where no stall is expected, never on the designated one.
    let before = served(&proxy);
    for n in 0..6 {
        send(addr, 600 + n, 100).await;
    }
    let after = served(&proxy);
    let on = |label: &str| delta(label, &before, &after);
    assert_eq!(
        on(&designated),
        0.0,
        "no chat on the prefill-heavy replica: {before:?} -> {after:?}"
    );
    assert_eq!(
        sims.iter()
            .map(|sim| on(&sim.local_addr().to_string()))
            .sum::<f64>(),
        6.0
    );
}
