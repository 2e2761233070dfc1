//! End to end: the router in front of simulated vLLM replicas (the `fast` profile, so each request
//! takes milliseconds). Long prompts land on the prefill pool and short ones on decode; a killed
//! backend is ejected, connect failures are retried, fallbacks are counted, and no request that had
//! not started streaming is lost.

use crate::support;
use std::time::Duration;

use tokenmeter::config::{Config, PoolConfig};
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

use support::{client, config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const MODEL: &str = "sim-fast";

async fn start_sim() -> SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let config = SimConfig::profile("fast").expect("fast profile");
    sim::spawn(listener, config).await.expect("sim starts")
}

/// A simulated replica the test will kill, on a port from below the ephemeral range
/// (support/ports.rs): once it is gone its address refuses connections, and no other test's
/// `bind(0)` can take the port meanwhile, as it could a released ephemeral one.
async fn start_sim_to_kill() -> SimHandle {
    let listener = TcpListener::bind(support::ports::free_addr())
        .await
        .expect("bind sim");
    let config = SimConfig::profile("fast").expect("fast profile");
    sim::spawn(listener, config).await.expect("sim starts")
}

fn url(sim: &SimHandle) -> String {
    format!("http://{}", sim.local_addr())
}

fn addr(sim: &SimHandle) -> String {
    sim.local_addr().to_string()
}

/// `n` words: `n` tokens on the simulated replica, `2n - 1` bytes.
fn words(n: usize) -> String {
    vec!["w"; n].join(" ")
}

fn chat(words_n: usize) -> String {
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{}"}}],"stream":true,"max_tokens":4}}"#,
        words(words_n)
    )
}

/// Pools `prefill` and `decode`; prompts of 2048 estimated tokens or more go to `prefill`.
fn pools_config(prefill: Vec<String>, decode: Vec<String>) -> Config {
    let mut config = support::split_pools(prefill, decode, 2048);
    // The estimate here is calibrated by usage alone, so its figures can be checked by hand; the
    // router's /tokenize calls have their own tests (tests/e2e/route_tokenize.rs).
    config.routing.tokenize = false;
    // Ejections outlast the test, so what is ejected stays ejected.
    config.routing.eject_base = Duration::from_secs(60);
    config.routing.eject_max = Duration::from_secs(60);
    config.validate().expect("valid config");
    config
}

/// Sends a streaming chat request and asserts it completed.
async fn ok_chat(proxy: std::net::SocketAddr, words_n: usize) {
    let streamed = client::post(proxy, CHAT, &chat(words_n)).await;
    assert_eq!(streamed.status, 200, "status: {}", streamed.text());
    assert!(
        streamed.error.is_none() && streamed.text().ends_with("data: [DONE]\n\n"),
        "the stream completed: {:?} {}",
        streamed.error,
        streamed.text()
    );
}

fn requests(text: &str, labels: &[(&str, &str)]) -> f64 {
    prom::sum(text, "tokenmeter_requests_total", labels)
}

fn not_ok(text: &str) -> f64 {
    requests(text, &[]) - requests(text, &[("outcome", "ok")])
}

#[tokio::test]
async fn long_prompts_go_to_prefill_short_to_decode_and_the_estimate_calibrates() {
    let prefill = start_sim().await;
    let decode = start_sim().await;
    let proxy = start_proxy(pools_config(vec![url(&prefill)], vec![url(&decode)])).await;

    // 5000 words = 9999 bytes, estimated at the prior 0.25 tokens/byte = 2500 tokens: prefill.
    ok_chat(proxy.traffic_addr, 5000).await;
    // 100 words: 50 tokens: decode.
    ok_chat(proxy.traffic_addr, 100).await;
    // A long stream held open: it is load on its backend until it ends (here: is cancelled).
    let held = chat(100).replace(r#""max_tokens":4"#, r#""max_tokens":50000"#);
    let mut open = client::open(proxy.traffic_addr, CHAT, &held).await;
    open.next_frame()
        .await
        .expect("a first frame")
        .expect("no error");
    let inflight = |text: &str| {
        prom::value(
            text,
            "tokenmeter_backend_inflight",
            &[("pool", "decode"), ("backend", &addr(&decode))],
        )
    };
    assert_eq!(
        inflight(&proxy.metrics.render()),
        1.0,
        "a stream counts as load on its backend while it streams"
    );
    open.disconnect();
    assert!(
        eventually(&proxy, |text| inflight(text) == 0.0).await,
        "load released when the client went away"
    );

    let text = proxy.metrics.render();
    // The sim counted 5000 + 10 template tokens for 9999 bytes: the ratio moved from 0.25 to
    // (0.99 * 1024 + 5010) / (0.99 * 4096 + 9999) = 0.4286, then the short prompt's 110/199.
    let ratio = prom::value(
        &text,
        "tokenmeter_prompt_tokens_per_byte",
        &[("gen_ai_request_model", MODEL)],
    );
    assert!(
        (0.42..0.5).contains(&ratio),
        "calibrated towards the sim's 0.5 tokens/byte: {ratio}"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_prompt_estimate_error_ratio_count",
            &[("gen_ai_request_model", MODEL)]
        ),
        2.0,
        "one error observation per response with usage"
    );

    // 3000 words = 5999 bytes: 1500 tokens at the prior (decode), ~2570 calibrated (prefill).
    ok_chat(proxy.traffic_addr, 3000).await;

    let text = proxy.metrics.render();
    let on = |pool: &str, sim: &SimHandle| {
        requests(
            &text,
            &[("pool", pool), ("backend", &addr(sim)), ("outcome", "ok")],
        )
    };
    assert_eq!(on("prefill", &prefill), 2.0, "both long prompts on prefill");
    assert_eq!(on("decode", &decode), 1.0, "the short prompt on decode");
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_route_decisions_total",
            &[("pool", "prefill"), ("reason", "rule")]
        ),
        2.0,
        "counted as rule decisions"
    );
    let (_, sim_text) = client::get(prefill.local_addr(), "/metrics").await;
    assert_eq!(
        prom::sum(&sim_text, "vllm:request_success_total", &[]),
        2.0,
        "the prefill replica itself served two requests"
    );
    proxy.shutdown().await;
    prefill.shutdown().await;
    decode.shutdown().await;
}

#[tokio::test]
async fn killed_backends_are_ejected_retried_and_fallen_back_from_without_losing_requests() {
    let prefill = start_sim_to_kill().await;
    let a = start_sim_to_kill().await;
    let b = start_sim().await;
    let (a_addr, b_addr, p_addr) = (addr(&a), addr(&b), addr(&prefill));
    let proxy = start_proxy(pools_config(vec![url(&prefill)], vec![url(&a), url(&b)])).await;
    let healthy = |text: &str, pool: &str, backend: &str| {
        prom::value(
            text,
            "tokenmeter_backend_healthy",
            &[("pool", pool), ("backend", backend)],
        )
    };
    let per_backend =
        |text: &str, name: &str, backend: &str| prom::sum(text, name, &[("backend", backend)]);

    for _ in 0..4 {
        ok_chat(proxy.traffic_addr, 50).await;
    }
    a.shutdown().await;

    // Every request to the dead backend fails to connect and is retried on the other one; after
    // three consecutive failures it is ejected. Bounded: P2C picks it half the time.
    let mut sent = 0;
    while healthy(&proxy.metrics.render(), "decode", &a_addr) != 0.0 && sent < 200 {
        ok_chat(proxy.traffic_addr, 50).await;
        sent += 1;
    }
    let text = proxy.metrics.render();
    assert_eq!(
        healthy(&text, "decode", &a_addr),
        0.0,
        "A ejected after {sent} requests"
    );
    assert_eq!(healthy(&text, "decode", &b_addr), 1.0, "B healthy");
    assert_eq!(
        per_backend(&text, "tokenmeter_route_retries_total", &a_addr),
        3.0,
        "each of the three failures on A was retried"
    );
    assert_eq!(
        per_backend(&text, "tokenmeter_backend_ejections_total", &a_addr),
        1.0,
        "one ejection"
    );
    let on_b = requests(&text, &[("backend", &b_addr)]);
    for _ in 0..10 {
        ok_chat(proxy.traffic_addr, 50).await;
    }
    let text = proxy.metrics.render();
    assert_eq!(
        requests(&text, &[("backend", &b_addr)]) - on_b,
        10.0,
        "an ejected backend is never chosen"
    );
    assert_eq!(
        per_backend(&text, "tokenmeter_route_retries_total", &a_addr),
        3.0,
        "no more attempts on A"
    );

    // The whole prefill pool dies: long prompts fall back to decode.
    prefill.shutdown().await;
    for _ in 0..4 {
        ok_chat(proxy.traffic_addr, 5000).await;
    }
    let text = proxy.metrics.render();
    assert_eq!(healthy(&text, "prefill", &p_addr), 0.0, "prefill ejected");
    assert_eq!(
        per_backend(&text, "tokenmeter_route_retries_total", &p_addr),
        3.0,
        "three connect failures retried"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_route_decisions_total",
            &[("pool", "decode"), ("reason", "fallback")]
        ),
        4.0,
        "every long prompt fell back (3 on retry, 1 directly)"
    );
    assert_eq!(
        requests(
            &text,
            &[("pool", "decode"), ("backend", &b_addr), ("outcome", "ok")]
        ),
        4.0 + sent as f64 + 10.0 + 4.0 - requests(&text, &[("backend", &a_addr)]),
        "everything after the kills was served by B"
    );
    assert_eq!(not_ok(&text), 0.0, "no request was lost:\n{text}");
    proxy.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_sidecar_config_is_one_implicit_pool_named_default() {
    let sim = start_sim().await;
    let proxy = start_proxy(config_for(&url(&sim))).await;
    ok_chat(proxy.traffic_addr, 10).await;
    let text = proxy.metrics.render();
    assert_eq!(
        requests(
            &text,
            &[
                ("pool", "default"),
                ("backend", &addr(&sim)),
                ("outcome", "ok")
            ]
        ),
        1.0,
        "labelled with the implicit pool"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_route_decisions_total",
            &[("pool", "default"), ("reason", "rule")]
        ),
        1.0,
        "one decision"
    );
    proxy.shutdown().await;
    sim.shutdown().await;
}

/// Polls the proxy's metrics until `check` holds (bounded: about 5 s).
async fn eventually(
    proxy: &tokenmeter::server::ServerHandle,
    check: impl Fn(&str) -> bool,
) -> bool {
    for _ in 0..250 {
        if check(&proxy.metrics.render()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_dns_pool_finds_its_backends_by_name() {
    let sim = start_sim().await;
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![PoolConfig {
        name: "svc".to_owned(),
        dns: Some(format!("localhost:{}", sim.local_addr().port())),
        ..PoolConfig::default()
    }];
    config.routing.dns_refresh = Duration::from_millis(50);
    config.validate().expect("valid config");
    let proxy = start_proxy(config).await;
    let backend = addr(&sim);
    let found = eventually(&proxy, |text| {
        !prom::find(
            text,
            "tokenmeter_backend_healthy",
            &[("pool", "svc"), ("backend", &backend)],
        )
        .is_empty()
    })
    .await;
    assert!(found, "localhost resolved to {backend}");
    // localhost may also resolve to ::1, where nothing listens: that is a retried connect failure.
    ok_chat(proxy.traffic_addr, 10).await;
    let text = proxy.metrics.render();
    assert_eq!(
        requests(
            &text,
            &[("pool", "svc"), ("backend", &backend), ("outcome", "ok")]
        ),
        1.0,
        "served by the resolved backend"
    );
    proxy.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn active_health_checks_eject_a_dead_backend_without_traffic() {
    let sim = start_sim_to_kill().await;
    let backend = addr(&sim);
    let mut config = config_for(&url(&sim));
    config.pools = vec![PoolConfig {
        name: "checked".to_owned(),
        urls: vec![url(&sim)],
        health_check: Duration::from_millis(50),
        ..PoolConfig::default()
    }];
    config.validate().expect("valid config");
    let proxy = start_proxy(config).await;
    let healthy = |text: &str| {
        prom::value(
            text,
            "tokenmeter_backend_healthy",
            &[("pool", "checked"), ("backend", &backend)],
        )
    };
    assert_eq!(healthy(&proxy.metrics.render()), 1.0, "healthy at start");
    sim.shutdown().await;
    let ejected = eventually(&proxy, |text| healthy(text) == 0.0).await;
    assert!(ejected, "a failed GET /health ejects the backend");
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_backend_ejections_total",
            &[("backend", &backend)]
        ),
        1.0,
        "one ejection, not one per failed check"
    );
    // Panic mode: with every backend ejected the request is tried anyway (health may be wrong);
    // here the replica really is gone, so the connect is refused: 502, counted as a panic pick.
    let refused = client::post(proxy.traffic_addr, CHAT, &chat(10)).await;
    assert_eq!(
        refused.status,
        502,
        "tried anyway, refused: {}",
        refused.text()
    );
    assert_eq!(
        prom::value(
            &proxy.metrics.render(),
            "tokenmeter_route_decisions_total",
            &[("pool", "checked"), ("reason", "panic")]
        ),
        1.0,
        "counted as a panic-mode decision"
    );
    proxy.shutdown().await;
}
