//! The session driver: sessions start on an open-loop schedule, each runs its turns in order.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Conversation, SessionReport, SessionSpec};
use crate::testbed::bench::client::{BenchClient, Destination, Dispatch, RequestRecord};
use crate::testbed::bench::load::{ArrivalProcess, Progress};
use crate::testbed::bench::report::PointReport;
use crate::testbed::bench::session_stats::SessionResults;
use crate::testbed::bench::stats::ClassStats;
use crate::testbed::bench::workload::session::user_text;
use crate::testbed::bench::{BenchError, Stop};

/// The class name session requests carry in their records (a mixed run's row of them).
pub(crate) const CLASS: &str = "session";

/// Runs a session load with a fresh client: resolves the model, drives the sessions,
/// summarises.
pub async fn run_sessions(spec: &SessionSpec) -> Result<SessionReport, BenchError> {
    run_sessions_with(&BenchClient::new(), spec, &Arc::new(Progress::default())).await
}

/// [`run_sessions`] on a given client, updating `progress` as requests end.
pub async fn run_sessions_with(
    client: &BenchClient,
    spec: &SessionSpec,
    progress: &Arc<Progress>,
) -> Result<SessionReport, BenchError> {
    spec.validate()?;
    let arrivals = ArrivalProcess::new(spec.arrival, spec.rate, spec.seed)?;
    drive(client, spec, arrivals, progress).await
}

/// Runs the sessions of a valid `spec`, starting them at the gaps `arrivals` draws (a mixed
/// run draws them from a stream of their own, not the requests').
pub(crate) async fn drive(
    client: &BenchClient,
    spec: &SessionSpec,
    mut arrivals: ArrivalProcess,
    progress: &Arc<Progress>,
) -> Result<SessionReport, BenchError> {
    let model = client
        .model_or_first(spec.model.as_deref(), &spec.url)
        .await;
    let start = Instant::now();
    let shared = Arc::new(Shared {
        client: client.clone(),
        target: Destination {
            uri: spec.endpoint_uri()?,
            endpoint: spec.endpoint,
            model,
        },
        system_prompts: spec.workload.system_prompt_texts(spec.seed),
        header: spec.header_name()?,
        spec: spec.clone(),
        start,
        progress: Arc::clone(progress),
        next_index: AtomicU64::new(0),
    });
    let mut set = JoinSet::new();
    let mut done = Finished::default();
    let mut offset = Duration::ZERO;
    let mut session = 0u64;
    // Bounded by the session count or the deadline (validation rejects an infinite rate with a
    // deadline); each session is bounded by its turns, think times and request timeouts.
    loop {
        match spec.stop {
            Stop::Sessions(n) if session >= n => break,
            Stop::Duration(d) if offset >= d => break,
            // Refused by `validate`: a session run does not count requests.
            Stop::Requests(_) => break,
            _ => {}
        }
        tokio::time::sleep_until(start + offset).await;
        set.spawn(Arc::clone(&shared).run_session(session));
        session += 1;
        offset += arrivals.next_gap();
        // Collect finished sessions as we go so memory follows the sessions in flight.
        while let Some(res) = set.try_join_next() {
            done.add(res?);
        }
    }
    while let Some(res) = set.join_next().await {
        done.add(res?);
    }
    let wall_time_s = start.elapsed().as_secs_f64();
    let Finished {
        mut records,
        completed,
    } = done;
    records.sort_by_key(|r| (r.session, r.turn));
    let sessions = SessionResults::new(
        spec.workload.clone(),
        spec.session_header.clone(),
        (session, completed),
        &records,
    );
    let point = PointReport {
        mode: spec.mode(),
        model: shared.target.model.clone(),
        wall_time_s,
        classes: vec![ClassStats::from_records(
            "all",
            &records,
            wall_time_s,
            &spec.slo,
        )],
        requests: records,
    };
    Ok(SessionReport { point, sessions })
}

/// What every session task needs.
struct Shared {
    client: BenchClient,
    target: Destination,
    spec: SessionSpec,
    system_prompts: Vec<String>,
    header: Option<HeaderName>,
    start: Instant,
    progress: Arc<Progress>,
    /// Request numbers, in the order requests are sent.
    next_index: AtomicU64,
}

/// The records of the sessions that ended, and how many ran all their turns.
#[derive(Default)]
struct Finished {
    records: Vec<RequestRecord>,
    completed: u64,
}

impl Finished {
    fn add(&mut self, (records, completed): (Vec<RequestRecord>, bool)) {
        self.records.extend(records);
        self.completed += u64::from(completed);
    }
}

impl Shared {
    /// Runs one session's turns; returns their records and whether every turn succeeded.
    async fn run_session(self: Arc<Self>, session: u64) -> (Vec<RequestRecord>, bool) {
        let draw = self.spec.workload.draw(self.spec.seed, session);
        let system = self
            .system_prompts
            .get(draw.system_prompt)
            .cloned()
            .unwrap_or_default();
        let mut conversation = Conversation::new(system);
        let header = self
            .header
            .as_ref()
            .map(|name| (name.clone(), HeaderValue::from(session)));
        let dispatch = Dispatch {
            target: &self.target,
            class: CLASS,
            point_start: self.start,
            timeout: self.spec.request_timeout,
        };
        let mut records = Vec::with_capacity(draw.turns.len());
        // Bounded by the drawn number of turns.
        for (turn, draw) in (1u32..).zip(&draw.turns) {
            tokio::time::sleep(draw.think).await;
            conversation.ask(user_text(session, turn, draw.user_words));
            let index = self.next_index.fetch_add(1, Ordering::Relaxed);
            let plan = conversation.request(index, draw.max_tokens, header.clone());
            self.progress.sent.fetch_add(1, Ordering::Relaxed);
            let reply = self.client.send_keeping_reply(&dispatch, &plan).await;
            self.progress.record(&reply.record);
            let mut record = reply.record;
            record.session = Some(session);
            record.turn = Some(turn);
            let ok = record.outcome.is_ok();
            records.push(record);
            if !ok {
                return (records, false);
            }
            conversation.answer(reply.text);
        }
        (records, true)
    }
}
