//! Counting each tenant's requests at the finish point.
use std::sync::Arc;

use crate::context::finish::{FinishHook, Finished};
use crate::context::Outcome;
use crate::meter::record::SloTargets;
use crate::metrics::Metrics;

use super::series::{
    labels, TENANT_CACHED_TOKENS, TENANT_REQUESTS, TENANT_SLO, TENANT_TOKENS, TENANT_TPOT,
    TENANT_TTFT,
};
use super::Tenants;

/// Records what each finished request of a tenant used and whether it met its SLO.
#[derive(Debug)]
pub(crate) struct TenantHook {
    metrics: Arc<Metrics>,
    tenants: Arc<Tenants>,
    /// The targets of a request whose own the meter did not resolve (`[slo]`'s defaults).
    slo: SloTargets,
}

impl TenantHook {
    pub fn new(metrics: Arc<Metrics>, tenants: Arc<Tenants>, slo: SloTargets) -> Self {
        Self {
            metrics,
            tenants,
            slo,
        }
    }
}

impl FinishHook for TenantHook {
    fn finished(&self, done: &Finished<'_>) {
        let Some(tenant) = done.context.tenant.as_ref().map(|tenant| &tenant.label) else {
            return;
        };
        let metrics = &self.metrics;
        let figures = &done.figures;
        metrics
            .counter(
                TENANT_REQUESTS,
                labels(tenant, &[("outcome", done.outcome.as_str())]),
            )
            .increment(1);
        let context = done.context;
        if context.upstream_status.is_none() {
            return;
        }
        let (input, output) = done.counted_tokens();
        let token = |kind: &'static str, n: u64| {
            metrics
                .counter(
                    TENANT_TOKENS,
                    labels(tenant, &[("gen_ai_token_type", kind)]),
                )
                .increment(n);
        };
        if let Some(input) = input {
            token("input", input);
        }
        if let Some(output) = output {
            token("output", output);
        }
        if let Some(cached) = figures.cached_input_tokens {
            metrics
                .counter(TENANT_CACHED_TOKENS, labels(tenant, &[]))
                .increment(cached);
        }
        if done.outcome == Outcome::Ok {
            if let Some(verdict) = figures.verdict(done.context.request.slo.unwrap_or(self.slo)) {
                let result = if verdict.all_met() { "met" } else { "missed" };
                metrics
                    .counter(TENANT_SLO, labels(tenant, &[("result", result)]))
                    .increment(1);
            }
        }
        if self.tenants.is_tracked(tenant) {
            if let Some(ttft) = figures.ttft {
                metrics
                    .histogram(TENANT_TTFT, &labels(tenant, &[]))
                    .record(ttft.as_secs_f64());
            }
            if let Some(tpot) = figures.tpot {
                metrics
                    .histogram(TENANT_TPOT, &labels(tenant, &[]))
                    .record(tpot.as_secs_f64());
            }
        }
    }
}
