//! The engine loop: runs [`Scheduler`] steps in modelled time and fans out their output.
//!
//! One task owns the scheduler. Each step it drops requests whose client went away (their
//! event channel is closed because hyper dropped the response body), plans the step, sleeps
//! until `step_start + t_step` (absolute deadlines, so rounding and wake-up latency do not
//! accumulate over a long stream), then applies the step and sends every request its
//! progress. When there is nothing to run it waits for a request instead of spinning. New
//! requests arriving mid-step join the waiting queue and are considered at the next step, as in
//! vLLM.
use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use super::metrics::{MetricsState, SimMetrics};
use super::scheduler::{Limits, Progress, RequestId, Scheduler, StepPlan};
use super::SimConfig;

/// A request handed to the engine.
#[derive(Debug)]
pub struct Submission {
    /// The prompt's token ids (what the prefix cache matches).
    pub prompt: Arc<[u64]>,
    pub max_tokens: u64,
    /// When the server had the whole request (TTFT, queue time and E2E start here).
    pub arrival: Instant,
    /// Where the request's progress goes; closing it aborts the request.
    pub events: mpsc::UnboundedSender<Progress>,
    /// The prompt's KV was pulled from a prefill replica (the decode side of
    /// [`super::kv_transfer`]): all of the prompt but its last token is computed already.
    pub kv_pulled: bool,
}

/// The engine is gone (the replica is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the simulated engine has stopped")]
pub struct EngineGone;

/// Submits requests to the engine task.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Submission>,
}

impl EngineHandle {
    pub fn submit(&self, submission: Submission) -> Result<(), EngineGone> {
        self.tx.send(submission).map_err(|_| EngineGone)
    }
}

/// Starts the engine task; it ends when `shutdown` turns true.
pub fn start(
    config: SimConfig,
    metrics: Arc<SimMetrics>,
    shutdown: watch::Receiver<bool>,
) -> (EngineHandle, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(run(config, metrics, rx, shutdown));
    (EngineHandle { tx }, task)
}

/// Resolves when `shutdown` is true; never, if every sender is gone without saying so.
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A request the engine is serving: its channel and its clock readings.
struct Live {
    events: mpsc::UnboundedSender<Progress>,
    prompt_tokens: u64,
    arrival: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    generated: u64,
}

struct Engine {
    config: SimConfig,
    metrics: Arc<SimMetrics>,
    scheduler: Scheduler,
    live: HashMap<RequestId, Live>,
    next_id: RequestId,
}

async fn run(
    config: SimConfig,
    metrics: Arc<SimMetrics>,
    mut rx: mpsc::UnboundedReceiver<Submission>,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = Limits {
        max_num_batched_tokens: config.max_num_batched_tokens,
        max_num_seqs: config.max_num_seqs,
        kv_capacity_tokens: config.kv_capacity_tokens,
        tokens_per_step: config.tokens_per_chunk,
        prefix_caching: config.enable_prefix_caching,
    };
    let mut engine = Engine {
        config,
        metrics,
        scheduler: Scheduler::new(limits),
        live: HashMap::new(),
        next_id: 0,
    };
    let mut step_start = Instant::now();
    loop {
        engine.reap_disconnected();
        let plan = engine.scheduler.plan();
        engine.on_planned(&plan);
        if plan.is_empty() {
            tokio::select! {
                () = stopped(&mut shutdown) => return,
                submission = rx.recv() => match submission {
                    Some(submission) => engine.accept(submission),
                    None => return,
                },
            }
            step_start = Instant::now();
            continue;
        }
        let modelled = engine.config.step_time(plan.tokens(), plan.context_tokens);
        let deadline = step_start + engine.config.scaled(modelled);
        loop {
            tokio::select! {
                () = stopped(&mut shutdown) => return,
                () = sleep_until(deadline) => break,
                submission = rx.recv() => match submission {
                    Some(submission) => engine.accept(submission),
                    None => return,
                },
            }
        }
        engine.on_completed(&plan);
        step_start = deadline;
    }
}

impl Engine {
    fn accept(&mut self, submission: Submission) {
        let Submission {
            prompt,
            max_tokens,
            arrival,
            events,
            kv_pulled,
        } = submission;
        let id = self.next_id;
        self.next_id += 1;
        let prompt_tokens = prompt.len() as u64;
        if kv_pulled {
            self.scheduler.add_pulled(id, prompt, max_tokens);
        } else {
            self.scheduler.add_prompt(id, prompt, max_tokens);
        }
        self.live.insert(
            id,
            Live {
                events,
                prompt_tokens,
                arrival,
                first_token: None,
                last_token: None,
                generated: 0,
            },
        );
        let waiting = self.scheduler.num_waiting() as u64;
        self.metrics.update(|m| m.waiting = waiting);
    }

    /// Aborts every request whose receiver is gone: the client disconnected.
    fn reap_disconnected(&mut self) {
        let scheduler = &mut self.scheduler;
        self.live.retain(|&id, live| {
            let gone = live.events.is_closed();
            if gone {
                scheduler.abort(id);
                tracing::debug!(id, "sim: client went away, request aborted");
            }
            !gone
        });
    }

    /// One metrics update for a step: `record` writes what the step did, then the scheduler's
    /// gauges are published in the same update, so a scrape never sees the two out of step.
    fn update_metrics(
        &mut self,
        record: impl FnOnce(&mut MetricsState, &mut Scheduler, &mut HashMap<RequestId, Live>),
    ) {
        let Engine {
            scheduler,
            live,
            metrics,
            ..
        } = self;
        metrics.update(|m| {
            record(m, scheduler, live);
            publish_gauges(m, scheduler);
        });
    }

    fn on_planned(&mut self, plan: &StepPlan) {
        let now = Instant::now();
        self.update_metrics(|m, _, live| {
            for id in &plan.admitted {
                if let Some(l) = live.get(id) {
                    m.queue.observe((now - l.arrival).as_secs_f64());
                }
            }
        });
    }

    fn on_completed(&mut self, plan: &StepPlan) {
        let now = Instant::now();
        let progress = self.scheduler.complete(plan);
        self.update_metrics(|m, scheduler, live| {
            for p in progress {
                let Some(l) = live.get_mut(&p.id) else {
                    continue;
                };
                m.generation_tokens += p.new_tokens;
                if p.first {
                    m.prompt_tokens += l.prompt_tokens;
                    m.prompt_sources
                        .record(l.prompt_tokens, p.cached_tokens, p.transferred_tokens);
                    m.ttft.observe((now - l.arrival).as_secs_f64());
                    l.first_token = Some(now);
                } else if let Some(last) = l.last_token {
                    m.itl.observe((now - last).as_secs_f64());
                }
                l.last_token = Some(now);
                l.generated += p.new_tokens;
                let delivered = l.events.send(p).is_ok();
                if p.finished {
                    m.success += 1;
                    m.e2e.observe((now - l.arrival).as_secs_f64());
                    if let (Some(first), true) = (l.first_token, l.generated > 1) {
                        m.tpot
                            .observe((now - first).as_secs_f64() / (l.generated - 1) as f64);
                    }
                }
                if p.finished || !delivered {
                    if !p.finished {
                        scheduler.abort(p.id);
                    }
                    live.remove(&p.id);
                }
            }
        });
    }
}

fn publish_gauges(m: &mut MetricsState, scheduler: &Scheduler) {
    m.running = scheduler.num_running() as u64;
    m.waiting = scheduler.num_waiting() as u64;
    m.kv_usage = scheduler.kv_usage();
    (m.prefix_cache_queries, m.prefix_cache_hits) = scheduler.prefix_cache_counts();
}

#[cfg(test)]
mod tests;
