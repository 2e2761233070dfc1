//! Native histograms and exemplars through a real Prometheus (Debian's 2.42, with
//! `--enable-feature=native-histograms,exemplar-storage`): two tokenmeter proxies, each in front
//! of a scripted backend whose TTFTs and inter-token gaps are laid out on a fine grid, driven by a
//! client that measures every first token and every gap itself. Then
//! - the fleet-wide `histogram_quantile(q, sum(rate(...[1m])))` over the native histograms is
//!   within 3 % of the client's exact quantiles, for TTFT and ITL, at p50, p90 and p99;
//! - `/api/v1/query_exemplars` returns the trace ids the client sent (and only those);
//! - the dashboards' latency quantiles and the rules' recorded quantiles have data from the native
//!   histograms alone (Prometheus 2.42 with the flag stores no classic buckets of them);
//! - the text exposition still counts every request in its classic series.
mod prometheus_support;
mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_support::exprs::dashboard_exprs;
use prometheus_support::process::Scratch;
use prometheus_support::prometheus::{has_data, Prometheus};
use prometheus_support::{dashboards, http, percentile, repo_path};
use support::backend::{Backend, Script};
use support::client::{self, Protocol};
use support::{config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
/// Requests per proxy, how many at once, and token events per request.
const REQUESTS: usize = 100;
const CONCURRENCY: usize = 20;
const TOKENS: usize = 4;
const TTFT: &str = "gen_ai_server_time_to_first_token_seconds";
const ITL: &str = "tokenmeter_inter_token_latency_seconds";

fn event(json: &str) -> Vec<u8> {
    format!("data: {json}\n\n").into_bytes()
}

/// Request `n` of a backend: first token after 100 + 2n ms (0 <= n < 100: a 2 ms grid up to
/// 298 ms; the two proxies' grids interleave by 1 ms), then gaps of 50-149 ms.
fn script(n: usize, offset_ms: u64) -> Script {
    let chunk = |delta: &str, finish: &str| {
        event(&format!(
            r#"{{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
        ))
    };
    let mut events = vec![(
        Duration::from_millis(100 + 2 * n as u64 + offset_ms),
        chunk(r#"{"content":"tok"}"#, "null"),
    )];
    for k in 1..TOKENS {
        let gap = 50 + ((3 * n + 17 * k + offset_ms as usize) % 100) as u64;
        events.push((
            Duration::from_millis(gap),
            chunk(r#"{"content":"tok"}"#, "null"),
        ));
    }
    events.push((Duration::ZERO, chunk("{}", r#""stop""#)));
    events.push((
        Duration::ZERO,
        event(&format!(
            r#"{{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":{TOKENS},"total_tokens":{}}}}}"#,
            TOKENS + 5
        )),
    ));
    events.push((Duration::ZERO, b"data: [DONE]\n\n".to_vec()));
    Script::sse(events)
}

/// What the client measured of one request: its TTFT and its gaps, in seconds.
#[derive(Default)]
struct Measured {
    ttft: Vec<f64>,
    itl: Vec<f64>,
}

async fn request(addr: SocketAddr, traceparent: Option<String>) -> Measured {
    let headers: Vec<(&str, &str)> = traceparent
        .as_deref()
        .map(|t| vec![("traceparent", t)])
        .unwrap_or_default();
    let mut stream = client::open_with(addr, Protocol::Http1, "POST", CHAT, BODY, &headers).await;
    let mut out = Measured::default();
    let mut last: Option<tokio::time::Instant> = None;
    while let Some(frame) = stream.next_frame().await {
        let (at, bytes) = frame.expect("a clean stream");
        // Each event arrives as its own frame (50 ms apart at least); count the token events.
        let tokens = bytes
            .windows(15)
            .filter(|w| w == br#""content":"tok""#)
            .count();
        for _ in 0..tokens {
            match last {
                None => out.ttft.push((at - stream.sent_at).as_secs_f64()),
                Some(previous) => out.itl.push((at - previous).as_secs_f64()),
            }
            last = Some(at);
        }
    }
    assert_eq!(
        out.ttft.len() + out.itl.len(),
        TOKENS,
        "every token arrived"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_quantiles_and_exemplars_through_a_real_prometheus() {
    let scratch = Scratch::new("prometheus-native");
    let mut proxies = Vec::new();
    for offset_ms in [0u64, 1] {
        let counter = Arc::new(AtomicUsize::new(0));
        let backend = Backend::start(move |_| {
            // The warm-up request is number 0 of each backend; the measured ones follow.
            let n = counter.fetch_add(1, Ordering::SeqCst);
            script(n.saturating_sub(1) % REQUESTS, offset_ms)
        })
        .await;
        let proxy = start_proxy(config_for(&backend.url)).await;
        proxies.push((backend, proxy));
    }
    // One warm-up request each, so both series exist before Prometheus' first sample of them.
    for (_, proxy) in &proxies {
        request(proxy.traffic_addr, None).await;
    }
    let targets: Vec<SocketAddr> = proxies.iter().map(|(_, p)| p.admin_addr).collect();
    let dir = scratch.path().to_owned();
    let prometheus = tokio::task::spawn_blocking(move || {
        let rules = repo_path("deploy/prometheus/tokenmeter-rules.yaml");
        Prometheus::start_with_features(
            &dir,
            &targets,
            &[&rules],
            &["native-histograms", "exemplar-storage"],
        )
    })
    .await
    .expect("Prometheus starts");
    let prometheus = Arc::new(prometheus);
    let ready = Arc::clone(&prometheus);
    tokio::task::spawn_blocking(move || {
        prometheus_support::process::wait_for(
            "both warm-up TTFTs in Prometheus",
            Duration::from_secs(30),
            || {
                let count = ready.scalar(&format!("sum(histogram_count({TTFT}))"))?;
                (count == 2.0).then_some(())
            },
        )
    })
    .await
    .expect("wait");

    // The measured load: REQUESTS per proxy, CONCURRENCY at once, each with its own trace.
    let sent = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let mut tasks = Vec::new();
    for (index, (_, proxy)) in proxies.iter().enumerate() {
        let next = Arc::new(AtomicUsize::new(0));
        for _ in 0..CONCURRENCY {
            let (next, sent, addr) = (Arc::clone(&next), Arc::clone(&sent), proxy.traffic_addr);
            tasks.push(tokio::spawn(async move {
                let mut measured = Measured::default();
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= REQUESTS {
                        break;
                    }
                    // Unique per request: the proxy's number and the request's.
                    let trace = format!("{:016x}{:016x}", index + 1, n + 1);
                    let one = request(addr, Some(format!("00-{trace}-00f067aa0ba902b7-01"))).await;
                    measured.ttft.extend(one.ttft);
                    measured.itl.extend(one.itl);
                    sent.lock().expect("sent").insert(trace);
                }
                measured
            }));
        }
    }
    let mut all = Measured::default();
    for task in tasks {
        let measured = task.await.expect("load task");
        all.ttft.extend(measured.ttft);
        all.itl.extend(measured.itl);
    }
    assert_eq!(all.ttft.len(), 2 * REQUESTS);
    assert_eq!(all.itl.len(), 2 * REQUESTS * (TOKENS - 1));
    // Until Prometheus has scraped every sample (both warm-ups and the measured requests).
    let scraped = Arc::clone(&prometheus);
    tokio::task::spawn_blocking(move || {
        prometheus_support::process::wait_for(
            "every TTFT in Prometheus",
            Duration::from_secs(30),
            || {
                let count = scraped.scalar(&format!("sum(histogram_count({TTFT}))"))?;
                (count == (2 * REQUESTS + 2) as f64).then_some(())
            },
        )
    })
    .await
    .expect("wait");

    let sent: BTreeSet<String> = sent.lock().expect("sent").clone();
    // For comparison only: the same quantiles from the classic buckets (both proxies' text).
    let text: String = proxies.iter().map(|(_, p)| p.metrics.render()).collect();
    let classic = tokenmeter::metrics::exposition::samples(&text);
    let checks = Arc::clone(&prometheus);
    tokio::task::spawn_blocking(move || {
        let prometheus = checks;
        for (name, samples) in [(TTFT, &mut all.ttft), (ITL, &mut all.itl)] {
            samples.sort_by(f64::total_cmp);
            for q in [0.5, 0.9, 0.99] {
                let exact = percentile(samples, q);
                let promql = format!("histogram_quantile({q}, sum(rate({name}[1m])))");
                let fleet = prometheus
                    .scalar(&promql)
                    .unwrap_or_else(|| panic!("{promql} has a value"));
                let error = (fleet - exact).abs() / exact;
                let buckets =
                    tokenmeter::metrics::exposition::histogram_quantile(&classic, name, &[], q)
                        .unwrap_or(f64::NAN);
                eprintln!(
                    "{name} p{}: native {fleet:.5} s, client {exact:.5} s ({:+.2} %); \
                     classic buckets {buckets:.5} s ({:+.2} %)",
                    q * 100.0,
                    (fleet - exact) / exact * 100.0,
                    (buckets - exact) / exact * 100.0
                );
                assert!(
                    error <= 0.03,
                    "{promql} = {fleet:.5} against the client's {exact:.5} ({:.2} %)",
                    error * 100.0
                );
            }
            // Every exemplar is a trace the client sent.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let path = format!(
                "/api/v1/query_exemplars?query={}&start={}&end={}",
                http::encode(name),
                now - 120,
                now + 5
            );
            let (status, body) = http::get(prometheus.addr, &path).expect("exemplars API");
            assert_eq!(status, 200, "{body}");
            let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            let traces: Vec<String> = json["data"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
                .filter_map(|e| e["labels"]["trace_id"].as_str().map(str::to_owned))
                .collect();
            assert!(!traces.is_empty(), "{name}: exemplars stored: {body}");
            for trace in &traces {
                assert!(sent.contains(trace), "{name}: {trace} was sent");
            }
        }
    })
    .await
    .expect("the checks");

    // The dashboards' latency quantiles and the recorded quantiles read the native histograms.
    let prometheus = Arc::clone(&prometheus);
    tokio::task::spawn_blocking(move || {
        let vars = &[
            ("__rate_interval", "1m"),
            ("model", ".+"),
            ("backend", ".+"),
            ("pool", ".+"),
        ];
        let mut checked = 0;
        for (name, dashboard) in dashboards() {
            for expr in dashboard_exprs(&name, &dashboard, vars) {
                let latency = [TTFT, ITL, "gen_ai_server_time_per_output_token_seconds"]
                    .iter()
                    .any(|metric| expr.promql.contains(metric));
                if latency && expr.promql.starts_with("histogram_quantile") {
                    let data = prometheus.query(&expr.promql);
                    assert!(
                        has_data(&data),
                        "{}: no data from native histograms",
                        expr.origin
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 9, "TTFT, ITL and TPOT at p50 / p90 / p99");
        prometheus_support::process::wait_for(
            "the recorded p99 TTFT",
            Duration::from_secs(20),
            || prometheus.scalar("model_pool:gen_ai_server_time_to_first_token_seconds:p99_5m"),
        );
    })
    .await
    .expect("dashboards and rules");

    // The text exposition (what classic scrapers read) counts every request, warm-up included.
    for (_, proxy) in &proxies {
        let text = proxy.metrics.render();
        assert_eq!(
            prom::sum(&text, &format!("{TTFT}_count"), &[]),
            (REQUESTS + 1) as f64
        );
    }
}
