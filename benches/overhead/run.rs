//! The orchestrator: starts the backend, tokenmeter, the bare hyper proxy and the C baselines
//! (nginx, haproxy), runs the load client against every path interleaved (the order rotates every
//! repetition; tokenmeter twice, metered and unmetered), reads each proxy's CPU from
//! `/proc/<pid>/stat` around every run, and writes `results.jsonl` (every run) and `summary.md`
//! (medians over repetitions, added figures paired per repetition against direct, or against
//! direct-tls for the TLS paths: [`super::paths`]). `--paths` runs a subset (`--tls-only` in
//! scripts/bench-overhead.sh: the TLS paths and their baseline; `--budgets`: the tenant and
//! budget paths, [`super::budgets`], with plain tokenmeter and direct).
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::budgets::{self, StoreFigures};
use super::client::{IdleResult, LoadResult, CHAT_PATH};
use super::nginx::{self, NginxTls};
use super::paths::{self, PathSpec};
use super::pki::{self, Pki, SERVER_NAME};
use super::procs::{free_port, log_file, nofile_limit, start_role, wait_for_port, Error, Proc};
use super::report::{summarize, Record};
use super::{proc_cpu_secs, self_exe};

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
    /// The redis-server binary (Debian's) of the tokenmeter-budget-redis path; the path is skipped
    /// when it is not there.
    #[arg(long, default_value = "/usr/bin/redis-server")]
    redis_server: PathBuf,
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
    /// Seconds of the request run (0 = none): `request_streams` streams of 1-chunk requests back
    /// to back, so that what a proxy does once per request (routing, admission against a budget,
    /// the finish) is not diluted by the chunks of a long stream. CPU per request comes from it.
    #[arg(long, default_value_t = 0.0)]
    request_secs: f64,
    #[arg(long, default_value_t = 64)]
    request_streams: usize,
    /// Idle streams for the memory figure (0 = skip).
    #[arg(long, default_value_t = 10_000)]
    idle_streams: usize,
    /// The paths to run, comma-separated (default: all but the opt-in tenant paths; `default`
    /// names that set); their baselines (direct, direct-tls, tokenmeter for the tenant paths)
    /// are added. Names: see `paths.rs` (e.g. nginx-tls-client, tokenmeter-budget-redis).
    #[arg(long, value_delimiter = ',')]
    paths: Vec<String>,
}

/// The backend, with its plain address and, given the certificates, its TLS address.
fn start_backend(
    out: &Path,
    pki: Option<&Pki>,
) -> Result<(Proc, SocketAddr, Option<SocketAddr>), Error> {
    let mut args = vec!["backend".into(), "--listen".into(), "127.0.0.1:0".into()];
    if let Some(pki) = pki {
        args.extend(["--tls-listen".into(), "127.0.0.1:0".into()]);
        args.extend(["--tls-cert".into(), pki.cert.display().to_string()]);
        args.extend(["--tls-key".into(), pki.key.display().to_string()]);
    }
    let (proc, addrs) = start_role(out, "backend", "backend", &args)?;
    let plain = addrs[0];
    let tls = addrs.get(1).copied();
    if pki.is_some() && tls.is_none() {
        return Err("the backend did not say where it serves TLS".into());
    }
    Ok((proc, plain, tls))
}

/// One run's load: `streams` streams of `chunks`-chunk requests, `interval_us` between chunks (0:
/// back to back), for `secs`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    streams: usize,
    chunks: u64,
    interval_us: u64,
    secs: f64,
}

/// How long a run on the Redis budget path may leave settlements to do: past it the run fails.
const DRAIN_WITHIN: Duration = Duration::from_secs(120);

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
    let (proc, addrs) = start_role(out, "hyper-bare", "bare", &args)?;
    let pid = proc.child.id();
    Ok((proc, addrs[0], vec![pid]))
}

/// What tokenmeter's configuration sets; the rest of it is the shipped defaults.
enum TokenmeterConfig<'a> {
    Defaults,
    /// `[server.tls]` with the benchmark's certificate (ALPN h2 + http/1.1 offered; the client
    /// asks for http/1.1). Reloading stays at its default (the files are read every 10 s).
    Client(&'a Pki),
    /// An `https://` upstream with `[upstream.tls]`: the benchmark's CA, the name `localhost`
    /// (SNI and verification, as nginx's `proxy_ssl_name`).
    Upstream(&'a Pki),
    /// `[tenants]` with the header source, and a budget in `store` when there is one
    /// ([`budgets::tenants_toml`]).
    Tenants(Option<budgets::Store>),
    /// One `balance = "slo"` pool of [`SLO_BACKENDS`] backends, all the one backend, with a
    /// gateway queue; targets no request misses.
    Slo,
}

/// Backends in the `tokenmeter-slo` path's pool: the placement scores each.
const SLO_BACKENDS: usize = 16;

/// The `tokenmeter-slo` path's configuration over `backend`.
fn slo_toml(backend: SocketAddr) -> String {
    let urls = vec![format!("\"http://{backend}\""); SLO_BACKENDS].join(", ");
    format!(
        "[slo]\nttft = \"60s\"\ntpot = \"10s\"\n\n[[pools]]\nname = \"replicas\"\nurls = [{urls}]\nbalance = \"slo\"\n\n[pools.queue]\ncapacity = 100000\n"
    )
}

/// tokenmeter as path `name` (its config in `<out>/<name>.toml`, its log in `<out>/<name>.log`),
/// forwarding to `backend` (`http://` or `https://` as `config` says), its admin port on `admin`.
fn start_tokenmeter(
    args: &RunArgs,
    name: &'static str,
    backend: SocketAddr,
    config: TokenmeterConfig<'_>,
    admin: SocketAddr,
) -> Result<(Proc, SocketAddr, Vec<u32>), Error> {
    let listen = free_port()?;
    let (scheme, toml) = match config {
        TokenmeterConfig::Defaults => ("http", String::new()),
        TokenmeterConfig::Client(pki) => (
            "http",
            format!(
                "[server.tls]\ncert = {:?}\nkey = {:?}\n",
                pki.cert.display().to_string(),
                pki.key.display().to_string()
            ),
        ),
        TokenmeterConfig::Upstream(pki) => (
            "https",
            format!(
                "[upstream.tls]\nca = {:?}\nserver_name = {SERVER_NAME:?}\n",
                pki.ca.display().to_string()
            ),
        ),
        TokenmeterConfig::Tenants(store) => ("http", budgets::tenants_toml(store)),
        TokenmeterConfig::Slo => ("http", slo_toml(backend)),
    };
    let mut command = Command::new(&args.tokenmeter);
    command.arg("serve");
    if !toml.is_empty() {
        let config = args.out.join(format!("{name}.toml"));
        // The shipped defaults but for these tables; listen and upstream come from the env.
        std::fs::write(
            &config,
            format!("# {name}: written by benches/overhead/run.rs\n{toml}"),
        )?;
        command.arg("--config").arg(config);
    }
    let child = command
        .env("TOKENMETER_LISTEN", listen.to_string())
        .env("TOKENMETER_ADMIN_LISTEN", admin.to_string())
        .env("TOKENMETER_UPSTREAM", format!("{scheme}://{backend}"))
        .env("RUST_LOG", "warn")
        // It would win over the file's budget store.
        .env_remove("TOKENMETER_BUDGET_STORE")
        .stdout(Stdio::null())
        .stderr(log_file(&args.out, &format!("{name}.log"))?)
        .spawn()?;
    let pid = child.id();
    let proc = Proc { name, child };
    wait_for_port(listen)?;
    Ok((proc, listen, vec![pid]))
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
    /// The load client speaks TLS to `addr`.
    client_tls: bool,
    /// What the load client asks for: [`CHAT_PATH`], or [`UNMETERED_PATH`] (tokenmeter forwards
    /// it without metering its events).
    request_path: &'static str,
    /// The proxy's processes (empty for direct).
    pids: Vec<u32>,
    /// A tenant path's admin port and, with a Redis store, Redis's address and pid: what the store
    /// did in each run is read from them around it ([`StoreFigures`]), Redis's CPU from its pid.
    admin: Option<SocketAddr>,
    redis: Option<(SocketAddr, u32)>,
}

fn cpu(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&pid| proc_cpu_secs(pid)).sum()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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
    /// The certificates, when a TLS path runs.
    pki: Option<Pki>,
}

impl Ctx<'_> {
    /// `--tls-ca <ca>` for a path the client speaks TLS on.
    fn tls_args(&self, path: &PathUnderTest) -> Result<Vec<String>, Error> {
        if !path.client_tls {
            return Ok(Vec::new());
        }
        let pki = self.pki.as_ref().ok_or("a TLS path without certificates")?;
        Ok(vec!["--tls-ca".into(), pki.ca.display().to_string()])
    }

    /// One run of the load client against `path`.
    fn load(
        &mut self,
        kind: &str,
        rep: usize,
        path: &PathUnderTest,
        shape: Shape,
    ) -> Result<(), Error> {
        let Shape {
            streams,
            chunks,
            interval_us,
            secs,
        } = shape;
        let warmup = self.args.warmup.min(secs / 2.0);
        let redis_addr = path.redis.map(|(addr, _)| addr);
        let redis_pid: Vec<u32> = path.redis.iter().map(|&(_, pid)| pid).collect();
        let store0 = path
            .admin
            .map(|admin| StoreFigures::read(admin, redis_addr))
            .transpose()?;
        let cpu0 = cpu(&path.pids);
        let backend0 = cpu(&[self.backend_pid]);
        let redis0 = cpu(&redis_pid);
        let mut client_args = vec![
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
        ];
        client_args.extend(self.tls_args(path)?);
        let json = client(&client_args)?;
        // The settlements the run left queued are its own: their CPU too.
        let drain = redis_addr
            .map(|redis| budgets::drain(redis, DRAIN_WITHIN))
            .transpose()?;
        let proxy_cpu_s = cpu(&path.pids) - cpu0;
        let backend_cpu_s = cpu(&[self.backend_pid]) - backend0;
        let store_cpu_s = path.redis.map(|_| cpu(&redis_pid) - redis0);
        let result: LoadResult = serde_json::from_str(&json)?;
        let store = match (path.admin, store0) {
            (Some(admin), Some(before)) => {
                Some(StoreFigures::read(admin, redis_addr)?.since(&before))
            }
            _ => None,
        };
        let record = Record {
            kind: kind.to_owned(),
            rep,
            path: path.name.to_owned(),
            streams,
            interval_us,
            proxy_cpu_s,
            backend_cpu_s,
            store_cpu_s,
            drain_s: drain.map(|d| d.as_secs_f64()),
            loadavg: loadavg(),
            load: Some(result),
            idle: None,
            store,
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
        let mut client_args = vec![
            "idle".into(),
            "--addr".into(),
            path.addr.to_string(),
            "--streams".into(),
            streams.to_string(),
            "--pids".into(),
            pids,
        ];
        client_args.extend(self.tls_args(path)?);
        let json = client(&client_args)?;
        let result: IdleResult = serde_json::from_str(&json)?;
        let record = Record {
            kind: "idle".to_owned(),
            rep: 0,
            path: path.name.to_owned(),
            streams,
            interval_us: 0,
            proxy_cpu_s: 0.0,
            backend_cpu_s: 0.0,
            store_cpu_s: None,
            drain_s: None,
            loadavg: loadavg(),
            load: None,
            idle: Some(result),
            store: None,
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
    let selected = paths::select(&args.paths)?;
    let pki = if selected.iter().any(|p| paths::is_tls(p.name)) {
        Some(pki::generate(&args.out.join("tls"))?)
    } else {
        None
    };
    let (backend, backend_addr, backend_tls) = start_backend(&args.out, pki.as_ref())?;
    let backend_pid = backend.child.id();
    let backends = Backends {
        plain: backend_addr,
        tls: backend_tls,
    };
    // Stopped (dropped) when the run ends or fails.
    let (_procs, paths) = start_paths(&args, &selected, backends, pki.as_ref())?;
    let mut ctx = Ctx {
        results: std::fs::File::create(args.out.join("results.jsonl"))?,
        records: Vec::new(),
        backend_pid,
        args: &args,
        pki,
    };
    // Warm every path (pools, allocator arenas, page cache) before anything is measured.
    let chunks = args.chunks;
    for path in &paths {
        let shape = Shape {
            streams: 8,
            chunks,
            interval_us: 1_000,
            secs: 1.0,
        };
        ctx.load("warm", 0, path, shape)?;
    }
    for rep in 0..args.reps {
        for &streams in &args.concurrency {
            let interval = args
                .interval_us
                .max(streams as u64 * 1_000_000 / args.max_rate.max(1));
            for k in 0..paths.len() {
                let path = &paths[(k + rep) % paths.len()];
                let shape = Shape {
                    streams,
                    chunks,
                    interval_us: interval,
                    secs: args.secs,
                };
                ctx.load("latency", rep, path, shape)?;
            }
        }
        for k in 0..paths.len() {
            let path = &paths[(k + rep) % paths.len()];
            let shape = Shape {
                streams: args.saturation_streams,
                chunks: chunks * 16,
                interval_us: 0,
                secs: args.saturation_secs,
            };
            ctx.load("saturation", rep, path, shape)?;
        }
        if args.request_secs > 0.0 {
            for k in 0..paths.len() {
                let path = &paths[(k + rep) % paths.len()];
                let shape = Shape {
                    streams: args.request_streams,
                    chunks: 1,
                    interval_us: 0,
                    secs: args.request_secs,
                };
                ctx.load("requests", rep, path, shape)?;
            }
        }
    }
    for path in &paths {
        if let Some(admin) = path.admin {
            let redis = path.redis.map(|(addr, _)| addr);
            budgets::save_final(&args.out, path.name, admin, redis)?;
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
    let summary = summarize(&ctx.records, args.reps, &args.concurrency);
    std::fs::write(args.out.join("summary.md"), &summary)?;
    println!("{summary}");
    Ok(())
}

/// Where the backend listens: plain HTTP, and TLS when a TLS path runs.
#[derive(Debug, Clone, Copy)]
struct Backends {
    plain: SocketAddr,
    tls: Option<SocketAddr>,
}

/// Starts the proxies of the `selected` paths (a path whose proxy is not installed is left out)
/// and returns them with the paths, in `selected`'s order.
fn start_paths(
    args: &RunArgs,
    selected: &[&'static PathSpec],
    backends: Backends,
    pki: Option<&Pki>,
) -> Result<(Vec<Proc>, Vec<PathUnderTest>), Error> {
    let wants = |name: &str| selected.iter().any(|p| p.name == name);
    let need_pki = || pki.ok_or("TLS paths need the certificates");
    let need_tls_backend = || backends.tls.ok_or("TLS paths need the backend's TLS port");
    let mut procs = Vec::new();
    // name -> (address, pids) of each started proxy; tokenmeter's serves two paths.
    let mut started: BTreeMap<&str, (SocketAddr, Vec<u32>)> = BTreeMap::new();
    // The tenant paths' admin ports, by name.
    let mut admins: BTreeMap<&str, SocketAddr> = BTreeMap::new();
    let mut keep =
        |procs: &mut Vec<Proc>, name, (proc, addr, pids): (Proc, SocketAddr, Vec<u32>)| {
            procs.push(proc);
            started.insert(name, (addr, pids));
        };
    if wants("tokenmeter") || wants("tokenmeter-unmetered") {
        let config = TokenmeterConfig::Defaults;
        let tm = start_tokenmeter(args, "tokenmeter", backends.plain, config, free_port()?)?;
        keep(&mut procs, "tokenmeter", tm);
    }
    if wants("hyper-bare") {
        keep(
            &mut procs,
            "hyper-bare",
            start_bare(&args.out, backends.plain)?,
        );
    }
    if wants("nginx") {
        if let Some(n) = nginx::start(
            &args.nginx,
            &args.out,
            "nginx",
            backends.plain,
            NginxTls::None,
        )? {
            keep(&mut procs, "nginx", n);
        }
    }
    if wants("haproxy") {
        if let Some(h) = start_haproxy(args, backends.plain)? {
            keep(&mut procs, "haproxy", h);
        }
    }
    if wants("tokenmeter-tls-client") {
        let tls = TokenmeterConfig::Client(need_pki()?);
        let tm = start_tokenmeter(
            args,
            "tokenmeter-tls-client",
            backends.plain,
            tls,
            free_port()?,
        )?;
        keep(&mut procs, "tokenmeter-tls-client", tm);
    }
    if wants("tokenmeter-tls-upstream") {
        let tls = TokenmeterConfig::Upstream(need_pki()?);
        let backend = need_tls_backend()?;
        let tm = start_tokenmeter(args, "tokenmeter-tls-upstream", backend, tls, free_port()?)?;
        keep(&mut procs, "tokenmeter-tls-upstream", tm);
    }
    if wants("nginx-tls-client") {
        let tls = NginxTls::Client(need_pki()?);
        if let Some(n) = nginx::start(
            &args.nginx,
            &args.out,
            "nginx-tls-client",
            backends.plain,
            tls,
        )? {
            keep(&mut procs, "nginx-tls-client", n);
        }
    }
    if wants("nginx-tls-upstream") {
        let tls = NginxTls::Upstream(need_pki()?);
        let backend = need_tls_backend()?;
        if let Some(n) = nginx::start(&args.nginx, &args.out, "nginx-tls-upstream", backend, tls)? {
            keep(&mut procs, "nginx-tls-upstream", n);
        }
    }
    // The tenant paths, a tokenmeter each; the Redis of the last one stops after it (the procs
    // stop in order), so that its settlements are not refused on the way out.
    let mut tenant_paths = vec![
        ("tokenmeter-tenants", None),
        ("tokenmeter-budget-memory", Some(budgets::Store::Memory)),
    ];
    let (mut redis, mut redis_server) = (None, None);
    if wants("tokenmeter-budget-redis") {
        if let Some((server, addr)) = budgets::start_redis(&args.redis_server, &args.out)? {
            redis = Some((addr, server.child.id()));
            redis_server = Some(server);
            tenant_paths.push(("tokenmeter-budget-redis", Some(budgets::Store::Redis(addr))));
        }
    }
    for (name, store) in tenant_paths {
        if !wants(name) {
            continue;
        }
        let admin = free_port()?;
        let config = TokenmeterConfig::Tenants(store);
        let tm = start_tokenmeter(args, name, backends.plain, config, admin)?;
        keep(&mut procs, name, tm);
        admins.insert(name, admin);
    }
    if wants("tokenmeter-slo") {
        // No budget store to read: its admin port is not one the runs read.
        let tm = start_tokenmeter(
            args,
            "tokenmeter-slo",
            backends.plain,
            TokenmeterConfig::Slo,
            free_port()?,
        )?;
        keep(&mut procs, "tokenmeter-slo", tm);
    }
    procs.extend(redis_server);
    let mut paths = Vec::new();
    for spec in selected {
        let (addr, pids, request_path) = match spec.name {
            "direct" => (backends.plain, Vec::new(), CHAT_PATH),
            "direct-tls" => (need_tls_backend()?, Vec::new(), CHAT_PATH),
            "tokenmeter-unmetered" => match started.get("tokenmeter") {
                Some((addr, pids)) => (*addr, pids.clone(), UNMETERED_PATH),
                None => continue,
            },
            name => match started.get(name) {
                Some((addr, pids)) => (*addr, pids.clone(), CHAT_PATH),
                None => continue, // not installed
            },
        };
        paths.push(PathUnderTest {
            name: spec.name,
            addr,
            client_tls: spec.client_tls,
            request_path,
            pids,
            admin: admins.get(spec.name).copied(),
            redis: redis.filter(|_| spec.name == "tokenmeter-budget-redis"),
        });
    }
    Ok((procs, paths))
}
