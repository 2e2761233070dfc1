//! The prompt's length before forwarding, calibrated online to the backend's tokenizer.
//!
//! tokenmeter ships no tokenizer: it measures the prompt *text* (the `content` of every chat
//! message, string or text parts, or the completions `prompt`) in bytes and multiplies by the
//! model's tokens-per-byte ratio. The ratio starts at the model's prior
//! (`routing.model_tokens_per_byte`, else `routing.prior_tokens_per_byte`) and every response that
//! reports `usage.prompt_tokens` updates it, as exponentially weighted sums of tokens and bytes (a
//! ratio of sums, so long prompts, the ones routing cares about, weigh the most). So do the counts
//! the router asks of a backend's `/tokenize` while the model is not yet *trusted* (see
//! [`Calibrator::trusted`] and [`super::tokenize`]). Prompts given as token ids are counted
//! exactly. The error of each estimate against the usage that followed is a histogram
//! (`tokenmeter_prompt_estimate_error_ratio`).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use metrics::{Gauge, Histogram};

use crate::context::{FinishHook, Finished};
use crate::metrics::Metrics;
use crate::request::PromptSize;

/// Weight of the prior, in bytes of pseudo-observation: a few prompts' worth, so the first real
/// responses move the ratio at once.
const PRIOR_BYTES: f64 = 4096.0;

/// Real prompt text a model's ratio must have learned from before it is trusted: about two long
/// prompts' worth.
pub(crate) const TRUSTED_BYTES: u64 = 8192;

/// A tokenizer count of at least this much text replaces a model's prior outright: it is the
/// backend's exact word on a real prompt, where the prior is a guess.
const REPLACES_PRIOR_BYTES: u64 = 1024;

/// How far the real ratio of an untrusted model may lie from its estimate, either way: 3x covers
/// English prose (~0.22 tokens per byte on Llama 3) to CJK text and small vocabularies (~0.5-0.7).
pub(crate) const UNTRUSTED_SPREAD: f64 = 3.0;

/// Per-model tokens-per-byte ratios, calibrated by responses and tokenizer counts.
#[derive(Debug)]
pub(crate) struct Calibrator {
    prior: f64,
    /// Configured priors, keyed by model label (such models always have a label of their own).
    priors: HashMap<Arc<str>, f64>,
    /// Weight kept by the history at each observation: `1 - 1/window`.
    keep: f64,
    metrics: Option<Arc<Metrics>>,
    /// Keyed by the bounded model label, so the map cannot grow without bound.
    models: Mutex<HashMap<Arc<str>, Ratio>>,
}

#[derive(Debug)]
struct Ratio {
    tokens: f64,
    bytes: f64,
    /// Prompt text bytes learned from (the prior's pseudo-bytes not included).
    learned_bytes: u64,
    /// A background tokenizer sample is under way.
    sampling: bool,
    error: Option<Histogram>,
    gauge: Option<Gauge>,
}

impl Calibrator {
    /// `prior` tokens per byte until calibrated; `window` observations of memory.
    pub fn new(prior: f64, window: u32, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            prior,
            priors: HashMap::new(),
            keep: 1.0 - 1.0 / f64::from(window.max(1)),
            metrics,
            models: Mutex::new(HashMap::new()),
        }
    }

    /// Sets configured per-model priors (model label -> tokens per byte).
    pub(crate) fn with_priors(mut self, priors: impl IntoIterator<Item = (Arc<str>, f64)>) -> Self {
        self.priors = priors.into_iter().collect();
        self
    }

    fn prior_of(&self, model: &Arc<str>) -> f64 {
        self.priors.get(model).copied().unwrap_or(self.prior)
    }

    /// The current ratio for a model label.
    pub(crate) fn tokens_per_byte(&self, model: &Arc<str>) -> f64 {
        let models = self.lock();
        models
            .get(model)
            .map_or_else(|| self.prior_of(model), |ratio| ratio.tokens / ratio.bytes)
    }

    /// The estimated prompt tokens of a request.
    pub fn estimate(&self, model: &Arc<str>, size: PromptSize) -> u64 {
        Self::tokens_at(size, self.tokens_per_byte(model))
    }

    fn tokens_at(size: PromptSize, tokens_per_byte: f64) -> u64 {
        size.token_ids + (size.text_bytes as f64 * tokens_per_byte).round() as u64
    }

    /// Whether the model's ratio can be relied on: it has a configured prior, or has learned
    /// from [`TRUSTED_BYTES`] of real prompt text.
    pub fn trusted(&self, model: &Arc<str>) -> bool {
        self.priors.contains_key(model)
            || self
                .lock()
                .get(model)
                .is_some_and(|ratio| ratio.learned_bytes >= TRUSTED_BYTES)
    }

    /// The range the prompt's true token count lies in, as far as the calibration knows: the
    /// estimate itself for a trusted model, else the estimate at the ratio divided and multiplied
    /// by [`UNTRUSTED_SPREAD`].
    pub fn range(&self, model: &Arc<str>, size: PromptSize) -> (u64, u64) {
        let ratio = self.tokens_per_byte(model);
        if self.trusted(model) {
            let estimate = Self::tokens_at(size, ratio);
            return (estimate, estimate);
        }
        (
            Self::tokens_at(size, ratio / UNTRUSTED_SPREAD),
            Self::tokens_at(size, ratio * UNTRUSTED_SPREAD),
        )
    }

    /// Claims the one background tokenizer sample a model may have under way; `false` when one
    /// is, or the model is trusted already. Released by [`Self::learn`] or [`Self::end_sample`].
    pub(crate) fn claim_sample(&self, model: &Arc<str>) -> bool {
        if self.priors.contains_key(model) {
            return false;
        }
        let mut models = self.lock();
        let ratio = self.entry(&mut models, model);
        if ratio.sampling || ratio.learned_bytes >= TRUSTED_BYTES {
            return false;
        }
        ratio.sampling = true;
        true
    }

    /// A background sample ended without a count.
    pub(crate) fn end_sample(&self, model: &Arc<str>) {
        if let Some(ratio) = self.lock().get_mut(model) {
            ratio.sampling = false;
        }
    }

    /// Learns from a response: the request of `size` was estimated at `estimated` and really had
    /// `actual` prompt tokens.
    pub fn observe(&self, model: &Arc<str>, size: PromptSize, estimated: u64, actual: u64) {
        let mut models = self.lock();
        let ratio = self.entry(&mut models, model);
        if actual > 0 {
            if let Some(error) = &ratio.error {
                error.record((estimated as f64 - actual as f64) / actual as f64);
            }
        }
        // Token-id prompts were counted exactly: only the text part teaches the ratio.
        self.add(
            ratio,
            size.text_bytes,
            actual.saturating_sub(size.token_ids),
        );
    }

    /// Learns from a backend's tokenizer: `text_bytes` of prompt text are `tokens` tokens. Enough
    /// text replaces the prior outright (see [`REPLACES_PRIOR_BYTES`]); it also ends a background
    /// sample.
    pub fn learn(&self, model: &Arc<str>, text_bytes: u64, tokens: u64) {
        let mut models = self.lock();
        let ratio = self.entry(&mut models, model);
        ratio.sampling = false;
        if ratio.learned_bytes == 0 && text_bytes >= REPLACES_PRIOR_BYTES {
            ratio.tokens = 0.0;
            ratio.bytes = 0.0;
        }
        self.add(ratio, text_bytes, tokens);
    }

    fn add(&self, ratio: &mut Ratio, text_bytes: u64, tokens: u64) {
        if text_bytes > 0 {
            ratio.tokens = ratio.tokens * self.keep + tokens as f64;
            ratio.bytes = ratio.bytes * self.keep + text_bytes as f64;
            ratio.learned_bytes = ratio.learned_bytes.saturating_add(text_bytes);
        }
        if let Some(gauge) = &ratio.gauge {
            gauge.set(ratio.tokens / ratio.bytes);
        }
    }

    /// The model's record, created at its prior.
    fn entry<'m>(
        &self,
        models: &'m mut HashMap<Arc<str>, Ratio>,
        model: &Arc<str>,
    ) -> &'m mut Ratio {
        models.entry(Arc::clone(model)).or_insert_with(|| {
            let (error, gauge) = match &self.metrics {
                Some(metrics) => {
                    let (error, gauge) = super::series::prompt_estimate(metrics, model);
                    (Some(error), Some(gauge))
                }
                None => (None, None),
            };
            Ratio {
                tokens: self.prior_of(model) * PRIOR_BYTES,
                bytes: PRIOR_BYTES,
                learned_bytes: 0,
                sampling: false,
                error,
                gauge,
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Ratio>> {
        // A poisoned map only means a panic mid-update of two floats: still usable.
        self.models
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The calibration hangs off the finish point: every finished request whose stream reported
/// `usage.prompt_tokens` teaches its model's ratio what its estimate should have been.
impl FinishHook for Calibrator {
    fn finished(&self, request: &Finished<'_>) {
        let context = request.context;
        if let (Some(actual), Some(estimate), Some(model)) = (
            request.figures.input_tokens,
            context.route.estimate,
            &context.request.model_label,
        ) {
            self.observe(model, estimate.size, estimate.tokens, actual);
        }
    }
}

#[cfg(test)]
mod tests;
