//! Outcomes by who caused them, through a real Prometheus with the shipped rules: 20 % of the
//! clients' bodies are malformed, and the backend answers them as llama-server does (500,
//! `json.exception.parse_error.101`). In front of a healthy backend,
//! `pool_backend:tokenmeter_requests:upstream_error_ratio_rate5m` evaluates to exactly 0 and
//! `TokenmeterUpstreamErrors` is never pending; in front of a broken one (500 to every body it
//! reads), under the same load, scrapes and evaluations, the ratio is the broken share and the
//! alert is pending. The broken backend is the baseline that bounds the wait for the healthy
//! one's alert *not* to happen: by the time one alert is pending, the other has been evaluated on
//! the same samples.
//!
//! Needs Debian's `prometheus` package; takes about 10 s. The 60 s bounds are deadlines for what
//! Prometheus does every second (scrape, evaluate): they turn a hang into a failure and leave the
//! rest to a loaded 2-core machine.

use crate::prometheus_support;
use crate::support;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_support::process::{wait_for, Scratch};
use prometheus_support::prometheus::{has_data, Prometheus};
use prometheus_support::repo_path;
use support::backend::{Backend, Script, Seen};
use support::{client, config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;
/// One in five bodies: a chat body cut short, as a client with a bug sends it.
const MALFORMED: &str = r#"{"model":"m","messages":["#;
const PARSE_ERROR: &str = r#"{"error":{"code":500,"message":"[json.exception.parse_error.101] parse error at line 1, column 26: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal","type":"server_error"}}"#;
const RATIO: &str = "pool_backend:tokenmeter_requests:upstream_error_ratio_rate5m";
const ALERT: &str = "TokenmeterUpstreamErrors";

/// A stream of two tokens.
fn stream() -> Script {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
        .into_bytes()
    };
    Script::sse(vec![
        (Duration::ZERO, chunk(r#"{"content":"a"}"#, "null")),
        (Duration::ZERO, chunk(r#"{"content":"b"}"#, "null")),
        (Duration::ZERO, chunk("{}", r#""stop""#)),
        (Duration::ZERO, b"data: [DONE]\n\n".to_vec()),
    ])
}

/// llama-server's answer to a body that is not JSON; `broken` also fails every body it reads.
fn backend(broken: bool) -> impl Fn(&Seen) -> Script + Send + Sync + 'static {
    move |seen: &Seen| {
        if serde_json::from_slice::<serde_json::Value>(&seen.body).is_err() {
            Script::json(500, PARSE_ERROR)
        } else if broken {
            Script::json(
                500,
                r#"{"error":{"code":500,"message":"CUDA error: an illegal memory access was encountered","type":"server_error"}}"#,
            )
        } else {
            stream()
        }
    }
}

/// The alerts of `ALERT` Prometheus holds now, by their backend label.
fn active_alerts(prometheus: &Prometheus) -> Vec<(String, String)> {
    let rules = prometheus.rules();
    let mut out = Vec::new();
    for group in rules["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            if rule["name"] != ALERT {
                continue;
            }
            for alert in rule["alerts"].as_array().into_iter().flatten() {
                out.push((
                    alert["labels"]["backend"].as_str().unwrap_or("").to_owned(),
                    alert["state"].as_str().unwrap_or("").to_owned(),
                ));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_against_a_healthy_backend_page_nobody() {
    let scratch = Scratch::new("prometheus-outcomes");
    let healthy = Backend::start(backend(false)).await;
    let broken = Backend::start(backend(true)).await;
    let label = |backend: &Backend| backend.url.trim_start_matches("http://").to_owned();
    let (healthy_label, broken_label) = (label(&healthy), label(&broken));
    let proxies = [
        start_proxy(config_for(&healthy.url)).await,
        start_proxy(config_for(&broken.url)).await,
    ];
    let traffic: Vec<SocketAddr> = proxies.iter().map(|p| p.traffic_addr).collect();
    let targets: Vec<SocketAddr> = proxies.iter().map(|p| p.admin_addr).collect();

    // The load: rounds of five requests to each proxy, the first of each round malformed, every
    // 50 ms until the test has what it waits for.
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let mut rounds = 0u64;
            while !stop.load(Ordering::SeqCst) {
                for &addr in &traffic {
                    for i in 0..5 {
                        let body = if i == 0 { MALFORMED } else { BODY };
                        let answered = client::post(addr, CHAT, body).await;
                        assert!(answered.error.is_none(), "every answer ends cleanly");
                    }
                }
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            rounds
        }
    });

    let dir = scratch.path().to_owned();
    let prometheus = tokio::task::spawn_blocking(move || {
        let rules = repo_path("deploy/prometheus/tokenmeter-rules.yaml");
        Prometheus::start(&dir, &targets, &[&rules])
    })
    .await
    .expect("Prometheus starts");
    let prometheus = Arc::new(prometheus);
    let watched = Arc::clone(&prometheus);
    let (healthy_ratio, broken_ratio) = tokio::task::spawn_blocking({
        let (healthy_label, broken_label) = (healthy_label.clone(), broken_label.clone());
        move || {
            // The baseline: the broken backend's alert is pending.
            wait_for(
                "TokenmeterUpstreamErrors pending for the broken backend",
                Duration::from_secs(60),
                || {
                    active_alerts(&watched)
                        .contains(&(broken_label.clone(), "pending".to_owned()))
                        .then_some(())
                },
            );
            // Then the healthy backend's ratio, evaluated since, over a rate that is not zero.
            wait_for(
                "the healthy backend's ratio over its traffic",
                Duration::from_secs(60),
                || {
                    let traffic = watched.scalar(&format!(
                        r#"sum(rate(tokenmeter_requests_total{{backend="{healthy_label}"}}[5m]))"#
                    ))?;
                    let ratio =
                        watched.scalar(&format!(r#"{RATIO}{{backend="{healthy_label}"}}"#))?;
                    let broken =
                        watched.scalar(&format!(r#"{RATIO}{{backend="{broken_label}"}}"#))?;
                    // Recorded from samples with traffic in them (before those, 0 / 0).
                    (traffic > 0.0 && ratio.is_finite()).then_some((ratio, broken))
                },
            )
        }
    })
    .await
    .expect("wait");
    stop.store(true, Ordering::SeqCst);
    let rounds = load.await.expect("the load ran");

    assert_eq!(
        healthy_ratio, 0.0,
        "malformed bodies are not upstream errors: {RATIO} is 0 for the healthy backend"
    );
    assert!(
        broken_ratio > 0.05,
        "the broken backend's ratio is its failures' share (0.8): {broken_ratio}"
    );
    let alerts = active_alerts(&prometheus);
    assert!(
        alerts.iter().all(|(backend, _)| *backend == broken_label),
        "no alert for the healthy backend: {alerts:?}"
    );
    let ever = prometheus.query(&format!(
        r#"count_over_time(ALERTS{{alertname="{ALERT}",backend="{healthy_label}"}}[10m])"#
    ));
    assert!(
        !has_data(&ever),
        "never pending or firing for the healthy backend: {ever}"
    );
    // The healthy backend's malformed requests were scraped, as client errors: one in five.
    let counted = |outcome: &str| {
        prometheus
            .scalar(&format!(
                r#"sum(tokenmeter_requests_total{{backend="{healthy_label}",outcome="{outcome}"}})"#
            ))
            .unwrap_or(0.0)
    };
    let (client_errors, ok) = (counted("client_error"), counted("ok"));
    assert!(
        client_errors > 0.0 && ok >= 4.0 * (client_errors - 1.0),
        "the scraped malformed requests ({client_errors}) are client errors beside {ok} ok"
    );
    // And the proxy itself counted every one of them so, exactly.
    let text = proxies[0].metrics.render();
    let total =
        |outcome: &str| prom::sum(&text, "tokenmeter_requests_total", &[("outcome", outcome)]);
    assert_eq!(
        (total("client_error"), total("ok"), total("upstream_error")),
        (rounds as f64, 4.0 * rounds as f64, 0.0),
        "{rounds} rounds of one malformed and four good requests:\n{text}"
    );
}
