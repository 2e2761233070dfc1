//! Mixed runs: open-loop request classes and multi-turn sessions against one server at once, the
//! traffic a router sees in production (one-shot chats and documents between conversations that
//! resend their history).
//!
//! The two halves are the usual drivers, run side by side on one client: the requests of a
//! [`LoadSpec`] (open loop, one rate) and the sessions of a [`SessionSpec`], both stopped by the
//! same [`Stop::Duration`]. Sessions start until the deadline and every started session runs all
//! its turns (as in a session run); the requests keep arriving until the last session has ended,
//! so every turn runs under the same load and none in an emptying fleet. The report is one point
//! with a row per workload class, one for `session` (every turn) and `all`, plus the session rows
//! of a session run.
//!
//! Both halves draw from the run's seed: the requests exactly as in a request run, the sessions'
//! prompts and turns exactly as in a session run; only the sessions' arrival gaps come from a
//! stream of their own (the same seed would give the two arrival processes the same gaps).
//!
//! ```no_run
//! # async fn demo() -> Result<(), tokenmeter::testbed::bench::BenchError> {
//! use std::time::Duration;
//! use tokenmeter::testbed::bench::{run_mixed, Arrival, LoadMode, LoadSpec, MixedSpec, SessionSpec, Stop};
//! let stop = Stop::Duration(Duration::from_secs(60));
//! let mut requests = LoadSpec::new("http://127.0.0.1:8000");
//! requests.mode = LoadMode::Open { rate: 10.0, arrival: Arrival::Poisson };
//! requests.stop = stop;
//! let mut sessions = SessionSpec::new("http://127.0.0.1:8000");
//! sessions.rate = 0.5;
//! sessions.stop = stop;
//! let report = run_mixed(&MixedSpec { requests, sessions }).await?;
//! print!("{}", report.render_table());
//! # Ok(()) }
//! ```
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::load::{run_point_until, ArrivalProcess, Progress};
use super::report::{BenchReport, PointReport};
use super::session::{self, SessionReport};
use super::stats::ClassStats;
use super::{BenchClient, BenchError, LoadMode, LoadSpec, SessionSpec, Stop};

/// The sessions' arrival gaps are drawn from `seed ^ SESSION_ARRIVALS`, not from the requests'
/// stream of the same seed.
const SESSION_ARRIVALS: u64 = 0x3A1E_D5E5_5104_0000;

/// Everything a mixed run needs: the requests (open loop) and the sessions, against the same
/// server, with the same deadline.
#[derive(Debug, Clone)]
pub struct MixedSpec {
    /// Open-loop requests ([`LoadMode::Open`]) stopped by a [`Stop::Duration`]; they go on past
    /// it while sessions run.
    pub requests: LoadSpec,
    /// Sessions stopped by the same [`Stop::Duration`], with the same arrival process.
    pub sessions: SessionSpec,
}

impl MixedSpec {
    /// The load mode of the run, as reports name it (the requests' rate and arrival process).
    pub fn mode(&self) -> LoadMode {
        let rate = match self.requests.mode {
            LoadMode::Open { rate, .. } => rate,
            _ => f64::NAN,
        };
        LoadMode::Mixed {
            rate,
            session_rate: self.sessions.rate,
            arrival: self.sessions.arrival,
        }
    }

    /// Each half is valid; the requests are an open loop with the sessions' arrival process; both
    /// stop at the same deadline; no request class is named like the sessions' row.
    pub fn validate(&self) -> Result<(), BenchError> {
        self.requests.validate()?;
        self.sessions.validate()?;
        let refuse = |why: &str| Err(BenchError::Spec(format!("a mixed run: {why}")));
        match self.requests.mode {
            LoadMode::Open { arrival, .. } if arrival == self.sessions.arrival => {}
            LoadMode::Open { .. } => {
                return refuse("requests and sessions arrive by the same process")
            }
            _ => return refuse("the requests are an open loop (a rate)"),
        }
        match (self.requests.stop, self.sessions.stop) {
            (Stop::Duration(a), Stop::Duration(b)) if a == b => {}
            _ => return refuse("requests and sessions stop after the same duration"),
        }
        if self
            .requests
            .workload
            .class_names()
            .iter()
            .any(|name| name == session::CLASS)
        {
            return refuse(&format!(
                "the class name {:?} is the sessions' row",
                session::CLASS
            ));
        }
        Ok(())
    }

    /// The JSON report (`docs/bench-results.md`): the requests' workload and stop, the run as
    /// its one point, and the `sessions` object. Per-request records only with `keep_records`.
    pub fn bench_report(&self, report: SessionReport, keep_records: bool) -> BenchReport {
        let (point, sessions) = report.into_report_parts(keep_records);
        BenchReport {
            sessions: Some(sessions),
            ..BenchReport::new(&self.requests, vec![point])
        }
    }
}

/// Runs a mixed load with a fresh client.
pub async fn run_mixed(spec: &MixedSpec) -> Result<SessionReport, BenchError> {
    run_mixed_with(&BenchClient::new(), spec, &Arc::new(Progress::default())).await
}

/// [`run_mixed`] on a given client, updating `progress` as requests of either half end.
pub async fn run_mixed_with(
    client: &BenchClient,
    spec: &MixedSpec,
    progress: &Arc<Progress>,
) -> Result<SessionReport, BenchError> {
    spec.validate()?;
    // Resolved once, so that both halves start at the same instant.
    let model = client
        .model_or_first(spec.requests.model.as_deref(), &spec.requests.url)
        .await;
    let requests = LoadSpec {
        model: Some(model.clone()),
        ..spec.requests.clone()
    };
    let sessions = SessionSpec {
        model: Some(model),
        ..spec.sessions.clone()
    };
    let arrivals = ArrivalProcess::new(
        sessions.arrival,
        sessions.rate,
        sessions.seed ^ SESSION_ARRIVALS,
    )?;
    let sessions_over = CancellationToken::new();
    let session_half = async {
        let report = session::drive(client, &sessions, arrivals, progress).await;
        // Also on an error: the requests must not outlive their reason to run.
        sessions_over.cancel();
        report
    };
    let request_half = run_point_until(client, &requests, progress, Some(sessions_over.clone()));
    let (point, sessions_report) = tokio::join!(request_half, session_half);
    Ok(merge(spec, point?, sessions_report?))
}

/// One report of the two halves: every record, a row per request class and one for the sessions,
/// over the longer wall time of the two (they started together).
pub(crate) fn merge(
    spec: &MixedSpec,
    requests: PointReport,
    sessions: SessionReport,
) -> SessionReport {
    let PointReport {
        model,
        wall_time_s: request_wall,
        requests: mut records,
        ..
    } = requests;
    let SessionReport {
        point: session_point,
        sessions,
    } = sessions;
    let wall_time_s = request_wall.max(session_point.wall_time_s);
    records.extend(session_point.requests);
    let slo = &spec.requests.slo;
    let mut classes = vec![ClassStats::from_records("all", &records, wall_time_s, slo)];
    let names = spec.requests.workload.class_names();
    for name in names.iter().map(String::as_str).chain([session::CLASS]) {
        let of_class = records.iter().filter(|r| r.class == name);
        classes.push(ClassStats::from_records(name, of_class, wall_time_s, slo));
    }
    SessionReport {
        point: PointReport {
            mode: spec.mode(),
            model,
            wall_time_s,
            classes,
            requests: records,
        },
        sessions,
    }
}

#[cfg(test)]
mod tests;
