//! The tenant and budget paths (#26): tokenmeter's configuration for each, the Redis they may keep
//! the budget in, and what the store did during each run, read off tokenmeter's `/metrics` and
//! Redis's `INFO commandstats` before and after it.
//!
//! Every path names the tenant from a header the load never sends, so every request is tenant
//! `anonymous`, one account that all streams share (the worst case for the store's lock or
//! Redis key). The budget is the default one, every limit set far above what a run can use: each
//! admission checks all four limits and none refuses. A refusal would be a failed request in the
//! load's count; [`StoreFigures`] also says so.
//!
//! With Redis, settlements leave through a queue to one task, one round trip at a time, and may
//! fall behind the admissions: after each run on that path the orchestrator waits for them
//! ([`drain`]), and the wait and its CPU belong to the run.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::procs::{free_port, log_file, wait_for_port, Error, Proc};

/// Where tokenmeter keeps a budget path's counts.
#[derive(Debug, Clone, Copy)]
pub enum Store {
    Memory,
    Redis(SocketAddr),
}

/// Limits no run reaches: 10^12 tokens a minute, 10^15 a day (below 2^53, exact in Redis's Lua
/// numbers), 10^9 requests a minute, 10^6 streams (more than the 10 000 idle ones).
const LIMITS: &str = "tokens_per_minute = 1000000000000
tokens_per_day = 1000000000000000
requests_per_minute = 1000000000
concurrent_streams = 1000000
";

/// The `[tenants]` tables of a tenant path: a tenant source, and a budget kept in `store` (none:
/// tenants alone).
pub fn tenants_toml(store: Option<Store>) -> String {
    let mut toml = String::from("[tenants]\nsources = [\"header\"]\n");
    if let Some(store) = store {
        let url = match store {
            Store::Memory => "memory".to_owned(),
            Store::Redis(addr) => format!("redis://{addr}/0"),
        };
        toml.push_str(&format!(
            "\n[tenants.budgets]\nstore = {url:?}\n\n[tenants.budgets.default]\ncounts = \"total\"\n{LIMITS}"
        ));
    }
    toml
}

/// A redis-server on a free loopback port with nothing persisted (`--save ""`, no append-only
/// file), its log in `<out>/redis.log`; `None` (the Redis path is skipped) when `binary` is not
/// there.
pub fn start_redis(binary: &Path, out: &Path) -> Result<Option<(Proc, SocketAddr)>, Error> {
    if !binary.exists() {
        eprintln!(
            "redis-server not found at {}: skipping the tokenmeter-budget-redis path",
            binary.display()
        );
        return Ok(None);
    }
    let dir = std::fs::canonicalize(out)?.join("redis");
    std::fs::create_dir_all(&dir)?;
    let addr = free_port()?;
    let child = Command::new(binary)
        .args(["--port", &addr.port().to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .stdout(log_file(out, "redis.log")?)
        .stderr(Stdio::inherit())
        .spawn()?;
    let proc = Proc {
        name: "redis-server",
        child,
    };
    wait_for_port(addr)?;
    Ok(Some((proc, addr)))
}

/// A budget path's store figures: cumulative at one instant ([`StoreFigures::read`]), or over one
/// run ([`StoreFigures::since`]).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct StoreFigures {
    /// Requests a budget refused (`tokenmeter_budget_rejections_total`): 0 when the limits were
    /// out of reach, as meant.
    pub rejections: f64,
    /// Store failures, and the requests `on_store_error` then decided.
    pub store_errors: f64,
    pub fallbacks: f64,
    /// Settlements dropped, their queue full (Redis only).
    pub settlements_dropped: f64,
    /// Redis round trips as tokenmeter timed them, by op: how many, and their seconds in all.
    pub admits: f64,
    pub admit_seconds: f64,
    pub settles: f64,
    pub settle_seconds: f64,
    /// `EVALSHA` calls Redis ran and its own µs on them in all (`INFO commandstats`).
    pub evalsha_calls: f64,
    pub evalsha_us: f64,
}

impl StoreFigures {
    /// The figures now, from tokenmeter's `/metrics` on `admin` and, for a Redis store, Redis's
    /// command stats.
    pub fn read(admin: SocketAddr, redis: Option<SocketAddr>) -> Result<Self, Error> {
        let metrics = http_get(admin, "/metrics")?;
        let sum = |metric: &str| sum_of(&metrics, metric, None);
        let op = |metric: &str, op: &str| sum_of(&metrics, metric, Some(op));
        let mut figures = Self {
            rejections: sum("tokenmeter_budget_rejections_total"),
            store_errors: sum("tokenmeter_budget_store_errors_total"),
            fallbacks: sum("tokenmeter_budget_store_fallbacks_total"),
            settlements_dropped: sum("tokenmeter_budget_settlements_dropped_total"),
            admits: op("tokenmeter_budget_store_seconds_count", "admit"),
            admit_seconds: op("tokenmeter_budget_store_seconds_sum", "admit"),
            settles: op("tokenmeter_budget_store_seconds_count", "settle"),
            settle_seconds: op("tokenmeter_budget_store_seconds_sum", "settle"),
            ..Self::default()
        };
        if let Some(redis) = redis {
            let stats = redis_command(redis, &["INFO", "commandstats"])?;
            // cmdstat_evalsha:calls=N,usec=N,usec_per_call=F,...
            if let Some(line) = stats.lines().find(|l| l.starts_with("cmdstat_evalsha:")) {
                let field = |key: &str| {
                    line.split([':', ','])
                        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0.0)
                };
                figures.evalsha_calls = field("calls");
                figures.evalsha_us = field("usec");
            }
        }
        Ok(figures)
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            rejections: self.rejections - before.rejections,
            store_errors: self.store_errors - before.store_errors,
            fallbacks: self.fallbacks - before.fallbacks,
            settlements_dropped: self.settlements_dropped - before.settlements_dropped,
            admits: self.admits - before.admits,
            admit_seconds: self.admit_seconds - before.admit_seconds,
            settles: self.settles - before.settles,
            settle_seconds: self.settle_seconds - before.settle_seconds,
            evalsha_calls: self.evalsha_calls - before.evalsha_calls,
            evalsha_us: self.evalsha_us - before.evalsha_us,
        }
    }

    /// Mean admission and settlement round trips, µs.
    pub fn admit_mean_us(&self) -> f64 {
        self.admit_seconds / self.admits * 1e6
    }

    pub fn settle_mean_us(&self) -> f64 {
        self.settle_seconds / self.settles * 1e6
    }

    /// Redis's own time per script run, µs.
    pub fn evalsha_us_per_call(&self) -> f64 {
        self.evalsha_us / self.evalsha_calls
    }
}

/// The Redis key of the streams in flight of tenant `anonymous` (docs/tenants.md: every request
/// of the benchmark is its), under the default `key_prefix`.
const SLOTS_KEY: &str = "tokenmeter:{anonymous}:slots";

/// Waits until every stream admitted into the Redis at `redis` is settled (its slot gone), at
/// most `within`; returns how long that took. Asks Redis rather than tokenmeter, whose CPU is
/// being measured.
pub fn drain(redis: SocketAddr, within: Duration) -> Result<Duration, Error> {
    let started = Instant::now();
    while redis_command(redis, &["ZCARD", SLOTS_KEY])?.trim() != "0" {
        if started.elapsed() > within {
            return Err(format!("settlements still pending after {within:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(started.elapsed())
}

/// Saves what tokenmeter's `/metrics` on `admin` (and Redis's `INFO commandstats`) say at the end,
/// to `<out>/<name>.metrics.txt` (and `<out>/redis-commandstats.txt`).
pub fn save_final(
    out: &Path,
    name: &str,
    admin: SocketAddr,
    redis: Option<SocketAddr>,
) -> Result<(), Error> {
    std::fs::write(
        out.join(format!("{name}.metrics.txt")),
        http_get(admin, "/metrics")?,
    )?;
    if let Some(redis) = redis {
        let stats = redis_command(redis, &["INFO", "commandstats"])?;
        std::fs::write(out.join("redis-commandstats.txt"), stats)?;
    }
    Ok(())
}

/// The sum of a metric's samples in a Prometheus text exposition (over every label set, or only
/// those with `op="<op>"`); 0 when it has none (a counter is only shown once counted).
fn sum_of(text: &str, metric: &str, op: Option<&str>) -> f64 {
    let op_label = op.map(|op| format!("op=\"{op}\""));
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            if !(rest.starts_with(' ') || rest.starts_with('{')) {
                return None; // a longer name
            }
            if op_label
                .as_ref()
                .is_some_and(|label| !rest.contains(label.as_str()))
            {
                return None;
            }
            rest.rsplit(' ').next()?.parse::<f64>().ok()
        })
        // From +0.0: `sum()` of nothing is -0.0.
        .fold(0.0, |sum, value| sum + value)
}

/// A plain HTTP/1.0 GET's body.
fn http_get(addr: SocketAddr, path: &str) -> Result<String, Error> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("no end of head in the admin's answer")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        let status = head.lines().next().unwrap_or("");
        return Err(format!("GET {path} on {addr}: {status}").into());
    }
    Ok(body.to_owned())
}

/// One command to the Redis at `addr`; its reply's text (a bulk string's body, an integer's
/// digits).
fn redis_command(addr: SocketAddr, args: &[&str]) -> Result<String, Error> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(command.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(format!("Redis closed before answering {args:?}").into());
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        let Some((first, rest)) = text.split_once("\r\n") else {
            continue;
        };
        match first.split_at_checked(1) {
            Some((":" | "+", value)) => return Ok(value.to_owned()),
            Some(("-", error)) => return Err(format!("Redis {args:?}: {error}").into()),
            // `$<len>\r\n<len bytes>\r\n`: done once the announced length is in.
            Some(("$", len)) => {
                let len: usize = len.parse()?;
                if rest.len() >= len {
                    return Ok(rest[..len].to_owned());
                }
            }
            _ => return Err(format!("Redis {args:?}: unexpected reply {first:?}").into()),
        }
    }
}
