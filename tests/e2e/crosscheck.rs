//! Cross-check: bench drives simulated replicas through the proxy; what the proxy metered must equal
//! what the clients saw (counts exactly, times bounded by the client's clock), and the demo runs.

use crate::support;
use std::time::Duration;

use tokenmeter::config::{BalanceLoad, PoolConfig};
use tokenmeter::testbed::bench::{
    self, Arrival, ArrivalProcess, Endpoint, LoadMode, LoadSpec, Stop, Workload,
};
use tokenmeter::testbed::demo::{self, DemoArgs};
use tokenmeter::testbed::sim::{self, SimConfig};
use tokio::net::TcpListener;

use support::{config_for, prom, start_proxy};

/// The requests a demo sends, by class, in its classes' order: its load is an open loop of seeded
/// Poisson arrivals, each on its place on the schedule, until the schedule passes the duration.
/// The set is fixed by the seed, however late a loaded machine sends them.
fn demo_requests(args: &DemoArgs) -> Vec<(String, u64)> {
    let mut arrivals =
        ArrivalProcess::new(Arrival::Poisson, args.rate, args.seed).expect("a valid process");
    let workload: Workload = args.workload.parse().expect("the workload parses");
    let mut counts: Vec<(String, u64)> = workload
        .class_names()
        .into_iter()
        .map(|name| (name, 0))
        .collect();
    let (mut due, mut index) = (Duration::ZERO, 0);
    while due < args.duration {
        counts[workload.sample_request(args.seed, index).class].1 += 1;
        index += 1;
        due += arrivals.next_gap();
    }
    counts
}

async fn replica() -> sim::SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let config = SimConfig {
        time_scale: 4.0,
        ..SimConfig::profile("fast").expect("fast profile")
    };
    sim::spawn(listener, config).await.expect("sim starts")
}

#[tokio::test]
async fn proxy_metrics_equal_what_bench_saw() {
    let replicas = [replica().await, replica().await];
    let mut config = config_for(&format!("http://{}", replicas[0].local_addr()));
    // Least streams, so that both replicas serve a share this test can assert (`auto` would
    // place by predicted latency, and may keep most on one).
    config.pools = vec![PoolConfig {
        name: "default".to_owned(),
        urls: replicas
            .iter()
            .map(|r| format!("http://{}", r.local_addr()))
            .collect(),
        balance: BalanceLoad::Streams,
        ..PoolConfig::default()
    }];
    let proxy = start_proxy(config).await;

    for (endpoint, operation) in [
        (Endpoint::Chat, "chat"),
        (Endpoint::Completions, "text_completion"),
    ] {
        let spec = LoadSpec {
            endpoint,
            mode: LoadMode::Closed { concurrency: 6 },
            stop: Stop::Requests(40),
            workload: "short:0.8:prompt=uniform:20-200:output=uniform:1-40,long:0.2:prompt=uniform:1000-3000:output=fixed:16"
                .parse()
                .expect("workload"),
            seed: 7,
            ..LoadSpec::new(format!("http://{}", proxy.traffic_addr))
        };
        let report = bench::run_point(&spec).await.expect("bench ran");
        let all = report.all().expect("an all row");
        assert_eq!(
            all.ok, 40,
            "{operation}: every request succeeded: {:?}",
            all.error_kinds
        );

        let text = proxy.metrics.render();
        let op = ("gen_ai_operation_name", operation);
        let ok = prom::sum(&text, "tokenmeter_requests_total", &[op, ("outcome", "ok")]);
        assert_eq!(ok, 40.0, "{operation}: every request counted ok");
        let ttfts = prom::sum(
            &text,
            "gen_ai_server_time_to_first_token_seconds_count",
            &[op],
        );
        assert_eq!(ttfts, 40.0, "{operation}: one TTFT per request");
        let tokens = prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[op, ("gen_ai_token_type", "output")],
        );
        assert_eq!(
            tokens, all.output_tokens_total as f64,
            "{operation}: output tokens"
        );
        let per_backend: Vec<f64> = replicas
            .iter()
            .map(|r| {
                let backend = r.local_addr().to_string();
                prom::sum(
                    &text,
                    "tokenmeter_requests_total",
                    &[op, ("backend", backend.as_str())],
                )
            })
            .collect();
        assert_eq!(
            per_backend.iter().sum::<f64>(),
            40.0,
            "{operation}: every request has a backend"
        );
        assert!(
            per_backend.iter().all(|&n| n >= 14.0),
            "{operation}: least-streams balancing spreads 6 in flight over both replicas: {per_backend:?}"
        );
    }
}

#[tokio::test]
async fn per_request_counts_and_times_agree_with_bench() {
    let replica = replica().await;
    let proxy = start_proxy(config_for(&format!("http://{}", replica.local_addr()))).await;
    let spec = LoadSpec {
        mode: LoadMode::Closed { concurrency: 4 },
        stop: Stop::Requests(30),
        workload: "mix:1:prompt=uniform:10-400:output=uniform:1-60"
            .parse()
            .expect("workload"),
        seed: 11,
        ..LoadSpec::new(format!("http://{}", proxy.traffic_addr))
    };
    let report = bench::run_point(&spec).await.expect("bench ran");
    let records = &report.requests;
    assert_eq!(records.len(), 30, "every request recorded");
    assert!(
        records
            .iter()
            .all(|r| r.outcome.is_ok() && r.ttft_s.is_some()),
        "every request succeeded and streamed a token: {:?}",
        records.iter().find(|r| !r.outcome.is_ok())
    );

    let text = proxy.metrics.render();
    let output: u64 = records.iter().map(|r| r.output_tokens).sum();
    let input: u64 = records.iter().filter_map(|r| r.usage_prompt_tokens).sum();
    let gaps: usize = records.iter().map(|r| r.itl_s.len()).sum();
    let tpots = records.iter().filter(|r| r.tpot_s.is_some()).count();
    let out = [("gen_ai_token_type", "output")];
    assert_eq!(
        prom::sum(&text, "tokenmeter_tokens_total", &out),
        output as f64,
        "output tokens"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "input")]
        ),
        input as f64,
        "input tokens"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_inter_token_latency_seconds_count", &[]),
        gaps as f64,
        "one ITL observation per gap the client saw"
    );
    assert_eq!(
        prom::sum(
            &text,
            "gen_ai_server_time_per_output_token_seconds_count",
            &[]
        ),
        tpots as f64,
        "one TPOT per request with 2+ tokens"
    );

    // The proxy's clock starts after the client's, so every proxy TTFT is at most the client's. Per
    // bucket edge that means: at least as many proxy observations as client ones are <= the edge.
    let buckets = prom::find(
        &text,
        "gen_ai_server_time_to_first_token_seconds_bucket",
        &[],
    );
    assert!(!buckets.is_empty(), "TTFT buckets");
    for bucket in buckets {
        let edge: f64 = match bucket.labels["le"].as_str() {
            "+Inf" => f64::INFINITY,
            text => text.parse().expect("edge"),
        };
        let client = records
            .iter()
            .filter(|r| r.ttft_s.is_some_and(|t| t <= edge))
            .count();
        assert!(
            bucket.value >= client as f64,
            "le={edge}: proxy {} < client {client}: a proxy TTFT exceeded the client's",
            bucket.value
        );
    }
}

#[tokio::test]
async fn demo_runs_and_reports_both_sides() {
    let args = DemoArgs {
        replicas: 2,
        profile: "fast".to_owned(),
        time_scale: 2.0,
        rate: 20.0,
        duration: Duration::from_secs(2),
        workload: "chat:0.9:prompt=uniform:20-200:output=uniform:8-32,document:0.1:prompt=uniform:2000-4000:output=fixed:8"
            .to_owned(),
        seed: 1,
        listen: "127.0.0.1:0".parse().expect("addr"),
        admin_listen: "127.0.0.1:0".parse().expect("addr"),
        max_gap: Duration::from_millis(250),
        keep_running: false,
        routed: false,
    };
    let outcome = demo::run_quiet(&args, false).await.expect("demo runs");
    let all = outcome.client.all().expect("all row");
    let sent: u64 = demo_requests(&args).iter().map(|(_, n)| n).sum();
    assert!(
        (20..=60).contains(&sent),
        "the seed's schedule: about 40 arrivals in 2 s at 20/s, got {sent}"
    );
    assert_eq!(
        all.requests, sent,
        "every arrival of the seeded schedule was sent"
    );
    assert_eq!(all.errors, 0, "no errors: {:?}", all.error_kinds);
    let ok = prom::sum(
        &outcome.proxy_metrics,
        "tokenmeter_requests_total",
        &[("gen_ai_operation_name", "chat"), ("outcome", "ok")],
    );
    assert_eq!(
        ok, all.ok as f64,
        "the proxy counted every request the client completed"
    );
    let gap_verdicts: f64 = ["met", "missed"]
        .iter()
        .map(|result| {
            prom::sum(
                &outcome.proxy_metrics,
                "tokenmeter_slo_requests_total",
                &[("slo", "gap"), ("result", result)],
            )
        })
        .sum();
    assert_eq!(
        gap_verdicts, all.max_gap.count as f64,
        "with a gap target, the proxy judged the gap of every stream in which the client saw two \
         token events or more"
    );
    let table = demo::render(&args, &outcome);
    for heading in [
        "What users felt",
        "What tokenmeter metered",
        "document",
        "TTFT p50/p90/p99 ms",
        "gap SLO",
    ] {
        assert!(table.contains(heading), "table has {heading:?}:\n{table}");
    }
}

#[tokio::test]
async fn routed_demo_sends_documents_to_prefill_and_chats_to_decode() {
    let args = DemoArgs {
        replicas: 2,
        profile: "fast".to_owned(),
        time_scale: 2.0,
        rate: 20.0,
        duration: Duration::from_secs(2),
        workload: "chat:0.8:prompt=uniform:20-200:output=uniform:8-32,document:0.2:prompt=uniform:5000-6000:output=fixed:8"
            .to_owned(),
        seed: 3,
        listen: "127.0.0.1:0".parse().expect("addr"),
        admin_listen: "127.0.0.1:0".parse().expect("addr"),
        max_gap: Duration::from_millis(250),
        keep_running: false,
        routed: true,
    };
    let outcome = demo::run_quiet(&args, false).await.expect("demo runs");
    let documents = outcome
        .client
        .class("document")
        .expect("documents were sent");
    let chats = outcome.client.class("chat").expect("chats were sent");
    let want = demo_requests(&args);
    assert!(
        want.iter().all(|(_, n)| *n > 0),
        "the seed's schedule draws both classes: {want:?}"
    );
    assert_eq!(
        [
            ("chat".to_owned(), chats.requests),
            ("document".to_owned(), documents.requests)
        ],
        want.as_slice(),
        "every arrival of the seeded schedule was sent, in the class its draw names"
    );
    assert_eq!(
        (chats.ok, documents.ok),
        (chats.requests, documents.requests),
        "both classes ran, every request succeeded: {:?}",
        outcome.client.all().map(|a| &a.error_kinds)
    );
    let per_pool = |pool: &str| {
        prom::sum(
            &outcome.proxy_metrics,
            "tokenmeter_requests_total",
            &[
                ("pool", pool),
                ("gen_ai_operation_name", "chat"),
                ("outcome", "ok"),
            ],
        )
    };
    assert_eq!(
        per_pool("prefill"),
        documents.ok as f64,
        "every document went to prefill"
    );
    assert_eq!(
        per_pool("decode"),
        chats.ok as f64,
        "every chat went to decode"
    );
    let table = demo::render(&args, &outcome);
    assert!(table.contains("routed: "), "routing shown:\n{table}");
}
