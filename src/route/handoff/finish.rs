//! Counting the handoffs at the finish point: one count per request of a handoff pool, and the
//! phases of each remote prefill, so a TTFT can be read as prefill + transfer + the decode
//! replica's first token.
use std::sync::Arc;

use metrics::Label;
use tokio::time::Instant;

use super::series::{self, DISAGGREGATED_REQUESTS, DISAGGREGATION_PHASE};
use crate::config::Config;
use crate::context::{FinishHook, Finished};
use crate::metrics::{shared_label, Metrics, LABEL_POOL};
use crate::route::handoff::record::HandoffResult;

/// Records what each request's handoff did (see [`series`]).
#[derive(Debug)]
pub(crate) struct HandoffHook {
    metrics: Arc<Metrics>,
}

impl HandoffHook {
    pub fn new(metrics: Arc<Metrics>, config: &Config) -> Self {
        series::describe(&metrics, config);
        Self { metrics }
    }

    fn phase(&self, pool: &Arc<str>, phase: &'static str, from: Instant, to: Instant) {
        let labels = [shared_label(LABEL_POOL, pool), Label::new("phase", phase)];
        self.metrics
            .histogram(DISAGGREGATION_PHASE, &labels)
            .record(to.saturating_duration_since(from).as_secs_f64());
    }
}

impl FinishHook for HandoffHook {
    fn finished(&self, request: &Finished<'_>) {
        let context = request.context;
        let (Some(record), Some(pool)) = (&context.handoff, &context.route.pool) else {
            return;
        };
        let labels = vec![
            shared_label(LABEL_POOL, pool),
            Label::new("result", record.result.as_str()),
        ];
        self.metrics
            .counter(DISAGGREGATED_REQUESTS, labels)
            .increment(1);
        if record.result != HandoffResult::Remote {
            return;
        }
        if let (Some(start), Some(done)) = (record.prefill_started, record.prefill_done) {
            self.phase(pool, "prefill", start, done);
        }
        if let (Some(done), Some(moved)) = (record.prefill_done, record.transfer_done) {
            self.phase(pool, "transfer", done, moved);
        }
        if let (Some(sent), Some(first)) = (record.decode_sent, context.stream.first_token) {
            self.phase(pool, "decode_first_token", sent, first);
        }
    }
}
