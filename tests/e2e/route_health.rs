//! Passive health measures the backend, not its clients: requests that make a healthy backend
//! answer 5xx (a body that is not JSON, a field of the wrong type) cannot eject it, however many a
//! client sends, while a backend that fails for everyone, its health check included, is ejected.
//! Scripted upstreams answer like llama.cpp's `llama-server` (a 500 with `"type":"server_error"`).

use crate::support;
use support::backend::{Backend, Script, Seen};
use support::ports::Refusing;
use support::{client, config_for, prom, start_proxy};
use tokenmeter::config::Config;
use tokenmeter::server::ServerHandle;

const CHAT: &str = "/v1/chat/completions";
const MALFORMED: &str = r#"{"model":"x","messages":["#;
/// Valid JSON that llama-server answers with a 500 ("Failed to parse tools").
const WRONG_TYPE: &str =
    r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"tools":5,"stream":true}"#;
const SERVER_ERROR: &str = r#"{"error":{"code":500,"message":"Failed to parse tools: Expected 'tools' to be an array, got 5","type":"server_error"}}"#;

/// Answers 500 to every request but `GET /health`, which answers `health_status`.
fn failing_requests(health_status: u16) -> impl Fn(&Seen) -> Script {
    move |seen: &Seen| {
        if seen.head.starts_with("GET /health ") {
            Script::json(health_status, r#"{"status":"ok"}"#)
        } else {
            Script::json(500, SERVER_ERROR)
        }
    }
}

fn config(backend: &Backend) -> Config {
    let mut config = config_for(&backend.url);
    config.routing.eject_after_failures = 3;
    config
}

fn requests_to(seen: &[Seen], prefix: &str) -> usize {
    seen.iter().filter(|s| s.head.starts_with(prefix)).count()
}

async fn drain(backend: &mut Backend, n: usize) -> Vec<Seen> {
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(backend.next_request().await);
    }
    seen
}

/// Sends ten `body`s to `path`, each answered `status` by the backend and passed on, and checks
/// the backend was neither ejected nor even checked (`why` says whose fault the answers were);
/// returns the proxy's metrics.
async fn never_held_against_the_backend(
    backend: &mut Backend,
    proxy: &ServerHandle,
    (path, body, status): (&str, &str, u16),
    why: &str,
) -> String {
    for _ in 0..10 {
        let answered = client::post(proxy.traffic_addr, path, body).await;
        assert_eq!(
            answered.status, status,
            "the backend's own answer is passed on"
        );
    }
    let seen = drain(backend, 10).await;
    assert_eq!(
        requests_to(&seen, "POST "),
        10,
        "every request reached the backend"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_ejections_total", &[]),
        0.0,
        "never ejected"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_health_confirmations_total", &[]),
        0.0,
        "not even a check: {why}"
    );
    text
}

#[tokio::test]
async fn malformed_bodies_never_count_against_the_backend() {
    let mut backend = Backend::start(failing_requests(200)).await;
    let proxy = start_proxy(config(&backend)).await;
    let text = never_held_against_the_backend(
        &mut backend,
        &proxy,
        (CHAT, MALFORMED, 500),
        "a body that is not JSON is the client's fault",
    )
    .await;
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_healthy", &[]),
        1.0,
        "still in rotation"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_route_decisions_total",
            &[("reason", "panic")]
        ),
        0.0,
        "no request was routed in panic mode"
    );
}

/// A backend that does not serve a path answers 501 Not Implemented (llama-server to
/// `POST /v1/embeddings` without `--embeddings`): the request's fault, as the meter counts it, not
/// a failure of the backend, so not even a confirming check.
#[tokio::test]
async fn not_implemented_never_counts_against_the_backend() {
    let mut backend = Backend::start(|_: &Seen| {
        Script::json(
            501,
            r#"{"error":{"code":501,"message":"This server does not support embeddings.","type":"not_supported_error"}}"#,
        )
    })
    .await;
    let proxy = start_proxy(config(&backend)).await;
    let text = never_held_against_the_backend(
        &mut backend,
        &proxy,
        ("/v1/embeddings", r#"{"input":"hi"}"#, 501),
        "a 501 says what the backend does not do, not that it failed",
    )
    .await;
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[("outcome", "client_error")]
        ),
        10.0,
        "counted as the client's, as the metrics table of docs/metering.md says"
    );
}

#[tokio::test]
async fn answer_failures_a_passing_health_check_disowns_do_not_eject() {
    let mut backend = Backend::start(failing_requests(200)).await;
    let proxy = start_proxy(config(&backend)).await;
    for round in 1..=3 {
        for _ in 0..3 {
            let answered = client::post(proxy.traffic_addr, CHAT, WRONG_TYPE).await;
            assert_eq!(answered.status, 500, "round {round}: passed on");
        }
        support::wait_for_metric(
            &proxy,
            "tokenmeter_backend_health_confirmations_total",
            &[("result", "kept")],
            f64::from(round),
        )
        .await;
    }
    // 9 requests and one check after each run of 3.
    let seen = drain(&mut backend, 12).await;
    assert_eq!(
        requests_to(&seen, "GET /health "),
        3,
        "one check per run of 3"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_ejections_total", &[]),
        0.0,
        "a client repeating a bad request cannot eject the backend"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_healthy", &[]),
        1.0,
        "in rotation"
    );
}

#[tokio::test]
async fn a_backend_that_fails_its_health_check_too_is_ejected() {
    let backend = Backend::start(failing_requests(503)).await;
    let proxy = start_proxy(config(&backend)).await;
    for _ in 0..3 {
        let answered = client::post(proxy.traffic_addr, CHAT, WRONG_TYPE).await;
        assert_eq!(answered.status, 500, "passed on");
    }
    support::wait_for_metric(&proxy, "tokenmeter_backend_ejections_total", &[], 1.0).await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_backend_health_confirmations_total",
            &[("result", "ejected")]
        ),
        1.0,
        "the check confirmed the failure"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_healthy", &[]),
        0.0,
        "out of rotation"
    );
}

#[tokio::test]
async fn without_a_health_endpoint_answers_alone_never_eject() {
    let backend = Backend::start(failing_requests(404)).await;
    let proxy = start_proxy(config(&backend)).await;
    for _ in 0..3 {
        client::post(proxy.traffic_addr, CHAT, WRONG_TYPE).await;
    }
    support::wait_for_metric(
        &proxy,
        "tokenmeter_backend_health_confirmations_total",
        &[("result", "unavailable")],
        1.0,
    )
    .await;
    assert_eq!(
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_backend_ejections_total",
            &[]
        ),
        0.0,
        "kept: nothing but the answers says it is broken"
    );
}

#[tokio::test]
async fn connection_failures_still_eject_outright() {
    // An address that refuses every connect, held for the whole test (a released port could be
    // taken by another test's listener).
    let closed = Refusing::new();
    let mut config = config_for(&closed.url());
    config.routing.eject_after_failures = 3;
    config.routing.retries = 0;
    let proxy = start_proxy(config).await;
    for _ in 0..3 {
        let answered = client::post(proxy.traffic_addr, CHAT, WRONG_TYPE).await;
        assert_eq!(answered.status, 502, "unreachable");
    }
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_ejections_total", &[]),
        1.0,
        "three refused connects eject at once, no check needed"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_health_confirmations_total", &[]),
        0.0,
        "no check"
    );
}
