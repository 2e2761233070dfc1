//! `tokenmeter bench`: the load generator.
//!
//! It measures an OpenAI-compatible streaming server from the client side, with the
//! definitions of REFERENCE.md §1 on its own monotonic clock and its own SSE splitting
//! (independent of `crate::sse`, so `bench` can cross-check the proxy): TTFT = first token
//! event - request sent; ITL = every gap between consecutive token events; TPOT = (last -
//! first) / (N_out - 1) for N_out >= 2; E2E = end of stream; N_out from
//! `usage.completion_tokens` (always requested), else the token event count.
//!
//! - [`BenchArgs`]: the command line (`args.rs`), turned into specs;
//! - [`spec`]: what one load point is ([`LoadSpec`]);
//! - [`workload`]: length distributions and class mixes;
//! - [`load`]: arrival processes, the closed and open loop drivers, [`run_point`];
//! - [`client`]: one timed request over the shared client; `events` splits SSE (private);
//! - [`stats`]: numpy-compatible percentiles, per-class summaries, goodput;
//! - [`report`] and [`plot`]: the table, the JSON file, the SVG;
//! - [`session`]: multi-turn session workloads ([`run_sessions`]), their description in
//!   [`workload::session`] and their per-turn rows in [`session_stats`];
//! - [`mixed`]: requests and sessions at once ([`run_mixed`]), one report with a row for each.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tokenmeter::testbed::bench::BenchError> {
//! use tokenmeter::testbed::bench::{run_point, LoadMode, LoadSpec, Stop};
//! let mut spec = LoadSpec::new("http://127.0.0.1:8000");
//! spec.mode = LoadMode::Closed { concurrency: 8 };
//! spec.stop = Stop::Requests(200);
//! let report = run_point(&spec).await?;
//! print!("{}", report.render_table());
//! # Ok(()) }
//! ```
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod args;
pub mod client;
mod error;
mod events;
pub mod load;
pub mod mixed;
pub mod plot;
mod record;
pub mod report;
pub mod session;
pub mod session_stats;
pub mod spec;
pub mod stats;
pub mod workload;

pub use args::{ArrivalKind, BenchArgs};
pub use client::{BenchClient, Ending, RequestRecord};
pub use error::BenchError;
pub use load::{run_point, run_point_with, ArrivalProcess, Progress};
pub use mixed::{run_mixed, run_mixed_with, MixedSpec};
pub use plot::write_plot;
pub use report::{BenchReport, PointReport};
pub use session::{run_sessions, run_sessions_with, SessionReport, SessionSpec};
pub use session_stats::{CacheTally, SessionResults, TurnStats};
pub use spec::{Arrival, Endpoint, LoadMode, LoadSpec, Slo, Stop};
pub use stats::{percentile, ClassStats, Summary};
pub use workload::session::SessionWorkload;
pub use workload::{Class, Dist, Workload, WorkloadError};

/// Runs the load described by the arguments and reports: a table per point on stdout, a
/// progress line on stderr (terminals only), then the JSON and SVG files if asked.
pub async fn run(args: BenchArgs) -> Result<(), crate::BoxError> {
    if let Some(spec) = args.to_mixed_spec()? {
        return run_mixed_load(spec, args.json.as_deref(), args.raw).await;
    }
    if let Some(spec) = args.to_session_spec()? {
        return run_session_load(spec, args.json.as_deref(), args.raw).await;
    }
    let (mut spec, modes) = args.to_specs()?;
    let client = BenchClient::new();
    spec.model = Some(
        client
            .model_or_first(spec.model.as_deref(), &spec.url)
            .await,
    );
    let mut points = Vec::with_capacity(modes.len());
    let mut ok_total = 0;
    for (i, &mode) in modes.iter().enumerate() {
        let point_spec = LoadSpec {
            mode,
            ..spec.clone()
        };
        let progress = Arc::new(Progress::default());
        let label = format!("[{}/{}] {}", i + 1, modes.len(), mode.label());
        let report = with_progress_line(
            std::io::stderr().is_terminal().then_some(label),
            spec.stop,
            &progress,
            run_point_with(&client, &point_spec, &progress),
        )
        .await?;
        ok_total += report.all().map_or(0, |c| c.ok);
        crate::stdout::print(format_args!("{}\n", report.render_table()))?;
        points.push(report);
    }
    if let Some(path) = &args.plot {
        write_plot(&points, path)?;
        eprintln!("plot written to {}", path.display());
    }
    if let Some(path) = &args.json {
        if !args.raw {
            points.iter_mut().for_each(|p| p.requests.clear());
        }
        BenchReport::new(&spec, points).write_json(path)?;
        eprintln!("results written to {}", path.display());
    }
    if ok_total == 0 {
        return Err(format!("no request succeeded (is {} serving?)", spec.url).into());
    }
    Ok(())
}

/// A session run from the command line: the progress line, the table, the JSON file.
async fn run_session_load(
    mut spec: SessionSpec,
    json: Option<&std::path::Path>,
    raw: bool,
) -> Result<(), crate::BoxError> {
    let client = BenchClient::new();
    spec.model = Some(
        client
            .model_or_first(spec.model.as_deref(), &spec.url)
            .await,
    );
    let progress = Arc::new(Progress::default());
    let report = with_progress_line(
        std::io::stderr().is_terminal().then(|| spec.mode().label()),
        spec.stop,
        &progress,
        run_sessions_with(&client, &spec, &progress),
    )
    .await?;
    print_session_run(report, json, &spec.url, |report| {
        report.into_bench_report(&spec, raw)
    })
}

/// A mixed run from the command line: the progress line, the table, the JSON file.
async fn run_mixed_load(
    spec: MixedSpec,
    json: Option<&std::path::Path>,
    raw: bool,
) -> Result<(), crate::BoxError> {
    let client = BenchClient::new();
    let progress = Arc::new(Progress::default());
    let report = with_progress_line(
        std::io::stderr().is_terminal().then(|| spec.mode().label()),
        spec.requests.stop,
        &progress,
        run_mixed_with(&client, &spec, &progress),
    )
    .await?;
    print_session_run(report, json, &spec.requests.url, |report| {
        spec.bench_report(report, raw)
    })
}

/// The end of a session or mixed run: its table on stdout, its JSON file when asked (`to_json`
/// builds it), and an error when no request succeeded (the server at `url` is likely not
/// serving).
fn print_session_run(
    report: SessionReport,
    json: Option<&std::path::Path>,
    url: &str,
    to_json: impl FnOnce(SessionReport) -> BenchReport,
) -> Result<(), crate::BoxError> {
    crate::stdout::print(format_args!("{}\n", report.render_table()))?;
    let ok = report.point.all().map_or(0, |c| c.ok);
    if let Some(path) = json {
        to_json(report).write_json(path)?;
        eprintln!("results written to {}", path.display());
    }
    if ok == 0 {
        return Err(format!("no request succeeded (is {url} serving?)").into());
    }
    Ok(())
}

/// Runs `work` with a progress line on stderr while it runs (when there is a `label`: the
/// caller shows it on terminals only), counting `progress` toward `stop`; the line is cleared
/// before the result is returned.
pub(crate) async fn with_progress_line<T>(
    label: Option<String>,
    stop: Stop,
    progress: &Arc<Progress>,
    work: impl std::future::Future<Output = T>,
) -> T {
    let ticker = label.map(|label| spawn_progress_line(label, stop, Arc::clone(progress)));
    let result = work.await;
    if let Some((stop_tx, handle)) = ticker {
        let _ = stop_tx.send(());
        let _ = handle.await;
    }
    result
}

/// Rewrites one stderr line a few times a second until told to stop, then clears it.
fn spawn_progress_line(
    label: String,
    stop: Stop,
    progress: Arc<Progress>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        // Bounded: ends when the point ends (the sender fires or is dropped).
        loop {
            tokio::select! {
                _ = &mut rx => break,
                _ = tick.tick() => {}
            }
            let done = progress.done.load(Ordering::Relaxed);
            let sent = progress.sent.load(Ordering::Relaxed);
            let errors = progress.errors.load(Ordering::Relaxed);
            let target = match stop {
                Stop::Requests(n) => format!("{done}/{n}"),
                Stop::Sessions(n) => format!(
                    "{done} requests, {:.0} s, {n} sessions",
                    start.elapsed().as_secs_f64()
                ),
                Stop::Duration(d) => format!(
                    "{done} ({:.0}/{:.0} s)",
                    start.elapsed().as_secs_f64(),
                    d.as_secs_f64()
                ),
            };
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2K{label}: {target} done, {} in flight, {errors} errors",
                sent.saturating_sub(done)
            );
            let _ = err.flush();
        }
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    });
    (tx, handle)
}
