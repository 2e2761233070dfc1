//! The tenant subsystem's series: each tenant's requests, tokens and SLO attainment, and the
//! latency histograms of the tracked tenants. The `tenant` label is bounded
//! ([`crate::metrics::BoundedLabels`]): the keys file's tenants and `tenants.tracked`, then the
//! first `tenants.max_tenant_labels` names seen, then `other`; `anonymous` for none.
use metrics::Label;

use crate::config::Config;
use crate::metrics::{tpot_buckets, ttft_buckets, Metrics};

/// Finished requests by `tenant` and `outcome`.
pub(crate) const TENANT_REQUESTS: &str = "tokenmeter_tenant_requests_total";
/// Tokens by `tenant` and `gen_ai_token_type` (`input`, `output`), as `tokenmeter_tokens_total`
/// counts them.
pub(crate) const TENANT_TOKENS: &str = "tokenmeter_tenant_tokens_total";
/// Prompt tokens the server's prompt cache served, by `tenant`, where it reports it.
pub(crate) const TENANT_CACHED_TOKENS: &str = "tokenmeter_tenant_cached_tokens_total";
/// Successful streams by `tenant` and `result` (`met`, `missed`: both SLO targets): a tenant's
/// attainment and goodput.
pub(crate) const TENANT_SLO: &str = "tokenmeter_tenant_slo_requests_total";
/// TTFT of the tracked tenants, by `tenant`.
pub(crate) const TENANT_TTFT: &str = "tokenmeter_tenant_time_to_first_token_seconds";
/// TPOT of the tracked tenants, by `tenant`.
pub(crate) const TENANT_TPOT: &str = "tokenmeter_tenant_time_per_output_token_seconds";

/// The `tenant` label's name.
pub(crate) const LABEL_TENANT: &str = "tenant";
/// The label value of a request without a tenant.
pub(crate) const ANONYMOUS: &str = "anonymous";
/// The label value past the label budget.
pub const OTHER: &str = "other";

/// Defines and describes every series of the subsystem.
pub fn describe(metrics: &Metrics, config: &Config) {
    metrics.define_described_histogram(
        TENANT_TTFT,
        &ttft_buckets(config),
        "TTFT of the tracked tenants, by tenant.",
    );
    metrics.define_described_histogram(
        TENANT_TPOT,
        &tpot_buckets(config),
        "TPOT of the tracked tenants, by tenant.",
    );
    metrics.describe_counter(TENANT_REQUESTS, "Finished requests by tenant and outcome.");
    metrics.describe_counter(
        TENANT_TOKENS,
        "Tokens by tenant and gen_ai_token_type (input, output).",
    );
    metrics.describe_counter(
        TENANT_CACHED_TOKENS,
        "Prompt tokens served from the server's prompt cache, by tenant.",
    );
    metrics.describe_counter(
        TENANT_SLO,
        "Successful streams by tenant and result (met, missed: both SLO targets).",
    );
}

/// `[tenant]` plus more labels.
pub fn labels(tenant: &std::sync::Arc<str>, more: &[(&'static str, &'static str)]) -> Vec<Label> {
    let mut out = vec![crate::metrics::shared_label(LABEL_TENANT, tenant)];
    out.extend(more.iter().map(|&(key, value)| Label::new(key, value)));
    out
}
