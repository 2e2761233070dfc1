//! The end-to-end overhead benchmark: the same load against every path in one run, interleaved —
//! client -> backend (direct), client -> tokenmeter -> backend (metered, and on a path it does not
//! meter), and the same through a bare hyper proxy and the C baselines nginx and haproxy — and the
//! cost of each proxy: added chunk latency and TTFT, CPU per
//! million chunks, peak chunks/s, RSS per idle stream. The TLS paths do the same with tokenmeter
//! and nginx terminating TLS from the client, or speaking TLS to the backend ([`run`] lists them).
//! The tenant paths (opt-in) run tokenmeter with a tenant source and a budget in memory or in a
//! Redis it starts ([`budgets`]). `scripts/bench-overhead.sh` builds and runs it;
//! docs/performance.md explains the method and holds the results.
//!
//! One binary, five roles (each a separate process when the benchmark runs):
//! - `backend`: the minimal streaming server ([`backend`]), also over TLS with a certificate;
//! - `bare`: a bare proxy on hyper's server and client, nothing else ([`bare`]);
//! - `load` / `idle`: the load client ([`client`]), one JSON line on stdout;
//! - `run`: the orchestrator ([`run`]) that starts the others, tokenmeter, nginx and haproxy, and
//!   writes `results.jsonl` and `summary.md`; it generates the TLS paths' certificates ([`pki`]),
//!   and [`tls`] holds the TLS settings of the client and the backend.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

mod backend;
mod bare;
mod budgets;
mod client;
mod nginx;
mod paths;
mod pki;
mod procs;
mod report;
mod run;
mod tls;

#[derive(Parser, Debug)]
#[command(about = "tokenmeter overhead benchmark (see docs/performance.md)")]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// The streaming backend.
    Backend {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Also serve over TLS here (with `--tls-cert` and `--tls-key`).
        #[arg(long, requires_all = ["tls_cert", "tls_key"])]
        tls_listen: Option<SocketAddr>,
        #[arg(long)]
        tls_cert: Option<PathBuf>,
        #[arg(long)]
        tls_key: Option<PathBuf>,
    },
    /// A bare proxy on hyper's server and client to `upstream`.
    Bare {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        #[arg(long)]
        upstream: SocketAddr,
    },
    /// Closed-loop streaming load; prints one JSON line.
    Load {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value_t = 1)]
        streams: usize,
        #[arg(long, default_value_t = 64)]
        chunks: u64,
        #[arg(long, default_value_t = 20_000)]
        interval_us: u64,
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
        #[arg(long, default_value_t = 2.0)]
        warmup: f64,
        #[arg(long, default_value = client::CHAT_PATH)]
        path: String,
        /// Speak TLS, trusting this CA (PEM).
        #[arg(long)]
        tls_ca: Option<PathBuf>,
    },
    /// Idle streams; prints one JSON line with the RSS of `pids`.
    Idle {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        streams: usize,
        /// Processes whose VmRSS is summed (the proxy's).
        #[arg(long, value_delimiter = ',')]
        pids: Vec<u32>,
        #[arg(long, default_value_t = 120_000)]
        hold_ms: u64,
        /// Speak TLS, trusting this CA (PEM).
        #[arg(long)]
        tls_ca: Option<PathBuf>,
    },
    /// The whole benchmark.
    Run(run::RunArgs),
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` appends `--bench`; this binary has its own arguments.
    let args = std::env::args().filter(|arg| arg != "--bench");
    let cli = Cli::parse_from(args);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.role {
        Role::Backend {
            listen,
            tls_listen,
            tls_cert,
            tls_key,
        } => {
            let tls = match (tls_listen, tls_cert, tls_key) {
                (Some(addr), Some(cert), Some(key)) => {
                    Some((addr, tls::server_config(&cert, &key)?))
                }
                _ => None,
            };
            runtime.block_on(backend::run(listen, tls))?
        }
        Role::Bare { listen, upstream } => runtime.block_on(bare::run(listen, upstream))?,
        Role::Load {
            addr,
            streams,
            chunks,
            interval_us,
            secs,
            warmup,
            path,
            tls_ca,
        } => {
            let tls = client_tls(tls_ca.as_deref())?;
            let result = runtime.block_on(client::load(client::LoadArgs {
                addr,
                streams,
                chunks,
                interval_us,
                secs,
                warmup,
                path,
                tls,
            }));
            println!("{}", serde_json::to_string(&result)?);
        }
        Role::Idle {
            addr,
            streams,
            pids,
            hold_ms,
            tls_ca,
        } => {
            let tls = client_tls(tls_ca.as_deref())?;
            let result = runtime.block_on(client::idle(addr, streams, &pids, hold_ms, tls));
            println!("{}", serde_json::to_string(&result)?);
        }
        Role::Run(args) => run::run(args, &runtime)?,
    }
    // Idle streams and spawned connections must not keep the process alive.
    runtime.shutdown_background();
    Ok(())
}

/// The load client's TLS configuration when it was given a CA.
fn client_tls(
    ca: Option<&Path>,
) -> Result<Option<Arc<rustls::ClientConfig>>, Box<dyn std::error::Error>> {
    ca.map(tls::client_config).transpose()
}

/// Wall-clock ns since the epoch: the one clock two processes on this machine share.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Linear-interpolated percentile of sorted samples (numpy's default), as f64.
pub fn percentile(sorted: &[u64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0] as f64,
        n => {
            let rank = q * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            let frac = rank - lo as f64;
            sorted[lo] as f64 + (sorted[hi] as f64 - sorted[lo] as f64) * frac
        }
    }
}

/// utime + stime of a process (all its threads), in seconds; `USER_HZ` is 100 on Linux.
pub fn proc_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of stat(5) are the 12th and 13th after `comm`.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// VmRSS of a process in KiB.
pub fn proc_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Where this binary lives (the orchestrator starts its other roles from it).
pub fn self_exe() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}
