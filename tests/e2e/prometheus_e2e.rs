//! The dashboards and rules against real Prometheus servers: two tokenmeter sidecars, each in front
//! of a simulated vLLM replica (the second also hands long prompts' prefills to a second replica),
//! scraped every second by three Prometheus while `tokenmeter bench` drives both: one stores the
//! histograms as classic buckets (the text format, no flag), one the latency histograms as native
//! histograms only (`--enable-feature=native-histograms`, which on 2.42 keeps no `_bucket`, `_sum`
//! or `_count` series of a histogram that has native buckets), and one both forms (as 2.45 and
//! later do with `scrape_classic_histograms`; here the classic series are federated from the first,
//! [`Storage::Both`]). Then, on each,
//! - it stores the forms it should: native histograms of exactly the families in
//!   [`NATIVE_HISTOGRAMS`], and their classic series, or not;
//! - Prometheus' fleet-wide p50/p99 TTFT (`histogram_quantile` over the summed histograms) agrees,
//!   within the bucket resolution, with the percentiles of the TTFTs the sidecars measured, request
//!   by request (their usage records); and those never exceed what bench's clients saw (each
//!   request's TTFT at the proxy lies within the client's, so every order statistic does too).
//!   No allowance for how late a client sees its first token: on a loaded machine that is
//!   anything, and neither check needs it;
//! - every rule loads healthy, and every PromQL expression of `dashboards/*.json` and
//!   `deploy/prometheus/tokenmeter-rules.yaml`, and what the autoscalers of
//!   `deploy/kubernetes/autoscaling/` ask, returns data (so no typo'd metric or label survives,
//!   and no panel, variable or rule reads a form of a histogram that this storage lacks), except
//!   those on the routing series listed in [`ROUTING_PENDING`]; and each heatmap gets one form of
//!   its histogram, the native one wherever it is stored.
//!
//! The Prometheus scrape the same sidecars through the same load, so each further storage costs a
//! process, not a second run. Needs Debian's `prometheus` package (`/usr/bin/prometheus`); takes
//! about 25 s. Each `wait_for`
//! bound (15-20 s) is a deadline for something done within a second or two (a start, a scrape
//! every second, a rule evaluation every second, a usage flush every second): it turns a hang into
//! a failure and leaves the rest to a loaded 2-core machine.

use crate::prometheus_support;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use prometheus_support::exprs::{
    all_panels, autoscaler_exprs, dashboard_exprs, rule_exprs, substitute_grafana, Expr,
    NATIVE_HISTOGRAMS,
};
use prometheus_support::process::{free_addr, wait_for, Proc, Scratch, TOKENMETER};
use prometheus_support::prometheus::{has_data, Prometheus, Storage};
use prometheus_support::{dashboards, http, percentile, repo_path};

/// Series that only exist once request routing lands (pools, health, the prompt estimate): an
/// expression mentioning one of these may return no data yet. Nothing else is excused. Empty this
/// list when routing is merged; the test fails while an entry here has data, to say so.
const ROUTING_PENDING: &[&str] = &[];

/// What Grafana's variables become. `.+` (not the dashboards' "All" = `.*`) for labels that exist,
/// so a typo'd label name in a matcher selects nothing instead of matching its empty value. `pool`
/// stays `.*` until routing lands; then make it `.+` too.
const VARIABLES: &[(&str, &str)] = &[
    ("__rate_interval", "1m"),
    ("model", ".+"),
    ("backend", ".+"),
    ("pool", ".+"),
];

/// Sidecar 1 prefills prompts of this many tokens or more on its prefill replica; bench's prompts
/// are uniform over 50-300 tokens, so about half are handed off.
const HANDOFF_MIN_PROMPT_TOKENS: u64 = 175;

/// Requests each bench sends through its sidecar (4 in flight, 16 output tokens each).
const REQUESTS_PER_SIDECAR: u64 = 100;
/// The replicas run 4x slower than the modelled H100: TTFTs of ~100-200 ms, where buckets are
/// 50 ms wide and the client's scheduling noise is small beside them, and 4x fewer events per second
/// competing for CI's two cores. (Decode steps of ~28 ms also make some requests miss the 35 ms
/// TPOT SLO, so the "missed" series exist too.)
const SIM_TIME_SCALE: f64 = 4.0;

struct Sidecar {
    /// The simulated replicas, and the Redis of sidecar 1's budgets and fleet.
    _sims: Vec<Proc>,
    proxy: Proc,
    traffic: SocketAddr,
    admin: SocketAddr,
    /// Its usage records (`[tenants.usage]`): one line per finished request, with its TTFT.
    usage: std::path::PathBuf,
}

/// Starts a simulated replica on a free port and waits for its `/health`.
fn start_sim(name: &str, dir: &std::path::Path) -> (Proc, SocketAddr) {
    let addr = free_addr();
    let mut sim = Command::new(TOKENMETER);
    // Reporting cached prompt tokens, as vLLM does with this flag: the prompt-cache panels.
    sim.args(["sim", "--profile", "llama-3.1-8b-h100", "--time-scale"])
        .arg(SIM_TIME_SCALE.to_string())
        .arg("--enable-prompt-tokens-details")
        .arg("--listen")
        .arg(addr.to_string());
    let sim = Proc::spawn(name, sim, dir);
    wait_for("simulated replica /health", Duration::from_secs(20), || {
        matches!(http::get(addr, "/health"), Some((200, _))).then_some(())
    });
    (sim, addr)
}

/// Starts Debian's redis-server (no persistence) on a free port and waits for its PONG.
fn start_redis(name: &str, dir: &std::path::Path) -> (Proc, SocketAddr) {
    let addr = free_addr();
    let mut redis = Command::new("redis-server");
    redis
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--port")
        .arg(addr.port().to_string())
        .arg("--dir")
        .arg(dir);
    let redis = Proc::spawn(name, redis, dir);
    wait_for("redis-server PONG", Duration::from_secs(20), || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).ok()?;
        stream.write_all(b"PING\r\n").ok()?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).ok()?;
        (&reply == b"+PONG\r\n").then_some(())
    });
    (redis, addr)
}

/// Sidecar 0 fronts one replica (a pool named `default`, placing by predicted latency behind a
/// gateway queue). Sidecar 1 disaggregates: prompts of [`HANDOFF_MIN_PROMPT_TOKENS`] or more are
/// prefilled on a second replica and decoded on the first (vLLM's protocol, which the simulator
/// speaks), the rest prefill where they decode: the disaggregation panels and rules get both kinds
/// of result.
fn start_sidecar(index: usize, dir: &std::path::Path) -> Sidecar {
    let (decode_sim, decode_addr) = start_sim(&format!("sim-{index}"), dir);
    let usage = dir.join(format!("usage-{index}.jsonl"));
    let usage_toml = format!("\n[tenants.usage]\npath = \"{}\"\n", usage.display());
    let traffic = free_addr();
    let admin = free_addr();
    let mut serve = Command::new(TOKENMETER);
    serve
        .arg("serve")
        .env("TOKENMETER_LISTEN", traffic.to_string())
        .env("TOKENMETER_ADMIN_LISTEN", admin.to_string())
        // Tracing on, to a collector that is not there: the spans' series exist (the drop alert
        // returns data) and metering goes on regardless.
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{}", free_addr()),
        )
        .env("OTEL_TRACES_SAMPLER_ARG", "0.2");
    let mut sims = vec![decode_sim];
    if index == 1 {
        let (prefill_sim, prefill_addr) = start_sim(&format!("sim-{index}-prefill"), dir);
        sims.push(prefill_sim);
        let config = dir.join(format!("tokenmeter-{index}.toml"));
        let toml = format!(
            r#"[[pools]]
name = "prefill"
urls = ["http://{prefill_addr}"]
balance = "prompt_tokens"

[[pools]]
name = "decode"
urls = ["http://{decode_addr}"]

[pools.handoff]
prefill_pool = "prefill"
protocol = "vllm"
min_prompt_tokens = {HANDOFF_MIN_PROMPT_TOKENS}

[[rules]]
pool = "decode"

# Tenants on (the load generator names none: all anonymous), so the tenants row has data.
[tenants]
sources = ["header"]

# Budgets kept in Redis (TOKENMETER_BUDGET_STORE): the load's anonymous requests stay well inside
# theirs; the test sends tenant "capped" over its own, so the budget panels and rules have data.
[tenants.budgets.default]
tokens_per_day = 1000000000

[tenants.budgets.tenant.capped]
requests_per_minute = 1
{usage_toml}"#
        );
        std::fs::write(&config, toml).expect("write the disaggregated config");
        serve.arg("--config").arg(&config);
        let (redis, redis_addr) = start_redis("redis-1", dir);
        sims.push(redis);
        serve.env("TOKENMETER_BUDGET_STORE", format!("redis://{redis_addr}/0"));
        // The same Redis as a fleet's store (a fleet of one), so the fleet's series have data.
        serve.env("TOKENMETER_FLEET_STORE", format!("redis://{redis_addr}/0"));
    } else {
        // Placement by predicted latency, gated (the placement and queue series exist); a request
        // that cannot meet its TTFT target is sent late, never shed, so every bench request is
        // served. A gap target, so that the gap SLO's series (and its alerts' expressions) have
        // data.
        let config = dir.join(format!("tokenmeter-{index}.toml"));
        let toml = format!(
            r#"[slo]
max_gap = "250ms"

[[pools]]
name = "default"
urls = ["http://{decode_addr}"]
balance = "slo"

[pools.queue]
on_deadline = "send"
{usage_toml}"#
        );
        std::fs::write(&config, toml).expect("write the gated config");
        serve.arg("--config").arg(&config);
        // A fleet of one on a Redis of its own, so the fleet's designation series has data (its
        // pool designates prefill-heavy replicas; sidecar 1's pools do not).
        let (redis, redis_addr) = start_redis("redis-0", dir);
        sims.push(redis);
        serve.env("TOKENMETER_FLEET_STORE", format!("redis://{redis_addr}/0"));
    }
    let proxy = Proc::spawn(&format!("tokenmeter-{index}"), serve, dir);
    wait_for("tokenmeter /readyz", Duration::from_secs(20), || {
        matches!(http::get(admin, "/readyz"), Some((200, _))).then_some(())
    });
    Sidecar {
        _sims: sims,
        proxy,
        traffic,
        admin,
        usage,
    }
}

/// The TTFT (seconds) of every request with one in the sidecars' usage records, sorted; `None`
/// until there are `want` (the records reach the file within a flush interval, 1 s).
fn proxy_ttfts(sidecars: &[Sidecar], want: usize) -> Option<Vec<f64>> {
    let mut ttfts: Vec<f64> = sidecars
        .iter()
        .flat_map(|sidecar| {
            std::fs::read_to_string(&sidecar.usage)
                .unwrap_or_default()
                .lines()
                // A line being written is not JSON yet; the next look has it whole.
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter_map(|record| record["ttft_ms"].as_f64())
                .map(|ms| ms / 1e3)
                .collect::<Vec<_>>()
        })
        .collect();
    ttfts.sort_by(f64::total_cmp);
    (ttfts.len() == want).then_some(ttfts)
}

/// Runs one bench per sidecar, both at once; returns each one's JSON report.
fn drive_load(sidecars: &[Sidecar], dir: &std::path::Path) -> Vec<Value> {
    let mut benches = Vec::new();
    for (index, sidecar) in sidecars.iter().enumerate() {
        let json = dir.join(format!("bench-{index}.json"));
        let mut bench = Command::new(TOKENMETER);
        bench
            .arg("bench")
            .arg("--url")
            .arg(format!("http://{}", sidecar.traffic))
            .args(["--concurrency", "4", "--requests"])
            .arg(REQUESTS_PER_SIDECAR.to_string())
            .args([
                "--prompt-tokens",
                "uniform:50-300",
                "--output-tokens",
                "fixed:16",
            ])
            .args([
                "--seed",
                &index.to_string(),
                "--timeout",
                "30s",
                "--raw",
                "--json",
            ])
            .arg(&json);
        benches.push((Proc::spawn(&format!("bench-{index}"), bench, dir), json));
    }
    benches
        .into_iter()
        .map(|(mut proc, json)| {
            let status = proc.wait(Duration::from_secs(120));
            assert!(
                status.success(),
                "bench failed: {status}\n{}",
                proc.log_tail()
            );
            let text = std::fs::read_to_string(&json).expect("bench wrote its JSON");
            serde_json::from_str(&text).expect("bench JSON parses")
        })
        .collect()
}

/// The TTFT of every successful request of every report, sorted.
fn client_ttfts(reports: &[Value]) -> Vec<f64> {
    let mut ttfts: Vec<f64> = reports
        .iter()
        .flat_map(|report| {
            report["points"][0]["requests"]
                .as_array()
                .expect("--raw request records")
                .iter()
        })
        .filter(|request| request["outcome"] == "ok")
        .map(|request| request["ttft_s"].as_f64().expect("ok request has a TTFT"))
        .collect();
    ttfts.sort_by(f64::total_cmp);
    ttfts
}

const TTFT: &str = "gen_ai_server_time_to_first_token_seconds";

/// The bucket `(lower, upper]` of `edges` (sorted `le` values, +Inf last) that holds `value`.
fn bucket_of(edges: &[f64], value: f64) -> (f64, f64) {
    let upper = edges
        .iter()
        .position(|&edge| value <= edge)
        .expect("+Inf holds everything");
    let lower = if upper == 0 { 0.0 } else { edges[upper - 1] };
    (lower, edges[upper])
}

/// The `le` edges of the fleet-wide TTFT histogram, sorted, as Prometheus stores them.
fn ttft_edges(prometheus: &Prometheus) -> Vec<f64> {
    let data = prometheus.query("sum by (le) (gen_ai_server_time_to_first_token_seconds_bucket)");
    let mut edges: Vec<f64> = data["result"]
        .as_array()
        .expect("vector")
        .iter()
        .map(|sample| {
            let le = sample["metric"]["le"].as_str().expect("le label");
            if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("numeric le")
            }
        })
        .collect();
    edges.sort_by(f64::total_cmp);
    edges
}

/// A range that holds the native bucket of `value`: a schema-5 bucket spans a factor of 2^(1/32),
/// so the one holding `value` lies within a factor of 2^(1/32) of it either way.
fn native_bucket_around(value: f64) -> (f64, f64) {
    let width = 2f64.powf(1.0 / 32.0);
    (value / width, value * width)
}

/// Prometheus' fleet-wide quantile must lie in the bucket range spanned by the sidecars' own
/// samples (`proxy`, sorted) that either definition of the quantile can land on (bench
/// interpolates at rank (n-1)q, histogram_quantile picks the bucket of rank qn): the histograms
/// Prometheus summed hold exactly these samples. Classic buckets are the `le` edges of `edges`,
/// native ones those of schema 5.
fn assert_quantile_agrees(
    prometheus: &Prometheus,
    storage: Storage,
    edges: &[f64],
    proxy: &[f64],
    clients: &[f64],
    q: f64,
) {
    let promql = if storage.has_native() {
        format!("histogram_quantile({q}, sum({TTFT}))")
    } else {
        format!("histogram_quantile({q}, sum by (le) ({TTFT}_bucket))")
    };
    let server = prometheus
        .scalar(&promql)
        .unwrap_or_else(|| panic!("{storage:?}: no fleet-wide TTFT p{}", q * 100.0));
    let n = proxy.len();
    let first = ((n - 1) as f64 * q).floor() as usize;
    let last = (((n as f64) * q).ceil() as usize).clamp(1, n) - 1;
    let (low_sample, high_sample) = (proxy[first.min(last)], proxy[first.max(last)]);
    let bucket = |value| {
        if storage.has_native() {
            native_bucket_around(value)
        } else {
            bucket_of(edges, value)
        }
    };
    let (lower, _) = bucket(low_sample);
    let (_, upper) = bucket(high_sample);
    let measured = percentile(proxy, q);
    let client = percentile(clients, q);
    assert!(
        (lower..=upper).contains(&server),
        "{storage:?}: TTFT p{}: Prometheus says {server:.4} s, the sidecars measured \
         {measured:.4} s (samples {low_sample:.4}..{high_sample:.4}): outside the buckets \
         ({lower}, {upper}]",
        q * 100.0
    );
    eprintln!(
        "TTFT p{} ({}): Prometheus {:.1} ms, sidecars {:.1} ms, bench's clients {:.1} ms, bucket \
         range ({:.1}, {:.1}] ms",
        q * 100.0,
        storage.name(),
        server * 1e3,
        measured * 1e3,
        client * 1e3,
        lower * 1e3,
        upper * 1e3
    );
}

/// The storage holds the latency histograms in its forms: as native histograms, exactly the
/// families of [`NATIVE_HISTOGRAMS`] (and no other native histogram); as classic ones, their
/// `_bucket`, `_sum` and `_count` series.
fn assert_stores_its_forms(prometheus: &Prometheus, storage: Storage) {
    let native = prometheus.native_histogram_names(r#"{job="tokenmeter"}"#);
    let expected: std::collections::BTreeSet<String> = if storage.has_native() {
        NATIVE_HISTOGRAMS.iter().map(|f| f.to_string()).collect()
    } else {
        Default::default()
    };
    assert_eq!(
        native, expected,
        "{storage:?}: the series stored as native histograms"
    );
    for family in NATIVE_HISTOGRAMS {
        let classic = format!(r#"{{__name__=~"{family}_(bucket|sum|count)"}}"#);
        assert_eq!(
            has_data(&prometheus.query(&classic)),
            storage.has_classic(),
            "{storage:?}: classic series of {family}"
        );
    }
}

/// Each heatmap's query gives Grafana one form of its histogram: native histograms wherever they
/// are stored (also where the classic buckets are too), the `le` series otherwise. A mix would
/// leave the heatmap panel to draw one frame and drop the other.
fn assert_heatmaps_get_one_form(prometheus: &Prometheus, storage: Storage) {
    let mut heatmaps = 0;
    for (name, dashboard) in dashboards() {
        for panel in all_panels(&dashboard) {
            if panel["type"] != "heatmap" {
                continue;
            }
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().expect("a PromQL target");
                let promql = substitute_grafana(expr, VARIABLES);
                let data = prometheus.query(&promql);
                let samples = data["result"].as_array().cloned().unwrap_or_default();
                let native = samples
                    .iter()
                    .filter(|s| s.get("histogram").is_some())
                    .count();
                let buckets = samples
                    .iter()
                    .filter(|s| s["metric"]["le"].is_string())
                    .count();
                let title = &panel["title"];
                if storage.has_native() {
                    assert!(
                        native == 1 && buckets == 0,
                        "{storage:?}: {name}: heatmap {title}: one native histogram, no buckets: \
                         {samples:?}"
                    );
                } else {
                    assert!(
                        native == 0 && buckets > 1 && buckets == samples.len(),
                        "{storage:?}: {name}: heatmap {title}: only `le` series: {samples:?}"
                    );
                }
                heatmaps += 1;
            }
        }
    }
    assert_eq!(heatmaps, 2, "the TTFT and ITL heatmaps");
}

/// Each request's TTFT at its sidecar lies within its client's (the sidecar starts timing after
/// the client sent the request and sees the first token before the client does), so the k-th
/// smallest of the sidecars' is at most the k-th smallest of the clients', for every k. Holds
/// however late a loaded machine lets the clients see their tokens.
fn assert_within_the_clients(proxy: &[f64], clients: &[f64]) {
    assert_eq!(proxy.len(), clients.len(), "one TTFT each side per request");
    for (k, (at_proxy, at_client)) in proxy.iter().zip(clients).enumerate() {
        // (The records round to the nanosecond, in milliseconds.)
        assert!(
            *at_proxy <= at_client + 1e-6,
            "the {k}-th smallest TTFT: {at_proxy:.6} s at the sidecars, more than the clients' \
             {at_client:.6} s"
        );
    }
    let n = proxy.len() as f64;
    eprintln!(
        "the clients saw their first token {:.1} ms after the sidecars, on average",
        (clients.iter().sum::<f64>() - proxy.iter().sum::<f64>()) / n * 1e3
    );
}

/// Waits until every rule was evaluated at least once, then asserts none is unhealthy.
fn assert_rules_healthy(prometheus: &Prometheus, storage: Storage) -> Value {
    let rules = wait_for("every rule evaluated", Duration::from_secs(15), || {
        let rules = prometheus.rules();
        let all = rules["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .all(|r| r["health"] != "unknown");
        all.then_some(rules)
    });
    let mut count = 0;
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            count += 1;
            assert_eq!(
                rule["health"], "ok",
                "{storage:?}: rule {} in group {} is unhealthy: {}",
                rule["name"], group["name"], rule["lastError"]
            );
        }
    }
    let in_file = std::fs::read_to_string(repo_path("deploy/prometheus/tokenmeter-rules.yaml"))
        .expect("rules file")
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("- record:") || line.starts_with("- alert:"))
        .count();
    assert_eq!(
        count, in_file,
        "every rule of tokenmeter-rules.yaml was loaded"
    );
    assert_eq!(
        count, 45,
        "the rules file has its 45 rules (25 recording, 20 alerting; promtool counts the same)"
    );
    rules
}

fn is_pending(expr: &Expr) -> bool {
    ROUTING_PENDING
        .iter()
        .any(|series| expr.promql.contains(series))
}

/// Whether the query's data counts as "returns data" for this expression.
fn returns_data(prometheus: &Prometheus, expr: &Expr) -> bool {
    let data = prometheus.query(&expr.promql);
    match &expr.label {
        // label_values(): some sample must carry a non-empty value of the label.
        Some(label) => data["result"].as_array().is_some_and(|result| {
            result
                .iter()
                .any(|s| s["metric"][label].as_str().is_some_and(|v| !v.is_empty()))
        }),
        None => has_data(&data),
    }
}

/// Evaluates every expression; empty non-pending ones are retried for up to 10 s (recorded series
/// lag a scrape by up to one evaluation interval, 1 s; the rest is room for a loaded machine, and
/// an expression with data passes at its first look). Returns every failure.
fn check_every_expression(prometheus: &Prometheus, exprs: &[Expr]) -> Vec<String> {
    let mut failures = Vec::new();
    for expr in exprs {
        if is_pending(expr) {
            if returns_data(prometheus, expr) {
                failures.push(format!(
                    "{}: routing series now have data; remove them from ROUTING_PENDING\n    {}",
                    expr.origin, expr.promql
                ));
            }
            continue;
        }
        let mut ok = returns_data(prometheus, expr);
        for _ in 0..40 {
            if ok {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
            ok = returns_data(prometheus, expr);
        }
        if !ok {
            failures.push(format!("{}: no data\n    {}", expr.origin, expr.promql));
        }
    }
    failures
}

#[test]
fn real_prometheus_over_two_sidecars_sees_every_expression_and_the_bench_quantiles() {
    let scratch = Scratch::new("prometheus-e2e");
    let dir = scratch.path();
    let sidecars: Vec<Sidecar> = (0..2).map(|i| start_sidecar(i, dir)).collect();
    let admins: Vec<SocketAddr> = sidecars.iter().map(|s| s.admin).collect();
    let rules_file = repo_path("deploy/prometheus/tokenmeter-rules.yaml");
    // One Prometheus of each storage, scraping the same sidecars through the same load (the one
    // keeping both forms federates the classic series from the classic one).
    let rules = [rules_file.as_path()];
    let classic = Prometheus::start_storing(dir, Storage::Classic, &admins, &rules, &[]);
    let native = Prometheus::start_storing(dir, Storage::Native, &admins, &rules, &[]);
    let both = Prometheus::start_keeping_both(dir, &admins, &rules, &classic);
    let servers = [
        (Storage::Classic, classic),
        (Storage::Native, native),
        (Storage::Both, both),
    ];
    for (storage, prometheus) in &servers {
        wait_for(
            &format!("both sidecars scraped ({storage:?})"),
            Duration::from_secs(20),
            || {
                (prometheus.scalar(r#"count(up{job="tokenmeter"} == 1)"#) == Some(2.0))
                    .then_some(())
            },
        );
    }

    let reports = drive_load(&sidecars, dir);
    // Tenant "capped" (one request a minute) on sidecar 1: one admitted, two refused.
    let capped: Vec<Option<u16>> = (0..3)
        .map(|_| {
            http::post(
                sidecars[1].traffic,
                "/v1/chat/completions",
                &[("x-tenant-id", "capped")],
                r#"{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#,
            )
        })
        .collect();
    assert_eq!(
        capped,
        [Some(200), Some(429), Some(429)],
        "the capped tenant's budget"
    );
    let ok: u64 = reports
        .iter()
        .map(|r| {
            r["points"][0]["classes"][0]["ok"]
                .as_u64()
                .expect("ok count")
        })
        .sum();
    let errors: Vec<&Value> = reports
        .iter()
        .map(|r| &r["points"][0]["classes"][0]["error_kinds"])
        .collect();
    assert_eq!(
        ok,
        2 * REQUESTS_PER_SIDECAR,
        "every request succeeds on the simulated replicas; errors: {errors:?}"
    );
    let want = ok as f64;
    for (storage, prometheus) in &servers {
        let count = if storage.has_native() {
            format!("sum(histogram_count({TTFT}))")
        } else {
            format!("sum({TTFT}_count)")
        };
        wait_for(
            &format!("Prometheus ({storage:?}) to scrape every request's TTFT"),
            Duration::from_secs(15),
            || (prometheus.scalar(&count) == Some(want)).then_some(()),
        );
    }

    let ttfts = client_ttfts(&reports);
    assert_eq!(ttfts.len() as u64, ok, "one client TTFT per ok request");
    let measured = wait_for(
        "every request's TTFT in the sidecars' usage records",
        Duration::from_secs(15),
        || proxy_ttfts(&sidecars, ok as usize),
    );
    let edges = ttft_edges(&servers[0].1); // the classic storage
    assert!(
        edges.contains(&0.8),
        "the 800 ms TTFT SLO is a bucket edge: {edges:?}"
    );
    for (storage, prometheus) in &servers {
        assert_stores_its_forms(prometheus, *storage);
        assert_heatmaps_get_one_form(prometheus, *storage);
        for q in [0.5, 0.99] {
            assert_quantile_agrees(prometheus, *storage, &edges, &measured, &ttfts, q);
        }
    }
    assert_within_the_clients(&measured, &ttfts);

    let mut failures = Vec::new();
    for (storage, prometheus) in &servers {
        let rules = assert_rules_healthy(prometheus, *storage);
        let mut exprs = rule_exprs(&rules);
        for (name, dashboard) in dashboards() {
            exprs.extend(dashboard_exprs(&name, &dashboard, VARIABLES));
        }
        // What KEDA and prometheus-adapter ask, on sidecar 0's `slo` pool.
        let read = |path: &str| std::fs::read_to_string(repo_path(path)).expect("autoscaler file");
        exprs.extend(autoscaler_exprs(
            &read("deploy/kubernetes/autoscaling/keda/scaledobject.yaml"),
            &read("deploy/kubernetes/autoscaling/hpa/prometheus-adapter.yaml"),
            "default",
        ));
        let failed = check_every_expression(prometheus, &exprs);
        let pending = exprs.iter().filter(|e| is_pending(e)).count();
        eprintln!(
            "{}: {} expressions evaluated, {} with data, {pending} waiting for routing",
            storage.name(),
            exprs.len(),
            exprs.len() - pending - failed.len()
        );
        if !failed.is_empty() {
            failures.push(format!("--- {storage:?} storage ---"));
            failures.extend(failed);
            failures.push(prometheus.proc.log_tail());
        }
    }
    let logs: Vec<String> = sidecars.iter().map(|s| s.proxy.log_tail()).collect();
    assert!(
        failures.is_empty(),
        "expression(s) failed:\n{}\n{}",
        failures.join("\n"),
        logs.join("\n")
    );
}
