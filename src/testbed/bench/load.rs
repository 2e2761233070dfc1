//! Driving the load: arrival processes (pure, seeded: testable without a clock), the closed
//! and open loop drivers, and [`run_point`].
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::{BenchClient, Destination, Dispatch, PlannedRequest, Prompt, RequestRecord};
use super::{Arrival, BenchError, LoadMode, LoadSpec, PointReport, Stop};

/// Draws the gaps between open-loop arrivals. Pure: the caller decides what a gap means in
/// time, so the distribution is testable without sleeping.
#[derive(Debug)]
pub struct ArrivalProcess {
    gaps: GapDist,
    rng: StdRng,
}

#[derive(Debug)]
enum GapDist {
    /// Constant gap in seconds (0 for an unlimited rate).
    Constant(f64),
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
}

impl ArrivalProcess {
    /// Gaps averaging `1 / rate` seconds. `rate` may be infinite (every gap 0).
    pub fn new(arrival: Arrival, rate: f64, seed: u64) -> Result<Self, BenchError> {
        if rate.is_nan() || rate <= 0.0 {
            return Err(BenchError::Spec(format!("rate must be > 0, got {rate}")));
        }
        let spec_err =
            |e: &dyn std::fmt::Display| BenchError::Spec(format!("arrival process: {e}"));
        let gaps = if rate.is_infinite() {
            GapDist::Constant(0.0)
        } else {
            match arrival {
                Arrival::Constant => GapDist::Constant(1.0 / rate),
                Arrival::Poisson => GapDist::Exp(Exp::new(rate).map_err(|e| spec_err(&e))?),
                // Shape b, scale 1/(rate b): mean 1/rate, coefficient of variation 1/sqrt(b).
                Arrival::Gamma { burstiness } => GapDist::Gamma(
                    Gamma::new(burstiness, 1.0 / (rate * burstiness)).map_err(|e| spec_err(&e))?,
                ),
            }
        };
        // A stream distinct from the per-request workload draws of the same seed.
        let rng = StdRng::seed_from_u64(seed ^ 0xA5A5_5A5A_C3C3_3C3C);
        Ok(ArrivalProcess { gaps, rng })
    }

    /// The next gap in seconds.
    pub fn next_gap_secs(&mut self) -> f64 {
        match &self.gaps {
            GapDist::Constant(g) => *g,
            GapDist::Exp(d) => d.sample(&mut self.rng),
            GapDist::Gamma(d) => d.sample(&mut self.rng),
        }
    }

    /// The next gap.
    pub fn next_gap(&mut self) -> Duration {
        Duration::try_from_secs_f64(self.next_gap_secs()).unwrap_or(Duration::ZERO)
    }
}

/// Live counters of a running point, for a progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
}

impl Progress {
    pub(crate) fn record(&self, r: &RequestRecord) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if !r.outcome.is_ok() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs one load point with a fresh client: resolves the model, drives the load, summarises.
pub async fn run_point(spec: &LoadSpec) -> Result<PointReport, BenchError> {
    run_point_with(&BenchClient::new(), spec, &Arc::new(Progress::default())).await
}

/// [`run_point`] on a given client, updating `progress` as requests end.
pub async fn run_point_with(
    client: &BenchClient,
    spec: &LoadSpec,
    progress: &Arc<Progress>,
) -> Result<PointReport, BenchError> {
    run_point_until(client, spec, progress, None).await
}

/// [`run_point_with`], where an open loop stopped by a duration keeps sending past it until
/// `extend` is cancelled (a mixed run's requests last as long as its sessions).
pub(crate) async fn run_point_until(
    client: &BenchClient,
    spec: &LoadSpec,
    progress: &Arc<Progress>,
    extend: Option<CancellationToken>,
) -> Result<PointReport, BenchError> {
    spec.validate()?;
    let model = client
        .model_or_first(spec.model.as_deref(), &spec.url)
        .await;
    let target = Arc::new(Destination {
        uri: spec.endpoint_uri()?,
        endpoint: spec.endpoint,
        model,
    });
    let start = Instant::now();
    let mut records = match spec.mode {
        LoadMode::Closed { concurrency } => {
            closed_loop(client, spec, &target, concurrency, start, progress).await?
        }
        LoadMode::Open { rate, arrival } => {
            let arrivals = ArrivalProcess::new(arrival, rate, spec.seed)?;
            open_loop(client, spec, &target, arrivals, start, progress, extend).await?
        }
        // Refused by `validate` already; sessions and mixed loads have their own drivers.
        LoadMode::Sessions { .. } | LoadMode::Mixed { .. } => Vec::new(),
    };
    let wall_s = start.elapsed().as_secs_f64();
    records.sort_by_key(|r| r.index);
    Ok(PointReport::new(spec, &target.model, wall_s, records))
}

/// What every request task needs, cheap to clone.
#[derive(Clone)]
struct Shared {
    client: BenchClient,
    target: Arc<Destination>,
    spec: Arc<LoadSpec>,
    names: Arc<Vec<String>>,
    start: Instant,
    progress: Arc<Progress>,
}

impl Shared {
    async fn send(&self, index: u64) -> RequestRecord {
        self.send_from(index, Instant::now()).await
    }

    /// The request `index`, its clock started at `t0` (see [`BenchClient::send_from`]).
    async fn send_from(&self, index: u64, t0: Instant) -> RequestRecord {
        let plan = plan(&self.spec, index);
        self.progress.sent.fetch_add(1, Ordering::Relaxed);
        let class = self.names.get(plan.class).map_or("default", String::as_str);
        let dispatch = Dispatch {
            target: &self.target,
            class,
            point_start: self.start,
            timeout: self.spec.request_timeout,
        };
        let rec = self.client.send_from(&dispatch, &plan, t0).await;
        self.progress.record(&rec);
        rec
    }
}

/// Request `index` of a run: its workload draw, and its class's header if it has one.
pub(crate) fn plan(spec: &LoadSpec, index: u64) -> PlannedRequest {
    let s = spec.workload.sample_request(spec.seed, index);
    PlannedRequest {
        index,
        class: s.class,
        prompt_words: s.prompt_tokens,
        max_tokens: s.output_tokens,
        prompt: Prompt::Words { seed: spec.seed },
        header: spec
            .workload
            .classes()
            .get(s.class)
            .and_then(|c| c.header.clone()),
    }
}

fn shared(
    client: &BenchClient,
    spec: &LoadSpec,
    target: &Arc<Destination>,
    start: Instant,
    progress: &Arc<Progress>,
) -> Shared {
    Shared {
        client: client.clone(),
        target: Arc::clone(target),
        spec: Arc::new(spec.clone()),
        names: Arc::new(spec.workload.class_names()),
        start,
        progress: Arc::clone(progress),
    }
}

/// `concurrency` workers, each sending its next request when the previous one ended; the
/// request numbers come from one counter, so the set of requests does not depend on timing.
async fn closed_loop(
    client: &BenchClient,
    spec: &LoadSpec,
    target: &Arc<Destination>,
    concurrency: usize,
    start: Instant,
    progress: &Arc<Progress>,
) -> Result<Vec<RequestRecord>, BenchError> {
    let sh = shared(client, spec, target, start, progress);
    let next = Arc::new(AtomicU64::new(0));
    let workers = match spec.stop {
        Stop::Requests(n) => concurrency.min(usize::try_from(n).unwrap_or(usize::MAX)),
        Stop::Duration(_) => concurrency,
        // Refused by `validate`: no session count in a request load.
        Stop::Sessions(_) => 0,
    };
    let mut set = JoinSet::new();
    for _ in 0..workers {
        let (sh, next) = (sh.clone(), Arc::clone(&next));
        let stop = spec.stop;
        set.spawn(async move {
            let mut out = Vec::new();
            // Bounded by the request count or the deadline.
            loop {
                // The deadline is checked against the instant the request's clock starts at.
                let t0 = Instant::now();
                if let Stop::Duration(d) = stop {
                    if t0.saturating_duration_since(start) >= d {
                        break;
                    }
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if matches!(stop, Stop::Requests(n) if index >= n) {
                    break;
                }
                out.push(sh.send_from(index, t0).await);
            }
            out
        });
    }
    let mut records = Vec::new();
    while let Some(res) = set.join_next().await {
        records.extend(res?);
    }
    Ok(records)
}

/// One task per arrival, on an absolute schedule (sleeping until `start + sum of gaps`), so
/// slow spawning does not lower the rate. Past a [`Stop::Duration`], arrivals go on until
/// `extend` is cancelled, if there is one.
async fn open_loop(
    client: &BenchClient,
    spec: &LoadSpec,
    target: &Arc<Destination>,
    mut arrivals: ArrivalProcess,
    start: Instant,
    progress: &Arc<Progress>,
    extend: Option<CancellationToken>,
) -> Result<Vec<RequestRecord>, BenchError> {
    let sh = shared(client, spec, target, start, progress);
    let mut set = JoinSet::new();
    let mut records = Vec::new();
    let mut offset = Duration::ZERO;
    let mut index = 0u64;
    // Bounded by the request count or the deadline (validation rejects an infinite rate
    // with a deadline), then by `extend`, which its owner cancels when its own load ends.
    loop {
        let extending = match spec.stop {
            Stop::Requests(n) if index >= n => break,
            Stop::Duration(d) if offset >= d => match &extend {
                Some(token) if !token.is_cancelled() => Some(token),
                _ => break,
            },
            // Refused by `validate`: no session count in a request load.
            Stop::Sessions(_) => break,
            _ => None,
        };
        let next = tokio::time::sleep_until(start + offset);
        match extending {
            // Not one arrival after the extension ends: it would only lengthen the wall time.
            Some(token) => tokio::select! {
                () = next => {}
                () = token.cancelled() => break,
            },
            None => next.await,
        }
        let sh = sh.clone();
        set.spawn(async move { sh.send(index).await });
        index += 1;
        offset += arrivals.next_gap();
        // Collect finished requests as we go so memory follows the in-flight count.
        while let Some(res) = set.try_join_next() {
            records.push(res?);
        }
    }
    while let Some(res) = set.join_next().await {
        records.push(res?);
    }
    Ok(records)
}

#[cfg(test)]
mod tests;
