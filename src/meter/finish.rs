//! The meter's finish hook: the per-request series, recorded once when a request ends.
//!
//! Whatever ended the request (see [`crate::context::finish`]), it is counted here and nowhere
//! else: `tokenmeter_requests_total{outcome}` for every request; for a generation request whose
//! response head came back, also E2E, TPOT, the token counts, the prompt cache and the SLO
//! verdicts. TTFB, TTFT and the inter-token gaps are recorded live by the body as they happen
//! ([`super::body`]); this hook records what only the end knows.
use std::sync::Arc;

use super::series::{MeterSeries, RequestLabels, Slo};
use crate::context::{FinishHook, Finished, Outcome, RequestContext};
use crate::dialect::Operation;
use crate::meter::record::SloTargets;

/// Backend (and pool) label for requests that never reached one.
pub(super) const NO_BACKEND: &str = "none";

/// Records the per-request series of every finished request.
#[derive(Debug)]
pub struct MeterHook {
    series: Arc<MeterSeries>,
    /// The targets of a request whose own the meter did not resolve (`[slo]`'s defaults).
    slo: SloTargets,
    none: Arc<str>,
}

impl MeterHook {
    pub fn new(series: Arc<MeterSeries>, slo: SloTargets) -> Self {
        Self {
            series,
            slo,
            none: Arc::from(NO_BACKEND),
        }
    }
}

/// The labels every per-request series of a request carries: what its context names, `none`
/// (`none_label`) where it names nothing (no pool planned, no backend reached).
pub(super) fn labels_of(
    context: &RequestContext,
    series: &MeterSeries,
    none_label: &Arc<str>,
) -> RequestLabels {
    let none = || Arc::clone(none_label);
    RequestLabels {
        operation: context
            .dialect
            .map_or(Operation::PASSTHROUGH, Operation::of),
        model: context
            .request
            .model_label
            .clone()
            .unwrap_or_else(|| series.metrics().model_label(None)),
        pool: context.route.pool.clone().unwrap_or_else(none),
        backend: context
            .route
            .backend
            .as_ref()
            .map_or_else(none, |target| Arc::clone(&target.label)),
    }
}

impl FinishHook for MeterHook {
    fn finished(&self, done: &Finished<'_>) {
        let context = done.context;
        let labels = labels_of(context, &self.series, &self.none);
        if context.request.active {
            self.series
                .streams_active(labels.operation, &labels.model)
                .decrement(1.0);
        }
        match (context.dialect, context.upstream_status) {
            (Some(_), Some(_)) => self.stream_finished(done, labels),
            // Refused, failed before a response head, abandoned before one, or not a generation
            // request (a passthrough): counted by outcome only.
            _ => self.series.request_finished(&labels, done.outcome),
        }
    }
}

impl MeterHook {
    /// A generation request whose response head came back: everything its stream yields.
    fn stream_finished(&self, done: &Finished<'_>, labels: RequestLabels) {
        let Finished {
            context,
            outcome,
            figures,
            ..
        } = done;
        let series = &*self.series;
        let metrics = &**series.metrics();
        let handles = series.stream(&labels);
        let trace = context.trace.as_ref();
        let record = &context.stream;
        handles.e2e.record_traced(figures.e2e.as_secs_f64(), trace);
        if record.overflows > 0 {
            series.sse_overflows(&handles.labels, record.overflows);
        }
        // Token figures only for a stream of a known dialect (an unknown one is timed only), or for
        // a non-streaming answer whose usage gave N_out: without token events there is no count to
        // fall back on, and without a framer usage can only have come from the whole body. Every
        // series counts them alike (`Finished::counted_tokens`).
        let (input, output) = done.counted_tokens();
        if let Some(output) = output {
            if let Some(tpot) = figures.tpot {
                handles.tpot.record_traced(tpot.as_secs_f64(), trace);
            }
            handles.output_tokens.record(output as f64);
            handles.output_total.increment(output);
            handles.token_count_source(metrics, figures.exact_output);
        }
        if let Some(input) = input {
            handles.input_tokens.record(input as f64);
            handles.input_total.increment(input);
        }
        // The prompt cache, where the server reports it: hits are its cached tokens, misses the rest
        // of the prompt it computed.
        if let (Some(prompt), Some(cached)) = (figures.input_tokens, figures.cached_input_tokens) {
            handles.prompt_cache(metrics, cached.min(prompt), prompt.saturating_sub(cached));
        }
        if *outcome == Outcome::Ok {
            if let Some(verdict) = figures.verdict(context.request.slo.unwrap_or(self.slo)) {
                handles.slo_verdict(metrics, Slo::Ttft, verdict.ttft_met);
                if let Some(tpot_met) = verdict.tpot_met {
                    handles.slo_verdict(metrics, Slo::Tpot, tpot_met);
                }
                if let Some(gap_met) = verdict.gap_met {
                    handles.slo_verdict(metrics, Slo::Gap, gap_met);
                }
                handles.slo_verdict(metrics, Slo::All, verdict.all_met());
            }
        }
        handles.finished(metrics, *outcome);
        tracing::debug!(
            outcome = outcome.as_str(),
            backend = &*handles.labels.backend,
            model = &*handles.labels.model,
            e2e_ms = figures.e2e.as_millis() as u64,
            output_tokens = figures.output_tokens,
            "stream finished"
        );
    }
}
