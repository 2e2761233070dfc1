//! Native histograms and exemplars through a real Prometheus (Debian's 2.42, with
//! `--enable-feature=native-histograms,exemplar-storage`), and beside it one without the flag
//! (classic buckets only), both scraping two tokenmeter proxies, each in front of a scripted
//! backend whose TTFTs and inter-token gaps are laid out on a fine grid, driven by a client that
//! stamps every frame. Then
//! - the fleet-wide `histogram_quantile(q, sum(rate(...)))` over the native histograms is within
//!   3 % (the buckets' resolution) of the proxies' exact quantiles, for TTFT and ITL, at p50, p90
//!   and p99. The proxies' exact values are bounded per request by what the backend wrote and the
//!   client read (`support::timeline`): a window a fraction of a millisecond wide on an idle
//!   machine, as wide as the delays a loaded one adds, so the check holds either way and still
//!   says the proxies' histograms, through Prometheus, give what the proxies measured;
//! - `/api/v1/query_exemplars` returns the trace ids the client sent (and only those);
//! - the dashboards' latency panels (quantiles and heatmaps) and the rules' recorded quantiles have
//!   data from the native histograms alone (Prometheus 2.42 with the flag stores no classic
//!   buckets of them), and from the classic buckets alone on the Prometheus without the flag;
//! - the text exposition still counts every request in its classic series.
//!
//! Each `wait_for` bound (20-30 s) is a deadline for what Prometheus does every second (scrape,
//! evaluate): it turns a hang into a failure and leaves the rest to a loaded 2-core machine.

use crate::prometheus_support;
use crate::support;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_support::exprs::{dashboard_exprs, histogram_forms, NATIVE_HISTOGRAMS};
use prometheus_support::process::Scratch;
use prometheus_support::prometheus::{has_data, Prometheus, Storage};
use prometheus_support::{dashboards, http, percentile, repo_path};
use support::backend::{Backend, Report, Script, Seen};
use support::client::{self, Protocol, Streamed};
use support::timeline::{self, Window};
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
/// 298 ms; the two proxies' grids interleave by 1 ms), then gaps of 50-149 ms. Its chunks carry
/// `id` (the request's trace), so the backend's log of writes tells whose each is.
fn script(n: usize, offset_ms: u64, id: &str) -> Script {
    let chunk = |delta: &str, finish: &str| {
        event(&format!(
            r#"{{"id":"{id}","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
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

/// What a token chunk holds.
const TOKEN: &[u8] = br#""content":"tok""#;

/// The trace id in a `traceparent` of version 00.
fn trace_of(traceparent: &str) -> &str {
    &traceparent[3..35]
}

/// One request, read to its end with every frame stamped.
async fn request(addr: SocketAddr, traceparent: Option<String>) -> Streamed {
    let headers: Vec<(&str, &str)> = traceparent
        .as_deref()
        .map(|t| vec![("traceparent", t)])
        .unwrap_or_default();
    let streamed = client::open_with(addr, Protocol::Http1, "POST", CHAT, BODY, &headers)
        .await
        .collect()
        .await;
    assert!(streamed.error.is_none(), "a clean stream");
    assert_eq!(
        streamed
            .bytes()
            .windows(TOKEN.len())
            .filter(|w| *w == TOKEN)
            .count(),
        TOKENS,
        "every token arrived"
    );
    streamed
}

/// The client's own figures of one request, for comparison only (its TTFT from sending, its gaps
/// between the frames that brought token events).
fn client_figures(streamed: &Streamed) -> Measured {
    let mut out = Measured::default();
    let mut last: Option<tokio::time::Instant> = None;
    for (at, bytes) in &streamed.frames {
        let tokens = bytes.windows(TOKEN.len()).filter(|w| *w == TOKEN).count();
        for _ in 0..tokens {
            match last {
                None => out.ttft.push((*at - streamed.sent_at).as_secs_f64()),
                Some(previous) => out.itl.push((*at - previous).as_secs_f64()),
            }
            last = Some(*at);
        }
    }
    out
}

/// The windows the proxy's TTFT and inter-token gaps of one request lie in, from what the client
/// saw of it, the request the backend read, and the backend's writes of its token chunks.
fn proxy_windows(
    streamed: &Streamed,
    seen: &Seen,
    writes: &[support::backend::Wrote],
) -> (Window, Vec<Window>) {
    assert_eq!(writes.len(), TOKENS, "the backend wrote every token chunk");
    let start = timeline::request_start(streamed, seen);
    let arrivals = timeline::arrivals(writes, streamed);
    let ttft = Window::between(start, arrivals[0]);
    let itl = arrivals
        .windows(2)
        .map(|pair| Window::between(pair[0], pair[1]))
        .collect();
    (ttft, itl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_quantiles_and_exemplars_through_a_real_prometheus() {
    let scratch = Scratch::new("prometheus-native");
    let mut proxies = Vec::new();
    for offset_ms in [0u64, 1] {
        let counter = Arc::new(AtomicUsize::new(0));
        let backend = Backend::start(move |seen: &Seen| {
            // The warm-up request is number 0 of each backend; the measured ones follow.
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let traceparent = seen.header("traceparent");
            let id = traceparent.as_deref().map_or("c", trace_of);
            script(n.saturating_sub(1) % REQUESTS, offset_ms, id)
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
    // The native one (with exemplars) first: the precise checks below read it; the classic one
    // beside it gets the same load, for the dashboards' and rules' other storage.
    let (prometheus, classic) = tokio::task::spawn_blocking(move || {
        let rules = repo_path("deploy/prometheus/tokenmeter-rules.yaml");
        let native = Prometheus::start_storing(
            &dir,
            Storage::Native,
            &targets,
            &[&rules],
            &["exemplar-storage"],
        );
        let classic = Prometheus::start_storing(&dir, Storage::Classic, &targets, &[&rules], &[]);
        (native, classic)
    })
    .await
    .expect("Prometheus starts");
    // Every sample Prometheus has of the series comes after this (the warm-ups are in the first).
    let scraping_since = std::time::Instant::now();
    let (prometheus, classic) = (Arc::new(prometheus), Arc::new(classic));
    let both = [
        (Storage::Native, Arc::clone(&prometheus)),
        (Storage::Classic, Arc::clone(&classic)),
    ];
    wait_for_ttft_count(&both, 2, "both warm-up TTFTs").await;

    // The measured load: REQUESTS per proxy, CONCURRENCY at once, each with its own trace.
    let load_started = unix_seconds();
    let mut tasks = Vec::new();
    for (index, (_, proxy)) in proxies.iter().enumerate() {
        let next = Arc::new(AtomicUsize::new(0));
        for _ in 0..CONCURRENCY {
            let (next, addr) = (Arc::clone(&next), proxy.traffic_addr);
            tasks.push(tokio::spawn(async move {
                let mut streams = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= REQUESTS {
                        break;
                    }
                    // Unique per request: the proxy's number and the request's.
                    let trace = format!("{:016x}{:016x}", index + 1, n + 1);
                    let one = request(addr, Some(format!("00-{trace}-00f067aa0ba902b7-01"))).await;
                    streams.push((index, trace, one));
                }
                streams
            }));
        }
    }
    let mut streams = Vec::new();
    for task in tasks {
        streams.extend(task.await.expect("load task"));
    }
    assert_eq!(streams.len(), 2 * REQUESTS, "every request answered");
    let sent: BTreeSet<String> = streams.iter().map(|(_, trace, _)| trace.clone()).collect();

    // What each backend read and wrote, by trace: every request of the load has been answered, so
    // it has been reported, and all its chunks written.
    let mut seen = BTreeMap::new();
    let mut token_writes: BTreeMap<String, Vec<support::backend::Wrote>> = BTreeMap::new();
    for (backend, _) in &mut proxies {
        while let Ok(report) = backend.reports.try_recv() {
            if let Report::Request(request) = report {
                if let Some(traceparent) = request.header("traceparent") {
                    seen.insert(trace_of(&traceparent).to_owned(), request);
                }
            }
        }
        for write in backend.writes() {
            let text = String::from_utf8_lossy(&write.bytes).into_owned();
            let is_token = write.bytes.windows(TOKEN.len()).any(|w| w == TOKEN);
            let trace = text
                .split_once(r#""id":""#)
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(id, _)| id.to_owned());
            if let (true, Some(trace)) = (is_token, trace) {
                token_writes.entry(trace).or_default().push(write);
            }
        }
    }
    // The proxies' figures, each within its window; the client's, for comparison.
    let (mut ttft_windows, mut itl_windows) = (Vec::new(), Vec::new());
    let mut all = Measured::default();
    for (_, trace, streamed) in &streams {
        let request = seen.get(trace).expect("the backend read the request");
        let (ttft, itl) = proxy_windows(streamed, request, &token_writes[trace]);
        ttft_windows.push(ttft);
        itl_windows.extend(itl);
        let client = client_figures(streamed);
        all.ttft.extend(client.ttft);
        all.itl.extend(client.itl);
    }
    assert_eq!(ttft_windows.len(), 2 * REQUESTS, "a TTFT per request");
    assert_eq!(
        itl_windows.len(),
        2 * REQUESTS * (TOKENS - 1),
        "a gap between each two tokens"
    );
    // Until both Prometheus have scraped every sample (both warm-ups and the measured requests).
    wait_for_ttft_count(&both, 2 * REQUESTS + 2, "every TTFT").await;
    // A rate over every sample since Prometheus started: its first holds only the warm-ups, so the
    // increase is exactly the measured load's, however long a loaded machine took to get here (a
    // fixed 1m window would lose the load's start once the test is that slow).
    let window = format!("{}s", (scraping_since.elapsed().as_secs() + 10).max(60));
    let checks = Arc::clone(&prometheus);
    let classic_checks = Arc::clone(&classic);
    let checks_window = window.clone();
    tokio::task::spawn_blocking(move || {
        let (prometheus, classic, window) = (checks, classic_checks, checks_window);
        for (name, samples, windows) in [
            (TTFT, &mut all.ttft, &ttft_windows),
            (ITL, &mut all.itl, &itl_windows),
        ] {
            samples.sort_by(f64::total_cmp);
            // Each proxy figure lies in its window, so its quantile lies between the quantiles of
            // the windows' lower ends and of their upper ends (a percentile grows with each sample).
            let mut lows: Vec<f64> = windows.iter().map(|w| w.low).collect();
            let mut highs: Vec<f64> = windows.iter().map(|w| w.high).collect();
            lows.sort_by(f64::total_cmp);
            highs.sort_by(f64::total_cmp);
            for q in [0.5, 0.9, 0.99] {
                let (low, high) = (percentile(&lows, q), percentile(&highs, q));
                let client = percentile(samples, q);
                let promql = format!("histogram_quantile({q}, sum(rate({name}[{window}])))");
                let fleet = prometheus
                    .scalar(&promql)
                    .unwrap_or_else(|| panic!("{promql} has a value"));
                // For comparison only: the same quantile from the classic buckets.
                let buckets = classic
                    .scalar(&format!(
                        "histogram_quantile({q}, sum by (le) (rate({name}_bucket[{window}])))"
                    ))
                    .unwrap_or(f64::NAN);
                eprintln!(
                    "{name} p{}: native {fleet:.5} s, the proxies' [{low:.5}, {high:.5}] s; \
                     client {client:.5} s ({:+.2} %); classic buckets {buckets:.5} s ({:+.2} %)",
                    q * 100.0,
                    (fleet - client) / client * 100.0,
                    (buckets - client) / client * 100.0
                );
                // 3 %: a native bucket of schema 5 is 2.2 % wide, and the quantile is interpolated
                // within one.
                assert!(
                    low * 0.97 <= fleet && fleet <= high * 1.03,
                    "{promql} = {fleet:.5}, not within 3 % of the proxies' exact quantile, which \
                     lies in [{low:.5}, {high:.5}] (the client saw {client:.5})"
                );
            }
            // Every exemplar is a trace the client sent (each taken while the load ran).
            let path = format!(
                "/api/v1/query_exemplars?query={}&start={}&end={}",
                http::encode(name),
                load_started - 1,
                unix_seconds() + 1
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

    // The dashboards' latency panels and the recorded quantiles read the native histograms on
    // one, the classic buckets on the other: each stores only its own form of them.
    tokio::task::spawn_blocking(move || {
        let vars = &[
            ("__rate_interval", window.as_str()),
            ("model", ".+"),
            ("backend", ".+"),
            ("pool", ".+"),
        ];
        for (storage, prometheus) in &both {
            let classic_ttft = has_data(&prometheus.query(&format!("{TTFT}_bucket")));
            assert_eq!(
                classic_ttft,
                *storage == Storage::Classic,
                "{storage:?}: TTFT's classic buckets stored"
            );
            let mut checked = 0;
            for (name, dashboard) in dashboards() {
                for expr in dashboard_exprs(&name, &dashboard, vars) {
                    let latency = NATIVE_HISTOGRAMS
                        .iter()
                        .any(|family| histogram_forms(&expr.promql, family).any());
                    if latency {
                        let data = prometheus.query(&expr.promql);
                        assert!(has_data(&data), "{storage:?}: {}: no data", expr.origin);
                        checked += 1;
                    }
                }
            }
            assert_eq!(
                checked, 13,
                "{storage:?}: TTFT, ITL and TPOT at p50 / p90 / p99, E2E at p50 / p99, the TTFT \
                 and ITL heatmaps"
            );
            prometheus_support::process::wait_for(
                &format!("the recorded p99 TTFT ({storage:?})"),
                Duration::from_secs(20),
                || prometheus.scalar("model_pool:gen_ai_server_time_to_first_token_seconds:p99_5m"),
            );
        }
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

/// Waits until each Prometheus counts `want` TTFTs, in the form its storage keeps them.
async fn wait_for_ttft_count(servers: &[(Storage, Arc<Prometheus>); 2], want: usize, what: &str) {
    for (storage, prometheus) in servers.clone() {
        let what = format!("{what} in Prometheus ({storage:?})");
        tokio::task::spawn_blocking(move || {
            let count = if storage.has_native() {
                format!("sum(histogram_count({TTFT}))")
            } else {
                format!("sum({TTFT}_count)")
            };
            prometheus_support::process::wait_for(&what, Duration::from_secs(30), || {
                (prometheus.scalar(&count)? == want as f64).then_some(())
            })
        })
        .await
        .expect("wait");
    }
}

/// The wall clock in whole seconds since the Unix epoch (Prometheus' API takes them).
fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
