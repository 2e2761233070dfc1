//! The orchestrator: starts the backend, tokenmeter, the bare hyper proxy and the C baselines
//! (nginx, haproxy), runs the load client against every path interleaved (the order rotates every
//! repetition; tokenmeter twice, metered and unmetered), reads each proxy's CPU from
//! `/proc/<pid>/stat` around every run, and writes `results.jsonl` (every run) and `summary.md`
//! (medians over repetitions, added figures paired per repetition against direct).
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::client::{IdleResult, LoadResult, CHAT_PATH};
use super::{proc_cpu_secs, self_exe};

type Error = Box<dyn std::error::Error>;

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The tokenmeter binary (release build).
    #[arg(long)]
    tokenmeter: PathBuf,
    /// The nginx binary; the nginx path is skipped when it is not there.
    #[arg(long, default_value = "/usr/sbin/nginx")]
    nginx: PathBuf,
    /// The haproxy binary; the haproxy path is skipped when it is not there.
    #[arg(long, default_value = "/usr/sbin/haproxy")]
    haproxy: PathBuf,
    /// Where results.jsonl, summary.md, configs and logs go.
    #[arg(long, default_value = "target/bench-overhead")]
    out: PathBuf,
    /// Concurrent streams of the latency points.
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024")]
    concurrency: Vec<usize>,
    /// Repetitions of every point (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds per latency run (the first `warmup` are not measured).
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Content chunks per request (then the stream ends and the next request starts: TTFT samples).
    #[arg(long, default_value_t = 64)]
    chunks: u64,
    /// Gap between chunks of one stream (a decode step).
    #[arg(long, default_value_t = 20_000)]
    interval_us: u64,
    /// Cap on the aggregate paced chunk rate: with many streams the per-stream gap grows so the
    /// 2-core machine measures latency, not a queue.
    #[arg(long, default_value_t = 20_000)]
    max_rate: u64,
    /// Streams of the saturation run (chunks back to back).
    #[arg(long, default_value_t = 64)]
    saturation_streams: usize,
    #[arg(long, default_value_t = 8.0)]
    saturation_secs: f64,
    /// Idle streams for the memory figure (0 = skip).
    #[arg(long, default_value_t = 10_000)]
    idle_streams: usize,
}

/// A started process, killed on drop.
struct Proc {
    name: &'static str,
    child: Child,
}

impl Drop for Proc {
    /// SIGTERM first, so that nginx's master stops its workers (a SIGKILLed master leaves them
    /// running, orphaned, into the next runs); SIGKILL after 3 s.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("stopped {}", self.name);
    }
}

fn free_port() -> Result<SocketAddr, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn wait_for_port(addr: SocketAddr) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nothing listens on {addr}").into())
}

fn log_file(out: &Path, name: &str) -> Result<Stdio, Error> {
    Ok(Stdio::from(std::fs::File::create(out.join(name))?))
}

/// Starts one of this binary's own server roles (`args`, listening on port 0) and reads the
/// address it prints (`listening <addr>`); its stderr goes to `<out>/<log>.log`.
fn start_role(
    out: &Path,
    name: &'static str,
    log: &str,
    args: &[String],
) -> Result<(Proc, SocketAddr), Error> {
    let mut child = Command::new(self_exe()?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log_file(out, &format!("{log}.log"))?)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("role stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening ")
        .ok_or_else(|| format!("{name} did not say where it listens"))?
        .parse()?;
    Ok((Proc { name, child }, addr))
}

fn start_backend(out: &Path) -> Result<(Proc, SocketAddr), Error> {
    let args = ["backend", "--listen", "127.0.0.1:0"].map(String::from);
    start_role(out, "backend", "backend", &args)
}

/// A POST tokenmeter forwards but does not meter (not a generation API): its response streams
/// through with routing, admission and the request count, but no event is framed or classified.
const UNMETERED_PATH: &str = "/v1/embeddings";

/// The bare hyper proxy ([`super::bare`]) in front of the backend.
fn start_bare(out: &Path, backend: SocketAddr) -> Result<(Proc, SocketAddr, Vec<u32>), Error> {
    let args = ["bare", "--listen", "127.0.0.1:0", "--upstream"]
        .map(String::from)
        .into_iter()
        .chain([backend.to_string()])
        .collect::<Vec<_>>();
    let (proc, addr) = start_role(out, "hyper-bare", "bare", &args)?;
    let pid = proc.child.id();
    Ok((proc, addr, vec![pid]))
}

fn start_tokenmeter(
    args: &RunArgs,
    backend: SocketAddr,
) -> Result<(Proc, SocketAddr, Vec<u32>), Error> {
    let listen = free_port()?;
    let admin = free_port()?;
    let child = Command::new(&args.tokenmeter)
        .arg("serve")
        .env("TOKENMETER_LISTEN", listen.to_string())
        .env("TOKENMETER_ADMIN_LISTEN", admin.to_string())
        .env("TOKENMETER_UPSTREAM", format!("http://{backend}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log_file(&args.out, "tokenmeter.log")?)
        .spawn()?;
    let pid = child.id();
    let proc = Proc {
        name: "tokenmeter",
        child,
    };
    wait_for_port(listen)?;
    Ok((proc, listen, vec![pid]))
}

fn nginx_conf(dir: &Path, listen: SocketAddr, backend: SocketAddr) -> String {
    let dir = dir.display();
    format!(
        r#"# nginx as a plain streaming proxy: the C baseline (written by benches/overhead/run.rs).
worker_processes 2;
worker_rlimit_nofile 65536;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 32768; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 1000000;
    upstream backend {{
        server {backend};
        keepalive 2048;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }}
    server {{
        listen {listen} backlog=4096;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"#
    )
}

/// The pids of a process's children (nginx's workers).
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let ppid: u32 = rest.split(' ').nth(1)?.parse().ok()?;
        (ppid == parent).then_some(pid)
    })
    .collect()
}

fn start_nginx(
    args: &RunArgs,
    backend: SocketAddr,
) -> Result<Option<(Proc, SocketAddr, Vec<u32>)>, Error> {
    if !args.nginx.exists() {
        eprintln!(
            "nginx not found at {}: skipping the nginx path",
            args.nginx.display()
        );
        return Ok(None);
    }
    let dir = std::fs::canonicalize(&args.out)?.join("nginx");
    std::fs::create_dir_all(&dir)?;
    let listen = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(&dir, listen, backend))?;
    let child = Command::new(&args.nginx)
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(&dir)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(log_file(&args.out, "nginx.log")?)
        .spawn()?;
    let master = child.id();
    let proc = Proc {
        name: "nginx",
        child,
    };
    wait_for_port(listen)?;
    let mut pids = vec![master];
    pids.extend(children(master));
    Ok(Some((proc, listen, pids)))
}

/// haproxy as a plain streaming proxy, configured like the nginx path: two threads for the two
/// cores, pooled upstream connections, no logging, timeouts that outlast the idle streams.
fn haproxy_cfg(listen: SocketAddr, backend: SocketAddr, maxconn: u64) -> String {
    format!(
        r#"# haproxy as a plain streaming proxy: the second C baseline (written by benches/overhead/run.rs).
global
    # Two threads for the two cores, as nginx's two worker processes.
    nbthread 2
    # Client connections; haproxy asks for about 2 x maxconn descriptors (each stream also holds
    # a server connection) and will not start above the hard limit (strict-limits), so the
    # orchestrator derives it from the limit it inherits. No `log` line: nothing is logged.
    maxconn {maxconn}
defaults
    mode http
    # Send each chunk as soon as it is read: without it haproxy passes MSG_MORE while a response
    # is in progress and the kernel may hold a chunk back waiting for a fuller packet.
    option http-no-delay
    # Any request may take any pooled upstream connection (nginx: upstream keepalive).
    http-reuse always
    timeout connect 5s
    # Idle streams stay open for 2 minutes.
    timeout client 10m
    timeout server 10m
frontend bench
    bind {listen}
    default_backend backend
backend backend
    server backend {backend}
"#
    )
}

/// The soft `RLIMIT_NOFILE` this process (and so every proxy it starts) runs under.
fn nofile_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn start_haproxy(
    args: &RunArgs,
    backend: SocketAddr,
) -> Result<Option<(Proc, SocketAddr, Vec<u32>)>, Error> {
    if !args.haproxy.exists() {
        eprintln!(
            "haproxy not found at {}: skipping the haproxy path",
            args.haproxy.display()
        );
        return Ok(None);
    }
    let dir = std::fs::canonicalize(&args.out)?.join("haproxy");
    std::fs::create_dir_all(&dir)?;
    let listen = free_port()?;
    // Room for 10 000 streams, within the descriptors there are (a few dozen kept for listeners
    // and pollers).
    let maxconn = nofile_limit().map_or(10_000, |n| (n.saturating_sub(100) / 2).min(20_000));
    let conf = dir.join("haproxy.cfg");
    std::fs::write(&conf, haproxy_cfg(listen, backend, maxconn))?;
    // -db: foreground, one process (no master-worker), so its pid carries the CPU of all threads.
    let child = Command::new(&args.haproxy)
        .arg("-f")
        .arg(&conf)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(log_file(&args.out, "haproxy.log")?)
        .spawn()?;
    let pid = child.id();
    let proc = Proc {
        name: "haproxy",
        child,
    };
    wait_for_port(listen)?;
    Ok(Some((proc, listen, vec![pid])))
}

/// One path under test.
struct PathUnderTest {
    name: &'static str,
    addr: SocketAddr,
    /// What the load client asks for: [`CHAT_PATH`], or [`UNMETERED_PATH`] (tokenmeter forwards
    /// it without metering its events).
    request_path: &'static str,
    /// The proxy's processes (empty for direct).
    pids: Vec<u32>,
}

fn cpu(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&pid| proc_cpu_secs(pid)).sum()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// One line of results.jsonl.
#[derive(Debug, Serialize, Deserialize, Clone)]
struct Record {
    kind: String,
    rep: usize,
    path: String,
    streams: usize,
    interval_us: u64,
    proxy_cpu_s: f64,
    backend_cpu_s: f64,
    loadavg: String,
    #[serde(default)]
    load: Option<LoadResult>,
    #[serde(default)]
    idle: Option<IdleResult>,
}

fn client(args: &[String]) -> Result<String, Error> {
    let output = Command::new(self_exe()?)
        .args(args)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!("client {args:?} failed: {}", output.status).into());
    }
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}

struct Ctx<'a> {
    results: std::fs::File,
    records: Vec<Record>,
    backend_pid: u32,
    args: &'a RunArgs,
}

impl Ctx<'_> {
    fn load(
        &mut self,
        kind: &str,
        rep: usize,
        path: &PathUnderTest,
        streams: usize,
        interval_us: u64,
        secs: f64,
    ) -> Result<(), Error> {
        let warmup = self.args.warmup.min(secs / 2.0);
        let chunks = if interval_us == 0 {
            self.args.chunks * 16
        } else {
            self.args.chunks
        };
        let cpu0 = cpu(&path.pids);
        let backend0 = cpu(&[self.backend_pid]);
        let json = client(&[
            "load".into(),
            "--addr".into(),
            path.addr.to_string(),
            "--streams".into(),
            streams.to_string(),
            "--chunks".into(),
            chunks.to_string(),
            "--interval-us".into(),
            interval_us.to_string(),
            "--secs".into(),
            secs.to_string(),
            "--warmup".into(),
            warmup.to_string(),
            "--path".into(),
            path.request_path.into(),
        ])?;
        let result: LoadResult = serde_json::from_str(&json)?;
        let record = Record {
            kind: kind.to_owned(),
            rep,
            path: path.name.to_owned(),
            streams,
            interval_us,
            proxy_cpu_s: cpu(&path.pids) - cpu0,
            backend_cpu_s: cpu(&[self.backend_pid]) - backend0,
            loadavg: loadavg(),
            load: Some(result),
            idle: None,
        };
        self.push(record)
    }

    fn idle(&mut self, path: &PathUnderTest, streams: usize) -> Result<(), Error> {
        let pids = path
            .pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let json = client(&[
            "idle".into(),
            "--addr".into(),
            path.addr.to_string(),
            "--streams".into(),
            streams.to_string(),
            "--pids".into(),
            pids,
        ])?;
        let result: IdleResult = serde_json::from_str(&json)?;
        let record = Record {
            kind: "idle".to_owned(),
            rep: 0,
            path: path.name.to_owned(),
            streams,
            interval_us: 0,
            proxy_cpu_s: 0.0,
            backend_cpu_s: 0.0,
            loadavg: loadavg(),
            load: None,
            idle: Some(result),
        };
        self.push(record)
    }

    fn push(&mut self, record: Record) -> Result<(), Error> {
        let line = serde_json::to_string(&record)?;
        eprintln!("{line}");
        writeln!(self.results, "{line}")?;
        self.records.push(record);
        Ok(())
    }
}

/// Runs everything; writes `results.jsonl` and `summary.md` under `--out`.
pub fn run(args: RunArgs, _runtime: &tokio::runtime::Runtime) -> Result<(), Error> {
    std::fs::create_dir_all(&args.out)?;
    let (backend, backend_addr) = start_backend(&args.out)?;
    let backend_pid = backend.child.id();
    let (_tokenmeter, tm_addr, tm_pids) = start_tokenmeter(&args, backend_addr)?;
    let nginx = start_nginx(&args, backend_addr)?;
    let haproxy = start_haproxy(&args, backend_addr)?;
    let (_bare, bare_addr, bare_pids) = start_bare(&args.out, backend_addr)?;
    let mut paths = vec![
        PathUnderTest {
            name: "direct",
            addr: backend_addr,
            request_path: CHAT_PATH,
            pids: Vec::new(),
        },
        PathUnderTest {
            name: "tokenmeter",
            addr: tm_addr,
            request_path: CHAT_PATH,
            pids: tm_pids.clone(),
        },
        PathUnderTest {
            name: "tokenmeter-unmetered",
            addr: tm_addr,
            request_path: UNMETERED_PATH,
            pids: tm_pids,
        },
        PathUnderTest {
            name: "hyper-bare",
            addr: bare_addr,
            request_path: CHAT_PATH,
            pids: bare_pids,
        },
    ];
    for (name, started) in [("nginx", &nginx), ("haproxy", &haproxy)] {
        if let Some((_, addr, pids)) = started {
            paths.push(PathUnderTest {
                name,
                addr: *addr,
                request_path: CHAT_PATH,
                pids: pids.clone(),
            });
        }
    }
    let mut ctx = Ctx {
        results: std::fs::File::create(args.out.join("results.jsonl"))?,
        records: Vec::new(),
        backend_pid,
        args: &args,
    };
    // Warm every path (pools, allocator arenas, page cache) before anything is measured.
    for path in &paths {
        ctx.load("warm", 0, path, 8, 1_000, 1.0)?;
    }
    for rep in 0..args.reps {
        for &streams in &args.concurrency {
            let interval = args
                .interval_us
                .max(streams as u64 * 1_000_000 / args.max_rate.max(1));
            for k in 0..paths.len() {
                let path = &paths[(k + rep) % paths.len()];
                ctx.load("latency", rep, path, streams, interval, args.secs)?;
            }
        }
        for k in 0..paths.len() {
            let path = &paths[(k + rep) % paths.len()];
            let (streams, secs) = (args.saturation_streams, args.saturation_secs);
            ctx.load("saturation", rep, path, streams, 0, secs)?;
        }
    }
    if args.idle_streams > 0 {
        // Once per proxy process (the unmetered path is tokenmeter's process again).
        let proxies = paths
            .iter()
            .filter(|p| !p.pids.is_empty() && p.request_path == CHAT_PATH);
        for path in proxies {
            ctx.idle(path, args.idle_streams)?;
        }
    }
    let summary = summarize(&ctx.records, &args);
    std::fs::write(args.out.join("summary.md"), &summary)?;
    println!("{summary}");
    drop(nginx);
    drop(haproxy);
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Per (kind, streams): path -> rep -> record.
type Grouped<'a> = BTreeMap<(String, usize), BTreeMap<String, BTreeMap<usize, &'a Record>>>;

fn group(records: &[Record]) -> Grouped<'_> {
    let mut out: Grouped<'_> = BTreeMap::new();
    for record in records.iter().filter(|r| r.load.is_some()) {
        out.entry((record.kind.clone(), record.streams))
            .or_default()
            .entry(record.path.clone())
            .or_default()
            .insert(record.rep, record);
    }
    out
}

fn cpu_per_million(record: &Record) -> f64 {
    let chunks = record.load.as_ref().map_or(0, |l| l.chunks_total);
    if chunks == 0 {
        f64::NAN
    } else {
        record.proxy_cpu_s / chunks as f64 * 1e6
    }
}

fn fmt(value: f64) -> String {
    if !value.is_finite() {
        "–".to_owned()
    } else if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The median over reps of `f(path) - f(direct)`, paired by repetition.
fn added(
    by_path: &BTreeMap<String, BTreeMap<usize, &Record>>,
    path: &str,
    f: impl Fn(&LoadResult) -> f64,
) -> f64 {
    let (Some(this), Some(direct)) = (by_path.get(path), by_path.get("direct")) else {
        return f64::NAN;
    };
    median(
        this.iter()
            .filter_map(|(rep, record)| {
                let base = direct.get(rep)?.load.as_ref()?;
                Some(f(record.load.as_ref()?) - f(base))
            })
            .collect(),
    )
}

fn med(reps: &BTreeMap<usize, &Record>, f: impl Fn(&Record) -> f64) -> f64 {
    median(reps.values().map(|r| f(r)).collect())
}

fn summarize(records: &[Record], args: &RunArgs) -> String {
    let grouped = group(records);
    let mut out = String::new();
    let paths = [
        "direct",
        "tokenmeter",
        "tokenmeter-unmetered",
        "hyper-bare",
        "nginx",
        "haproxy",
    ];
    out.push_str(&format!(
        "Medians of {} repetitions; added = median of per-repetition differences against direct. \
         Latencies in µs; CPU in CPU-seconds of the proxy process(es) per million content chunks.\n\n",
        args.reps
    ));
    out.push_str("### Latency (paced streams)\n\n");
    out.push_str("| streams | gap/stream | path | chunk p50 | chunk p99 | added p50 | added p99 | TTFT p50 | TTFT p99 | added TTFT p50 | added TTFT p99 | chunks/s | proxy CPU s/M chunks | load avg (1 5 15) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for ((kind, streams), by_path) in &grouped {
        if kind != "latency" {
            continue;
        }
        for path in paths {
            let Some(reps) = by_path.get(path) else {
                continue;
            };
            let l = |f: fn(&LoadResult) -> f64| med(reps, |r| r.load.as_ref().map_or(f64::NAN, f));
            let interval = reps.values().next().map_or(0, |r| r.interval_us);
            let loads: Vec<_> = reps.values().map(|r| r.loadavg.clone()).collect();
            out.push_str(&format!(
                "| {streams} | {} ms | {path} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                interval / 1000,
                fmt(l(|x| x.chunk_p50_us)),
                fmt(l(|x| x.chunk_p99_us)),
                fmt(added(by_path, path, |x| x.chunk_p50_us)),
                fmt(added(by_path, path, |x| x.chunk_p99_us)),
                fmt(l(|x| x.ttft_p50_us)),
                fmt(l(|x| x.ttft_p99_us)),
                fmt(added(by_path, path, |x| x.ttft_p50_us)),
                fmt(added(by_path, path, |x| x.ttft_p99_us)),
                fmt(l(|x| x.chunks_per_s)),
                fmt(med(reps, cpu_per_million)),
                loads.join(" / "),
            ));
        }
    }
    out.push_str("\n### Saturation (chunks back to back)\n\n| streams | path | chunks/s | proxy CPU s/M chunks | client CPU s | backend CPU s | load avg |\n|---|---|---|---|---|---|---|\n");
    let mut saturation_cpu = BTreeMap::new();
    for ((kind, streams), by_path) in &grouped {
        if kind != "saturation" {
            continue;
        }
        for path in paths {
            let Some(reps) = by_path.get(path) else {
                continue;
            };
            let per_million = med(reps, cpu_per_million);
            saturation_cpu.insert(path, per_million);
            out.push_str(&format!(
                "| {streams} | {path} | {} | {} | {} | {} | {} |\n",
                fmt(med(reps, |r| r
                    .load
                    .as_ref()
                    .map_or(f64::NAN, |l| l.chunks_per_s))),
                fmt(per_million),
                fmt(med(reps, |r| r
                    .load
                    .as_ref()
                    .map_or(f64::NAN, |l| l.client_cpu_s))),
                fmt(med(reps, |r| r.backend_cpu_s)),
                reps.values()
                    .map(|r| r.loadavg.clone())
                    .collect::<Vec<_>>()
                    .join(" / "),
            ));
        }
    }
    out.push_str("\n### Idle streams\n\n| path | streams open | RSS before (MiB) | RSS with streams (MiB) | KiB per stream |\n|---|---|---|---|---|\n");
    let mut idle_kib = BTreeMap::new();
    for record in records.iter().filter(|r| r.kind == "idle") {
        if let Some(idle) = &record.idle {
            idle_kib.insert(record.path.clone(), idle.kib_per_stream);
            out.push_str(&format!(
                "| {} | {} / {} | {} | {} | {} |\n",
                record.path,
                idle.streams_open,
                idle.streams_wanted,
                fmt(idle.rss_before_kib as f64 / 1024.0),
                fmt(idle.rss_after_kib as f64 / 1024.0),
                fmt(idle.kib_per_stream),
            ));
        }
    }
    out.push_str(&breakdown(
        &grouped,
        &saturation_cpu,
        &idle_kib,
        args.concurrency.iter().min().copied(),
        args.concurrency.iter().max().copied(),
    ));
    for baseline in ["nginx", "haproxy"] {
        if records.iter().any(|r| r.path == baseline) {
            out.push_str(&versus(
                baseline,
                &grouped,
                &saturation_cpu,
                &idle_kib,
                args.concurrency.iter().max().copied(),
            ));
        }
    }
    out
}

/// The breakdown table: what a bare proxy on hyper's server and client (hyper-bare), tokenmeter
/// forwarding without metering, and tokenmeter metering every event each cost, next to nginx, at
/// the lowest (`low`) and the highest (`top`) paced concurrency and at saturation. The difference
/// between the two tokenmeter columns is the metering; the unmetered column is the forwarding.
fn breakdown(
    grouped: &Grouped<'_>,
    saturation_cpu: &BTreeMap<&str, f64>,
    idle_kib: &BTreeMap<String, f64>,
    low: Option<usize>,
    top: Option<usize>,
) -> String {
    let columns = ["hyper-bare", "tokenmeter-unmetered", "tokenmeter", "nginx"];
    let mut out = format!(
        "\n### Where the cost goes: forwarding and metering\n\n| figure | {} |\n|---|---|---|---|---|\n",
        columns.join(" | ")
    );
    let mut row = |label: String, value: &dyn Fn(&str) -> f64| {
        let cells: Vec<String> = columns.iter().map(|path| fmt(value(path))).collect();
        out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    };
    row("CPU s per M chunks (saturation)".to_owned(), &|path| {
        saturation_cpu.get(path).copied().unwrap_or(f64::NAN)
    });
    let paced = |streams: Option<usize>| {
        streams.and_then(|n| Some((n, grouped.get(&("latency".to_owned(), n))?)))
    };
    if let Some((top, by_path)) = paced(top) {
        row(
            format!("CPU s per M chunks (paced, {top} streams)"),
            &|path| {
                by_path
                    .get(path)
                    .map_or(f64::NAN, |reps| med(reps, cpu_per_million))
            },
        );
    }
    for (streams, label, f) in [
        (
            low,
            "added chunk p50 µs",
            (|x: &LoadResult| x.chunk_p50_us) as fn(&LoadResult) -> f64,
        ),
        (top, "added chunk p99 µs", |x: &LoadResult| x.chunk_p99_us),
        (top, "added TTFT p99 µs", |x: &LoadResult| x.ttft_p99_us),
    ] {
        if let Some((n, by_path)) = paced(streams) {
            row(format!("{label} ({n} streams)"), &|path| {
                added(by_path, path, f)
            });
        }
    }
    row("KiB per idle stream".to_owned(), &|path| {
        idle_kib.get(path).copied().unwrap_or(f64::NAN)
    });
    out
}

/// The `tokenmeter / <baseline>` table: the figures the headline quotes, tokenmeter's against one
/// C baseline's, at the saturation point and the highest paced concurrency (`top`).
fn versus(
    baseline: &str,
    grouped: &Grouped<'_>,
    saturation_cpu: &BTreeMap<&str, f64>,
    idle_kib: &BTreeMap<String, f64>,
    top: Option<usize>,
) -> String {
    let mut out = format!(
        "\n### tokenmeter / {baseline}\n\n| figure | tokenmeter | {baseline} | ratio |\n|---|---|---|---|\n"
    );
    let mut row = |label: &str, a: f64, b: f64| {
        out.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            fmt(a),
            fmt(b),
            fmt(a / b)
        ));
    };
    if let (Some(tm), Some(base)) = (
        saturation_cpu.get("tokenmeter"),
        saturation_cpu.get(baseline),
    ) {
        row("CPU s per M chunks (saturation)", *tm, *base);
    }
    let paced = top.and_then(|top| Some((top, grouped.get(&("latency".to_owned(), top))?)));
    if let Some((top, by_path)) = paced {
        if let (Some(tm), Some(base)) = (by_path.get("tokenmeter"), by_path.get(baseline)) {
            row(
                &format!("CPU s per M chunks (paced, {top} streams)"),
                med(tm, cpu_per_million),
                med(base, cpu_per_million),
            );
            for (label, f) in [
                (
                    "added chunk p99 µs",
                    (|x: &LoadResult| x.chunk_p99_us) as fn(&LoadResult) -> f64,
                ),
                ("added TTFT p99 µs", |x: &LoadResult| x.ttft_p99_us),
            ] {
                row(
                    &format!("{label} ({top} streams)"),
                    added(by_path, "tokenmeter", f),
                    added(by_path, baseline, f),
                );
            }
        }
    }
    if let (Some(tm), Some(base)) = (idle_kib.get("tokenmeter"), idle_kib.get(baseline)) {
        row("KiB per idle stream", *tm, *base);
    }
    out
}
