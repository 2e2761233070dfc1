//! `tokenmeter demo`: simulated replicas, the proxy in front of them, a mixed load, the SLO table.
//!
//! Everything runs in this one process on loopback, through the same code a deployment runs: the
//! replicas are [`crate::testbed::sim`] servers, the proxy is [`crate::server`] with the shipped configuration
//! (only the upstreams and listen addresses differ), and the load is [`crate::testbed::bench`]. It prints the
//! client-side table (what users felt, by workload class) and the proxy-side figures computed from
//! tokenmeter's own histograms exactly as `histogram_quantile` would on a dashboard.
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{BalanceLoad, Config};
use crate::testbed::bench::{
    self, Arrival, LoadMode, LoadSpec, PointReport, Progress, Slo, Stop, Workload,
};
use crate::testbed::sim::{self, SimConfig, SimHandle};

use crate::metrics::exposition::{self, histogram_quantile, samples};

/// 90% chat turns, 10% long documents: the mix whose long prefills stall chat streams.
pub const DEFAULT_WORKLOAD: &str =
    "chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128";

/// Command-line arguments of `tokenmeter demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Simulated replicas behind the proxy.
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// The replicas' engine profile (see `tokenmeter sim --help`).
    #[arg(long, default_value = "llama-3.1-8b-h100")]
    pub profile: String,
    /// Multiplies every modelled duration (2 = half speed, for slow machines).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Poisson arrival rate, requests per second.
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// How long requests are sent (requests in flight are then waited for).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Request classes (see `tokenmeter bench --help`).
    #[arg(long, default_value = DEFAULT_WORKLOAD)]
    pub workload: String,
    /// Seeds arrivals and request sizes.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Proxy traffic address (port 0 = any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Proxy admin address (`/metrics`).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin_listen: SocketAddr,
    /// The gap target the proxy and the client judge each stream by (`[slo] max_gap`): a stream
    /// meets its SLO only if its largest gap between tokens is within it too. `0s`: none.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    pub max_gap: Duration,
    /// Keep the replicas and the proxy running after the load, until Ctrl-C.
    #[arg(long)]
    pub keep_running: bool,
    /// Route instead of balancing: one prefill replica (max_num_batched_tokens 16384) and one
    /// decode replica (2048) behind `config/examples/pools.toml` (prompts >= 2048 tokens to prefill).
    #[arg(long)]
    pub routed: bool,
}

/// The shipped prefill/decode example, which the routed demo runs with its own replica addresses.
const POOLS_EXAMPLE: &str = include_str!("../../../config/examples/pools.toml");

/// What a demo run measured (the tests and the README use it).
#[derive(Debug)]
pub struct DemoOutcome {
    pub client: PointReport,
    /// The proxy's exposition text at the end of the load.
    pub proxy_metrics: String,
}

/// Runs the demo and prints its report.
pub async fn run(args: DemoArgs) -> Result<(), crate::BoxError> {
    let outcome = run_quiet(&args, true).await?;
    crate::stdout::print(format_args!("{}", render(&args, &outcome)))?;
    Ok(())
}

/// Runs the demo; prints only the set-up lines and progress when `chatty`.
pub async fn run_quiet(args: &DemoArgs, chatty: bool) -> Result<DemoOutcome, crate::BoxError> {
    let workload: Workload = args.workload.parse()?;
    let profile = SimConfig::profile(&args.profile)
        .ok_or_else(|| format!("unknown profile {:?}", args.profile))?;
    if args.replicas == 0 {
        return Err("--replicas must be at least 1".into());
    }
    // Routed: replica 0 is tuned for prefill, replica 1 for decode (pools.toml's two pools).
    let batch_budgets: Vec<Option<u64>> = if args.routed {
        vec![Some(16384), Some(2048)]
    } else {
        vec![None; args.replicas]
    };
    let mut replicas: Vec<SimHandle> = Vec::with_capacity(batch_budgets.len());
    for budget in &batch_budgets {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let mut config = SimConfig {
            time_scale: args.time_scale,
            ..profile.clone()
        };
        if let Some(budget) = budget {
            config.max_num_batched_tokens = *budget;
        }
        replicas.push(sim::spawn(listener, config).await?);
    }
    let urls: Vec<String> = replicas
        .iter()
        .map(|replica| format!("http://{}", replica.local_addr()))
        .collect();

    // The shipped configuration (or the shipped pools example), pointed at the replicas.
    let mut config = if args.routed {
        let mut config = Config::from_toml(POOLS_EXAMPLE)?;
        for (pool, url) in config.pools.iter_mut().zip(&urls) {
            pool.urls = vec![url.clone()];
        }
        config
    } else {
        let mut config = Config::default();
        config.upstream.urls = urls.clone();
        config
    };
    config.server.listen = args.listen;
    config.server.admin_listen = args.admin_listen;
    config.slo.max_gap = (!args.max_gap.is_zero()).then_some(args.max_gap);
    let origins = crate::server::ListenOrigins {
        traffic: "--listen".to_owned(),
        admin: "--admin-listen".to_owned(),
    };
    let (traffic, admin) = crate::server::bind_from(&config, &origins).await?;
    let proxy = crate::server::spawn(config.clone(), traffic, admin)?;
    if chatty {
        let layout = if args.routed {
            "prefill + decode, routed by config/examples/pools.toml"
        } else if config.effective_pools()[0].balance == BalanceLoad::Slo {
            "placed by predicted latency, balance = \"auto\""
        } else {
            "one replica, balance = \"auto\""
        };
        crate::stdout::print(format_args!(
            "tokenmeter demo: {} simulated replica(s) ({}, time scale {}; {layout}) at {}\n\
             proxy: http://{}   metrics: http://{}/metrics\n\
             load: Poisson {} req/s for {:?}, workload {}\n\n",
            replicas.len(),
            args.profile,
            args.time_scale,
            urls.join(", "),
            proxy.traffic_addr,
            proxy.admin_addr,
            args.rate,
            args.duration,
            args.workload
        ))?;
    }

    let spec = LoadSpec {
        mode: LoadMode::Open {
            rate: args.rate,
            arrival: Arrival::Poisson,
        },
        stop: Stop::Duration(args.duration),
        workload,
        slo: Slo {
            ttft: config.slo.ttft,
            tpot: config.slo.tpot,
            max_gap: config.slo.max_gap,
        },
        seed: args.seed,
        ..LoadSpec::new(format!("http://{}", proxy.traffic_addr))
    };
    let progress = Arc::new(Progress::default());
    let client = bench::with_progress_line(
        (chatty && std::io::stderr().is_terminal()).then(|| "demo".to_owned()),
        spec.stop,
        &progress,
        bench::run_point_with(&bench::BenchClient::new(), &spec, &progress),
    )
    .await?;
    proxy.metrics.run_upkeep();
    let proxy_metrics = proxy.metrics.render();

    if args.keep_running {
        crate::stdout::print(format_args!(
            "still running: proxy http://{}  metrics http://{}/metrics  (Ctrl-C to stop)\n",
            proxy.traffic_addr, proxy.admin_addr
        ))?;
        crate::shutdown::signal().await;
    }
    proxy.shutdown().await;
    for replica in replicas {
        replica.shutdown().await;
    }
    Ok(DemoOutcome {
        client,
        proxy_metrics,
    })
}

/// The two tables: client side by class, proxy side from tokenmeter's histograms.
pub fn render(args: &DemoArgs, outcome: &DemoOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== What users felt (client side, tokenmeter bench) ==");
    out.push_str(&outcome.client.render_table());
    let _ = writeln!(
        out,
        "\n== What tokenmeter metered (proxy side, histogram_quantile over its /metrics) =="
    );
    out.push_str(&render_proxy(
        &outcome.proxy_metrics,
        outcome.client.wall_time_s,
    ));
    let gap = if args.max_gap.is_zero() {
        String::new()
    } else {
        format!(
            ", and every gap between tokens <= {} ms (--max-gap, [slo] max_gap)",
            args.max_gap.as_millis()
        )
    };
    let _ = writeln!(
        out,
        "\nSLO: TTFT <= {} ms and TPOT <= {} ms (config/tokenmeter.toml){gap}. Proxy TTFT is lower \
         than the client's by the client-proxy round trip; its quantiles are interpolated within \
         buckets.",
        Config::default().slo.ttft.as_millis(),
        Config::default().slo.tpot.as_millis()
    );
    if !args.keep_running {
        let _ = writeln!(
            out,
            "Run with --keep-running to scrape the proxy's /metrics yourself."
        );
    }
    out
}

fn render_proxy(text: &str, wall_time_s: f64) -> String {
    let all = samples(text);
    let chat = [("gen_ai_operation_name", "chat")];
    let quantiles = |name: &str| -> String {
        let q = |p: f64| {
            histogram_quantile(&all, name, &chat, p)
                .map_or("-".to_owned(), |v| format!("{:.1}", v * 1e3))
        };
        format!("{}/{}/{}", q(0.5), q(0.9), q(0.99))
    };
    // Counters are whole numbers; printing them as such also avoids "-0" for an empty sum.
    let requests = |outcome: &str| {
        exposition::sum(
            &all,
            crate::meter::series::REQUESTS,
            &[chat[0], ("outcome", outcome)],
        ) as u64
    };
    let slo = |slo: &str, result: &str| {
        exposition::sum(
            &all,
            crate::meter::series::SLO_REQUESTS,
            &[chat[0], ("slo", slo), ("result", result)],
        )
    };
    let attainment = |name: &str| {
        let met = slo(name, "met");
        let total = met + slo(name, "missed");
        if total > 0.0 {
            format!("{:.1}%", 100.0 * met / total)
        } else {
            "-".to_owned()
        }
    };
    let output_tokens = exposition::sum(
        &all,
        crate::meter::series::TOKENS,
        &[chat[0], ("gen_ai_token_type", "output")],
    ) as u64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>20} | {:>20} | {:>20} | {:>9} {:>9} {:>9} {:>9} | {:>8}",
        "TTFT p50/p90/p99 ms",
        "ITL p50/p90/p99 ms",
        "TPOT p50/p90/p99 ms",
        "TTFT SLO",
        "TPOT SLO",
        "gap SLO",
        "all SLOs",
        "goodput"
    );
    let goodput = if wall_time_s > 0.0 {
        slo("all", "met") / wall_time_s
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "{:>20} | {:>20} | {:>20} | {:>9} {:>9} {:>9} {:>9} | {:>6.2}/s",
        quantiles(crate::meter::series::TTFT),
        quantiles(crate::meter::series::ITL),
        quantiles(crate::meter::series::TPOT),
        attainment("ttft"),
        attainment("tpot"),
        attainment("gap"),
        attainment("all"),
        goodput
    );
    let decisions: std::collections::BTreeMap<String, u64> = all
        .iter()
        .filter(|sample| sample.name == crate::route::series::ROUTE_DECISIONS)
        .fold(Default::default(), |mut pools, sample| {
            let pool = sample.labels.get("pool").cloned().unwrap_or_default();
            let reason = sample.labels.get("reason").cloned().unwrap_or_default();
            *pools.entry(format!("{pool} ({reason})")).or_default() += sample.value as u64;
            pools
        });
    let decisions: Vec<String> = decisions
        .iter()
        .filter(|(_, count)| **count > 0)
        .map(|(pool, count)| format!("{pool} {count}"))
        .collect();
    let _ = writeln!(out, "routed: {}", decisions.join(", "));
    let _ = writeln!(
        out,
        "requests: ok {} cancelled {} upstream_error {} timeout {} client_error {}; output tokens {}",
        requests("ok"),
        requests("cancelled"),
        requests("upstream_error"),
        requests("timeout"),
        requests("client_error"),
        output_tokens
    );
    out
}
