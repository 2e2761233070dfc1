//! Summaries of a load point: percentiles exactly as numpy's default (`linear`) computes
//! them, so numbers compare with vLLM `bench serve`, genai-perf and aiperf; per-class and
//! overall throughput and goodput.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{RequestRecord, Slo};

/// The `q` quantile (`0.0..=1.0`) of an ascending slice, with numpy's linear interpolation
/// between the ranks around `(n - 1) * q`. NaN for an empty slice (numpy raises).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let rank = (n - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// Distribution summary of one measure, in seconds (or tokens for token counts). With
/// `count == 0` every other field is 0 (JSON has no NaN).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summarises samples in any order (NaNs are dropped: they cannot be ranked).
    pub fn of(mut samples: Vec<f64>) -> Self {
        samples.retain(|v| !v.is_nan());
        if samples.is_empty() {
            return Summary::default();
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        Summary {
            count: n,
            mean: samples.iter().sum::<f64>() / n as f64,
            min: samples[0],
            p50: percentile(&samples, 0.50),
            p90: percentile(&samples, 0.90),
            p99: percentile(&samples, 0.99),
            max: samples[n - 1],
        }
    }
}

/// Everything measured for one workload class (or `"all"`) at one load point. Latency and
/// token summaries cover successful requests only; rates are over the point's wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassStats {
    pub class: String,
    /// Requests that ended (successful or not).
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    /// Errors by kind (`http`, `transport`, `error_event`, `incomplete`, `invalid_event`,
    /// `timeout`); kinds that did not occur are absent.
    pub error_kinds: BTreeMap<String, u64>,
    pub ttft: Summary,
    /// Every inter-token gap of every successful request, pooled.
    pub itl: Summary,
    pub tpot: Summary,
    pub e2e: Summary,
    /// N_out per request (tokens).
    pub output_tokens: Summary,
    /// N_in per request (tokens; from usage, else the words sent).
    pub prompt_tokens: Summary,
    pub output_tokens_total: u64,
    /// Of each successful request with two token events or more, its largest gap between them.
    #[serde(default)]
    pub max_gap: Summary,
    /// Successful requests that met the SLO (the gap target too, where the SLO has one).
    pub slo_met: u64,
    /// Successful requests per second.
    pub request_throughput: f64,
    /// Output tokens of successful requests per second.
    pub output_throughput: f64,
    /// SLO-meeting requests per second.
    pub goodput: f64,
    /// With a gap target: requests per second that met TTFT and TPOT, whatever their gaps
    /// (vLLM's goodput), beside `goodput`, which counts the gap target too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_ttft_tpot: Option<f64>,
}

/// Whether a successful request met the SLO (REFERENCE.md §1: TPOT only when N_out >= 2; its
/// largest gap, where the SLO has a gap target and the request two token events or more).
pub fn meets_slo(r: &RequestRecord, slo: &Slo) -> bool {
    let gap_ok = match (slo.max_gap, largest_gap(r)) {
        (Some(max), Some(gap)) => gap <= max.as_secs_f64(),
        _ => true,
    };
    meets_ttft_tpot(r, slo) && gap_ok
}

/// Whether a successful request met the TTFT and TPOT targets (vLLM's goodput).
fn meets_ttft_tpot(r: &RequestRecord, slo: &Slo) -> bool {
    let ttft_ok = r.ttft_s.is_some_and(|t| t <= slo.ttft.as_secs_f64());
    let tpot_ok = r.output_tokens < 2 || r.tpot_s.is_some_and(|t| t <= slo.tpot.as_secs_f64());
    r.outcome.is_ok() && ttft_ok && tpot_ok
}

/// A request's largest gap between two token events, in seconds; `None` with fewer than two.
fn largest_gap(r: &RequestRecord) -> Option<f64> {
    r.itl_s.iter().copied().max_by(f64::total_cmp)
}

impl ClassStats {
    /// Summarises `records` (already filtered to one class, or all) under the name `class`.
    pub fn from_records<'a>(
        class: &str,
        records: impl IntoIterator<Item = &'a RequestRecord>,
        wall_s: f64,
        slo: &Slo,
    ) -> Self {
        let mut s = ClassStats {
            class: class.to_string(),
            requests: 0,
            ok: 0,
            errors: 0,
            error_kinds: BTreeMap::new(),
            ttft: Summary::default(),
            itl: Summary::default(),
            tpot: Summary::default(),
            e2e: Summary::default(),
            output_tokens: Summary::default(),
            prompt_tokens: Summary::default(),
            output_tokens_total: 0,
            max_gap: Summary::default(),
            slo_met: 0,
            request_throughput: 0.0,
            output_throughput: 0.0,
            goodput: 0.0,
            goodput_ttft_tpot: None,
        };
        let mut ttft_tpot_met = 0u64;
        let mut max_gaps = vec![];
        let (mut ttft, mut itl, mut tpot, mut e2e, mut out, mut inp) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for r in records {
            s.requests += 1;
            if !r.outcome.is_ok() {
                s.errors += 1;
                *s.error_kinds
                    .entry(r.outcome.as_str().to_string())
                    .or_default() += 1;
                continue;
            }
            s.ok += 1;
            s.output_tokens_total += r.output_tokens;
            s.slo_met += u64::from(meets_slo(r, slo));
            ttft_tpot_met += u64::from(meets_ttft_tpot(r, slo));
            max_gaps.extend(largest_gap(r));
            ttft.extend(r.ttft_s);
            itl.extend_from_slice(&r.itl_s);
            tpot.extend(r.tpot_s);
            e2e.push(r.e2e_s);
            out.push(r.output_tokens as f64);
            inp.push(r.usage_prompt_tokens.unwrap_or(u64::from(r.prompt_words)) as f64);
        }
        s.ttft = Summary::of(ttft);
        s.itl = Summary::of(itl);
        s.tpot = Summary::of(tpot);
        s.e2e = Summary::of(e2e);
        s.output_tokens = Summary::of(out);
        s.prompt_tokens = Summary::of(inp);
        s.max_gap = Summary::of(max_gaps);
        if wall_s > 0.0 {
            s.request_throughput = s.ok as f64 / wall_s;
            s.output_throughput = s.output_tokens_total as f64 / wall_s;
            s.goodput = s.slo_met as f64 / wall_s;
            s.goodput_ttft_tpot = slo.max_gap.map(|_| ttft_tpot_met as f64 / wall_s);
        }
        s
    }
}

#[cfg(test)]
mod tests;
