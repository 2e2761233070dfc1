//! The load client of the overhead benchmark: a separate process, so the proxy's CPU can be read
//! from `/proc/<pid>/stat` without the client's in it (the client reports its own).
//!
//! `load`: `streams` closed-loop streams, each on its own keep-alive HTTP/1.1 connection (one
//! hyper connection per stream, no pool: the leanest client hyper allows), each asking the backend
//! for `chunks` chunks `interval_us` apart, for `secs` seconds. Every content chunk's backend
//! stamp is subtracted from the wall clock on arrival (chunk latency); TTFT = first content chunk
//! - request sent. Samples from the first `warmup` seconds are dropped (connection set-up).
//!
//! `idle`: opens `streams` streams that get their first chunk and then pause, and reads the
//! proxy's VmRSS before and with them all open.
//!
//! Either mode speaks TLS when given a CA (`--tls-ca`): every connection is then HTTP/1.1 over
//! rustls ([`super::tls::client_config`]), and the result names what was negotiated — on the
//! client's own connection, and on the connection into the backend when the backend serves TLS
//! (its [`BACKEND_TLS_HEADER`]).
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use memchr::memmem;
use rustls_pki_types::ServerName;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_rustls::TlsConnector;

use super::pki::SERVER_NAME;
use super::tls::{describe, BACKEND_TLS_HEADER};
use super::{percentile, proc_cpu_secs, proc_rss_kib, wall_ns};

const MARKER: &[u8] = b"\"content\":\"T";
const STAMP_DIGITS: usize = 19;

/// What `load` measured (one JSON line on stdout).
#[derive(Debug, Serialize, serde::Deserialize, Clone, Default)]
pub struct LoadResult {
    pub streams: usize,
    /// Content chunks received in the whole run (CPU per chunk divides by this).
    pub chunks_total: u64,
    /// Content chunks received in the measured window.
    pub chunks: u64,
    pub requests: u64,
    pub errors: u64,
    pub window_s: f64,
    pub chunks_per_s: f64,
    pub chunk_p50_us: f64,
    pub chunk_p90_us: f64,
    pub chunk_p99_us: f64,
    pub ttft_p50_us: f64,
    pub ttft_p99_us: f64,
    pub client_cpu_s: f64,
    /// What the client's TLS connections negotiated (distinct values joined by ` + `); absent
    /// on plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// What the connections into the TLS backend negotiated, as its responses said; absent when
    /// the backend was reached in plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_tls: Option<String>,
    /// Why the requests counted in `errors` failed, and how many each (`connect`, `status 429`,
    /// `send: ...`, `body: ...`): what a smoke run that saw errors prints.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub error_kinds: BTreeMap<String, u64>,
}

/// Parameters of one load run.
#[derive(Debug, Clone)]
pub struct LoadArgs {
    pub addr: SocketAddr,
    pub streams: usize,
    pub chunks: u64,
    pub interval_us: u64,
    pub secs: f64,
    pub warmup: f64,
    /// The request path: a chat completion (metered), or a path a proxy forwards unmetered.
    pub path: String,
    /// TLS to `addr` (trusting the benchmark's CA), or plain HTTP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

fn request_body(chunks: u64, interval_us: u64, hold_ms: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"bench","messages":[{{"role":"user","content":"Say something long."}}],"stream":true,"stream_options":{{"include_usage":true}},"max_tokens":{chunks},"interval_us":{interval_us},"hold_ms":{hold_ms}}}"#
    ))
}

/// The path of a metered request (a chat completion, as vLLM serves it).
pub const CHAT_PATH: &str = "/v1/chat/completions";

fn request(addr: SocketAddr, path: &str, body: Bytes) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Full::new(body))
        .unwrap_or_else(|_| hyper::Request::new(Full::new(Bytes::new())))
}

/// Finds backend stamps in a stream's frames, including stamps cut across frames.
struct StampScanner {
    finder: memmem::Finder<'static>,
    pending: Vec<u8>,
}

impl StampScanner {
    fn new() -> Self {
        Self {
            finder: memmem::Finder::new(MARKER),
            pending: Vec::new(),
        }
    }

    /// Calls `f` with each complete stamp (ns since the epoch) in `frame`.
    fn feed(&mut self, frame: &[u8], mut f: impl FnMut(u64)) {
        let joined;
        let buf: &[u8] = if self.pending.is_empty() {
            frame
        } else {
            self.pending.extend_from_slice(frame);
            joined = std::mem::take(&mut self.pending);
            &joined
        };
        let mut at = 0;
        let mut keep_from = buf.len().saturating_sub(MARKER.len() - 1);
        while let Some(found) = self.finder.find(&buf[at..]) {
            let digits = at + found + MARKER.len();
            if digits + STAMP_DIGITS > buf.len() {
                keep_from = at + found;
                break;
            }
            let stamp = buf[digits..digits + STAMP_DIGITS]
                .iter()
                .fold(0u64, |n, d| n * 10 + u64::from(d.wrapping_sub(b'0')));
            f(stamp);
            at = digits + STAMP_DIGITS;
            keep_from = keep_from.max(at);
        }
        self.pending.clear();
        self.pending
            .extend_from_slice(&buf[keep_from.min(buf.len())..]);
    }
}

#[derive(Default)]
struct StreamSamples {
    chunk_ns: Vec<u64>,
    ttft_ns: Vec<u64>,
    chunks_total: u64,
    requests: u64,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    tls: BTreeSet<String>,
    backend_tls: BTreeSet<String>,
}

impl StreamSamples {
    /// Counts a failed request, and why (one allocation per distinct reason).
    fn failed(&mut self, why: impl FnOnce() -> String) {
        self.errors += 1;
        *self.error_kinds.entry(why()).or_default() += 1;
    }
}

/// An HTTP/1.1 connection to `addr`, over TLS with `tls`; with what TLS negotiated.
async fn connect(
    addr: SocketAddr,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Option<(http1::SendRequest<Full<Bytes>>, Option<String>)> {
    let stream = TcpStream::connect(addr).await.ok()?;
    stream.set_nodelay(true).ok()?;
    match tls {
        None => {
            let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.ok()?;
            tokio::spawn(conn);
            Some((sender, None))
        }
        Some(config) => {
            let name = ServerName::try_from(SERVER_NAME).ok()?;
            let stream = TlsConnector::from(Arc::clone(config))
                .connect(name, stream)
                .await
                .ok()?;
            let negotiated = describe(stream.get_ref().1);
            let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.ok()?;
            tokio::spawn(conn);
            Some((sender, Some(negotiated)))
        }
    }
}

/// Adds `value` to `set` unless it is there (one allocation per distinct value, not per call).
fn note(set: &mut BTreeSet<String>, value: &str) {
    if !set.contains(value) {
        set.insert(value.to_owned());
    }
}

fn joined(set: &BTreeSet<String>) -> Option<String> {
    (!set.is_empty()).then(|| set.iter().cloned().collect::<Vec<_>>().join(" + "))
}

async fn load_stream(args: Arc<LoadArgs>, start: Instant) -> StreamSamples {
    let mut out = StreamSamples::default();
    let body = request_body(args.chunks, args.interval_us, 0);
    let warm_until = start + Duration::from_secs_f64(args.warmup);
    let stop_at = start + Duration::from_secs_f64(args.secs);
    let mut sender = None;
    while Instant::now() < stop_at {
        let mut conn = match sender.take() {
            Some(conn) => conn,
            None => match connect(args.addr, args.tls.as_ref()).await {
                Some((conn, tls)) => {
                    if let Some(tls) = tls {
                        note(&mut out.tls, &tls);
                    }
                    conn
                }
                None => {
                    out.failed(|| "connect".to_owned());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        // A connection that just ended a response may not have turned back to idle yet: a
        // request sent before it has is refused ("operation was canceled").
        if let Err(err) = conn.ready().await {
            out.failed(|| format!("ready: {err}"));
            continue;
        }
        let sent = Instant::now();
        let response = match conn
            .send_request(request(args.addr, &args.path, body.clone()))
            .await
        {
            Ok(response) if response.status().is_success() => response,
            Ok(response) => {
                out.failed(|| format!("status {}", response.status().as_u16()));
                continue;
            }
            Err(err) => {
                out.failed(|| format!("send: {err}"));
                continue;
            }
        };
        out.requests += 1;
        if let Some(tls) = response.headers().get(BACKEND_TLS_HEADER) {
            note(&mut out.backend_tls, tls.to_str().unwrap_or("(not text)"));
        }
        let mut body = response.into_body();
        let mut scanner = StampScanner::new();
        let mut first = true;
        let mut broke = None;
        loop {
            let frame = match tokio::time::timeout_at(stop_at.into(), body.frame()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(err))) => {
                    broke = Some(err);
                    break;
                }
                Ok(None) => break,
                // The run is over mid-stream: stop without counting an error.
                Err(_) => return out,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let arrived = Instant::now();
            let now_ns = wall_ns();
            let measured = arrived >= warm_until;
            scanner.feed(&data, |stamp| {
                out.chunks_total += 1;
                if measured {
                    out.chunk_ns.push(now_ns.saturating_sub(stamp));
                    if first {
                        out.ttft_ns.push((arrived - sent).as_nanos() as u64);
                    }
                }
                first = false;
            });
        }
        match broke {
            None => sender = Some(conn),
            Some(err) => out.failed(|| format!("body: {err}")),
        }
    }
    out
}

/// Runs the `load` mode and returns its figures.
pub async fn load(args: LoadArgs) -> LoadResult {
    let args = Arc::new(args);
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.streams)
        .map(|_| tokio::spawn(load_stream(Arc::clone(&args), start)))
        .collect();
    let mut all = StreamSamples::default();
    for task in tasks {
        if let Ok(samples) = task.await {
            all.chunk_ns.extend_from_slice(&samples.chunk_ns);
            all.ttft_ns.extend_from_slice(&samples.ttft_ns);
            all.chunks_total += samples.chunks_total;
            all.requests += samples.requests;
            all.errors += samples.errors;
            for (why, n) in samples.error_kinds {
                *all.error_kinds.entry(why).or_default() += n;
            }
            all.tls.extend(samples.tls);
            all.backend_tls.extend(samples.backend_tls);
        }
    }
    let window = (args.secs - args.warmup).max(1e-3);
    all.chunk_ns.sort_unstable();
    all.ttft_ns.sort_unstable();
    let us = |sorted: &[u64], q: f64| percentile(sorted, q) / 1e3;
    LoadResult {
        streams: args.streams,
        chunks_total: all.chunks_total,
        chunks: all.chunk_ns.len() as u64,
        requests: all.requests,
        errors: all.errors,
        window_s: window,
        chunks_per_s: all.chunk_ns.len() as f64 / window,
        chunk_p50_us: us(&all.chunk_ns, 0.50),
        chunk_p90_us: us(&all.chunk_ns, 0.90),
        chunk_p99_us: us(&all.chunk_ns, 0.99),
        ttft_p50_us: us(&all.ttft_ns, 0.50),
        ttft_p99_us: us(&all.ttft_ns, 0.99),
        client_cpu_s: proc_cpu_secs(std::process::id()).unwrap_or(0.0),
        tls: joined(&all.tls),
        backend_tls: joined(&all.backend_tls),
        error_kinds: all.error_kinds,
    }
}

/// What `idle` measured.
#[derive(Debug, Serialize, serde::Deserialize, Clone, Default)]
pub struct IdleResult {
    pub streams_wanted: usize,
    pub streams_open: u64,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub kib_per_stream: f64,
    /// What the client's TLS connections negotiated; absent on plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
}

/// Opens `streams` idle streams (first chunk, then a pause of `hold_ms`) and reads the summed
/// VmRSS of `pids` before and once all are open (or `deadline` passed). With `tls`, every stream
/// is its own TLS connection (a full handshake each: no resumption, as distinct clients).
pub async fn idle(
    addr: SocketAddr,
    streams: usize,
    pids: &[u32],
    hold_ms: u64,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> IdleResult {
    let rss = || {
        pids.iter()
            .filter_map(|&pid| proc_rss_kib(pid))
            .sum::<u64>()
    };
    let before = rss();
    let open = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Semaphore::new(128));
    let done = Arc::new(tokio::sync::Notify::new());
    let negotiated = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let body = request_body(2, 0, hold_ms);
    let mut tasks = Vec::with_capacity(streams);
    for _ in 0..streams {
        let (open, gate, done, body, tls, negotiated) = (
            Arc::clone(&open),
            Arc::clone(&gate),
            Arc::clone(&done),
            body.clone(),
            tls.clone(),
            Arc::clone(&negotiated),
        );
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await.ok()?;
            let (mut conn, tls) = connect(addr, tls.as_ref()).await?;
            if let (Some(tls), Ok(mut set)) = (tls, negotiated.lock()) {
                note(&mut set, &tls);
            }
            conn.ready().await.ok()?;
            let response = conn
                .send_request(request(addr, CHAT_PATH, body))
                .await
                .ok()?;
            let mut body = response.into_body();
            // The first chunk: the stream is open and metered.
            body.frame().await?.ok()?;
            drop(permit);
            open.fetch_add(1, Ordering::SeqCst);
            done.notified().await;
            drop(body);
            Some(())
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while (open.load(Ordering::SeqCst) as usize) < streams && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let allocator and kernel settle before reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss();
    let opened = open.load(Ordering::SeqCst);
    done.notify_waiters();
    for task in tasks {
        task.abort();
    }
    IdleResult {
        streams_wanted: streams,
        streams_open: opened,
        rss_before_kib: before,
        rss_after_kib: after,
        kib_per_stream: after.saturating_sub(before) as f64 / opened.max(1) as f64,
        tls: negotiated.lock().ok().and_then(|set| joined(&set)),
    }
}
