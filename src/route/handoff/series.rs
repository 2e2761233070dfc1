//! The handoff's series: what each request of a handoff pool did, and how long each phase of a
//! remote prefill took.
use crate::config::Config;
use crate::metrics::{ttft_buckets, Metrics};

/// Requests of a pool with a prefill pool, by the decode `pool` and `result` (see
/// [`crate::route::handoff::record::HandoffResult`]: `remote`, `local_short`, `local_cached`, `local_busy`, `unsupported`,
/// the fallbacks `prefill_unavailable`, `prefill_failed`, `prefill_timeout`, `transfer_failed`,
/// and `client_gone`).
pub(crate) const DISAGGREGATED_REQUESTS: &str = "tokenmeter_disaggregated_requests_total";
/// The phases of remote prefills, by the decode `pool` and `phase`: `prefill` (the prefill
/// request), `transfer` (moving the KV cache, where the proxy moves it), `decode_first_token`
/// (the decode request to its first token; vLLM pulls the KV inside it).
pub(crate) const DISAGGREGATION_PHASE: &str = "tokenmeter_disaggregation_phase_seconds";

/// Defines the phase histogram (the TTFT buckets, the TTFT target an exact edge: the phases
/// split a TTFT) and describes both series.
pub fn describe(metrics: &Metrics, config: &Config) {
    metrics.define_described_histogram(
        DISAGGREGATION_PHASE,
        &ttft_buckets(config),
        "Phases of requests prefilled on a prefill pool, by phase: prefill, transfer, decode_first_token.",
    );
    metrics.describe_counter(
        DISAGGREGATED_REQUESTS,
        "Requests of a pool with a prefill pool, by result: remote, local_short, local_cached, local_busy, unsupported, prefill_unavailable, prefill_failed, prefill_timeout, transfer_failed, client_gone.",
    );
}
