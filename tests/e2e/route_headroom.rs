//! End to end: the SLO headroom signal of a `balance = "slo"` pool in front of two simulated
//! Llama-3.1-8B replicas (docs/autoscaling.md). Cold, it knows nothing and says so (NaN capacity,
//! the count held at the replicas available); once the replicas' models have learned, it reports
//! the load offered, the capacity, their ratio and the replicas asked for, each consistent with the
//! others; idle again, the count falls to the minimum after `scale_down_after`; a replica gone
//! leaves one ready.

use crate::support;
use std::time::Duration;

use serde_json::json;
use tokenmeter::config::{AutoscaleConfig, BalanceLoad, Config, PoolConfig};
use tokenmeter::server::ServerHandle;
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

use support::{client, config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const POOL: &str = "chat";
const HEADROOM: f64 = 1.25;
const MAX_REPLICAS: u32 = 8;

async fn start_sim() -> SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let config = SimConfig::profile("llama-3.1-8b-h100").expect("profile");
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
        // Active checks, so a replica gone is seen without traffic.
        health_check: Duration::from_millis(200),
        autoscale: Some(AutoscaleConfig {
            headroom: HEADROOM,
            min_replicas: 1,
            max_replicas: MAX_REPLICAS,
            // Short, so that the test's load shows within seconds.
            window: Duration::from_secs(2),
            scale_down_after: Duration::from_secs(3),
            cold_start: Duration::from_secs(5),
            tolerance: 0.1,
            objective: 0.95,
        }),
        ..PoolConfig::default()
    }];
    config
        .routing
        .model_tokens_per_byte
        .insert("meta-llama/Llama-3.1-8B-Instruct".to_owned(), 0.25);
    config.validate().expect("valid config");
    config
}

async fn send(proxy: std::net::SocketAddr, n: usize, tokens: usize) {
    let mut text = format!("request {n}: ");
    while text.len() < tokens * 4 {
        text.push_str("lorem ipsum dolor sit amet ");
    }
    let body = json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": [{"role": "user", "content": text}],
        "stream": true, "max_tokens": 16, "ignore_eos": true,
    });
    let streamed = client::post(proxy, CHAT, &body.to_string()).await;
    assert_eq!(streamed.status, 200, "status: {}", streamed.text());
}

/// One tick's signal, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Signal {
    offered: f64,
    forecast: f64,
    capacity: f64,
    headroom: f64,
    desired: f64,
    ready: f64,
}

impl Signal {
    fn read(proxy: &ServerHandle) -> Option<Signal> {
        let text = proxy.metrics.render();
        let series = |name: &str| {
            let found = prom::find(&text, name, &[("pool", POOL)]);
            found.first().map(|sample| sample.value)
        };
        Some(Signal {
            offered: series("tokenmeter_pool_offered_requests_per_second")?,
            forecast: series("tokenmeter_pool_forecast_requests_per_second")?,
            capacity: series("tokenmeter_pool_capacity_requests_per_second")?,
            headroom: series("tokenmeter_pool_slo_headroom_ratio")?,
            desired: series("tokenmeter_pool_desired_replicas")?,
            ready: series("tokenmeter_pool_ready_replicas")?,
        })
    }

    /// A reading no tick changed while it was read: two in a row that agree (NaN equal to NaN).
    async fn settled(proxy: &ServerHandle) -> Signal {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let first = Signal::read(proxy);
            let second = Signal::read(proxy);
            if let (Some(a), Some(b)) = (first, second) {
                if a.same(&b) {
                    return a;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no settled reading of the pool's signal: {first:?} {second:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn same(&self, other: &Signal) -> bool {
        let eq = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
        eq(self.offered, other.offered)
            && eq(self.forecast, other.forecast)
            && eq(self.capacity, other.capacity)
            && eq(self.headroom, other.headroom)
            && eq(self.desired, other.desired)
            && eq(self.ready, other.ready)
    }

    /// Polls until `test` holds of a settled reading (`within` at most).
    async fn until(
        proxy: &ServerHandle,
        what: &str,
        within: Duration,
        test: impl Fn(&Signal) -> bool,
    ) -> Signal {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let signal = Signal::settled(proxy).await;
            if test(&signal) {
                return signal;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: still {signal:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The headroom and the count asked for are what the offered load and the capacity make
    /// them (`scale_down_after` aside: the caller waits it out where it matters).
    fn assert_consistent(&self) {
        let expected = (self.capacity / self.offered).min(10.0);
        assert!(
            (self.headroom - expected).abs() <= 1e-9 * expected.max(1.0),
            "headroom = capacity / offered, at most 10: {self:?}"
        );
        assert!(
            self.forecast >= self.offered && self.forecast <= 2.0 * self.offered,
            "the forecast is the offered load and its rise, at most twice it: {self:?}"
        );
        let per_replica = self.capacity / self.ready;
        let asked = (self.forecast * HEADROOM / per_replica).ceil();
        assert!(
            self.desired >= asked.clamp(1.0, f64::from(MAX_REPLICAS)),
            "at least what the load asks: {self:?} (asks {asked})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_reports_its_headroom_from_its_models_and_asks_for_replicas_by_it() {
    let one = start_sim().await;
    let two = start_sim().await;
    let proxy = start_proxy(proxy_config(&[&one, &two])).await;
    let addr = proxy.traffic_addr;

    // Cold: no model, no mix. Nothing known, and the count holds at the two replicas there.
    let cold = Signal::until(&proxy, "the first tick", Duration::from_secs(10), |s| {
        s.ready == 2.0
    })
    .await;
    assert_eq!(cold.offered, 0.0);
    assert!(cold.capacity.is_nan(), "{cold:?}");
    assert!(cold.headroom.is_nan(), "{cold:?}");
    assert_eq!(cold.desired, 2.0);

    // The models learn from 24 requests one at a time (prompts of 500 to 3 000 tokens).
    for n in 0..24 {
        send(addr, n, 500 + (n * 397) % 2_500).await;
    }
    // Then a paced load of 8 requests a second for 5 s.
    let mut load = Vec::new();
    for n in 0..40 {
        load.push(tokio::spawn(send(addr, 100 + n, 1_000)));
        tokio::time::sleep(Duration::from_millis(125)).await;
    }
    let busy = Signal::settled(&proxy).await;
    for task in load {
        task.await.expect("request task");
    }
    assert!(busy.capacity.is_finite() && busy.capacity > 0.0, "{busy:?}");
    assert_eq!(busy.ready, 2.0);
    // A moving average over 2 s of 8 a second (and the warm-up's few before): within 4 to 12.
    assert!((4.0..=12.0).contains(&busy.offered), "{busy:?}");
    busy.assert_consistent();

    // Idle: the offered load decays, and 3 s later the count is the minimum; the headroom of an
    // idle pool reads 10.
    let idle = Signal::until(&proxy, "idle", Duration::from_secs(30), |s| {
        s.offered < 0.01 && s.desired == 1.0
    })
    .await;
    assert_eq!(idle.headroom, 10.0, "{idle:?}");
    assert!(
        idle.capacity.is_finite(),
        "the capacity stays known: {idle:?}"
    );
    idle.assert_consistent();

    // A replica gone: its health checks fail, it is ejected, one is ready, and the capacity (a
    // moving average a replica, times the replicas ready) falls to what the one left sustains.
    two.shutdown().await;
    let alone = Signal::until(
        &proxy,
        "one replica ejected, and its capacity gone",
        Duration::from_secs(20),
        |s| s.ready == 1.0 && s.capacity < idle.capacity,
    )
    .await;
    assert!(alone.capacity > 0.0, "{alone:?}");
    assert_eq!(alone.desired, 1.0, "{alone:?}");
}
