//! The prompt's length before forwarding, calibrated online to the backend's tokenizer.
//!
//! tokenmeter ships no tokenizer: it measures the prompt *text* (the `content` of every chat
//! message, string or text parts, or the completions `prompt`) in bytes and multiplies by the
//! model's tokens-per-byte ratio. The ratio starts at `routing.prior_tokens_per_byte` and every
//! response that reports `usage.prompt_tokens` updates it, as exponentially weighted sums of tokens
//! and bytes (a ratio of sums, so long prompts, the ones routing cares about, weigh the most).
//! Prompts given as token ids are counted exactly. The error of each estimate against the usage
//! that followed is a histogram (`tokenmeter_prompt_estimate_error_ratio`).
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use metrics::{Gauge, Histogram};
use serde::Deserialize;

use crate::metrics::Metrics;

/// What a request's prompt is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptSize {
    /// Bytes of prompt text (unescaped UTF-8).
    pub text_bytes: u64,
    /// Tokens given directly as token ids (completions `prompt: [1, 2, 3]`).
    pub token_ids: u64,
}

/// Measures the prompt of a chat or completions body. A body that does not parse as either is
/// measured whole: an overestimate by its JSON syntax, never a zero that would route a huge prompt
/// to the decode pool.
pub fn prompt_size(body: &[u8]) -> PromptSize {
    let Ok(parsed) = serde_json::from_slice::<RequestBody<'_>>(body) else {
        return PromptSize {
            text_bytes: body.len() as u64,
            token_ids: 0,
        };
    };
    let mut size = PromptSize::default();
    for message in parsed.messages.iter().flatten() {
        match &message.content {
            Some(Content::Text(text)) => size.text_bytes += text.len() as u64,
            Some(Content::Parts(parts)) => {
                for text in parts.iter().filter_map(|part| part.text.as_ref()) {
                    size.text_bytes += text.len() as u64;
                }
            }
            None => {}
        }
    }
    match &parsed.prompt {
        Some(Prompt::Text(text)) => size.text_bytes += text.len() as u64,
        Some(Prompt::Texts(texts)) => {
            size.text_bytes += texts.iter().map(|t| t.len() as u64).sum::<u64>();
        }
        Some(Prompt::Tokens(ids)) => size.token_ids += ids.len() as u64,
        Some(Prompt::TokenLists(lists)) => {
            size.token_ids += lists.iter().map(|l| l.len() as u64).sum::<u64>();
        }
        None => {}
    }
    size
}

#[derive(Deserialize)]
struct RequestBody<'a> {
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(borrow, default)]
    prompt: Option<Prompt<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Content<'a>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Parts(#[serde(borrow)] Vec<Part<'a>>),
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Texts(#[serde(borrow)] Vec<Cow<'a, str>>),
    Tokens(Vec<u64>),
    TokenLists(Vec<Vec<u64>>),
}

/// Weight of the prior, in bytes of pseudo-observation: a few prompts' worth, so the first real
/// responses move the ratio at once.
const PRIOR_BYTES: f64 = 4096.0;

/// Per-model tokens-per-byte ratios, calibrated by responses.
#[derive(Debug)]
pub struct Calibrator {
    prior: f64,
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
    error: Option<Histogram>,
    gauge: Option<Gauge>,
}

impl Calibrator {
    /// `prior` tokens per byte until calibrated; `window` observations of memory.
    pub fn new(prior: f64, window: u32, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            prior,
            keep: 1.0 - 1.0 / f64::from(window.max(1)),
            metrics,
            models: Mutex::new(HashMap::new()),
        }
    }

    /// The current ratio for a model label.
    pub fn tokens_per_byte(&self, model: &Arc<str>) -> f64 {
        let models = self.lock();
        models
            .get(model)
            .map_or(self.prior, |ratio| ratio.tokens / ratio.bytes)
    }

    /// The estimated prompt tokens of a request.
    pub fn estimate(&self, model: &Arc<str>, size: PromptSize) -> u64 {
        let text = size.text_bytes as f64 * self.tokens_per_byte(model);
        size.token_ids + text.round() as u64
    }

    /// Learns from a response: the request of `size` was estimated at `estimated` and really had
    /// `actual` prompt tokens.
    pub fn observe(&self, model: &Arc<str>, size: PromptSize, estimated: u64, actual: u64) {
        let mut models = self.lock();
        let ratio = models.entry(Arc::clone(model)).or_insert_with(|| {
            let (error, gauge) = match &self.metrics {
                Some(metrics) => {
                    let (error, gauge) = metrics.prompt_estimate(model);
                    (Some(error), Some(gauge))
                }
                None => (None, None),
            };
            Ratio {
                tokens: self.prior * PRIOR_BYTES,
                bytes: PRIOR_BYTES,
                error,
                gauge,
            }
        });
        if actual > 0 {
            if let Some(error) = &ratio.error {
                error.record((estimated as f64 - actual as f64) / actual as f64);
            }
        }
        // Token-id prompts were counted exactly: only the text part teaches the ratio.
        let text_tokens = actual.saturating_sub(size.token_ids);
        if size.text_bytes > 0 {
            ratio.tokens = ratio.tokens * self.keep + text_tokens as f64;
            ratio.bytes = ratio.bytes * self.keep + size.text_bytes as f64;
        }
        if let Some(gauge) = &ratio.gauge {
            gauge.set(ratio.tokens / ratio.bytes);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Ratio>> {
        // A poisoned map only means a panic mid-update of two floats: still usable.
        self.models
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A response extension: the router's estimate for this request, for the meter to calibrate with
/// (and to use as N_in when the stream reports no `usage.prompt_tokens`).
#[derive(Debug, Clone)]
pub struct PromptEstimate {
    pub model: Arc<str>,
    pub size: PromptSize,
    pub estimated_tokens: u64,
    pub calibrator: Arc<Calibrator>,
}

impl PromptEstimate {
    /// Reports the backend's count of this prompt.
    pub fn observe(&self, actual_prompt_tokens: u64) {
        self.calibrator.observe(
            &self.model,
            self.size,
            self.estimated_tokens,
            actual_prompt_tokens,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_text_and_parts_are_measured_unescaped() {
        let body = br#"{"model":"m","messages":[{"role":"system","content":"ab\"c"},{"role":"user","content":[{"type":"text","text":"hello"},{"type":"image_url","image_url":{"url":"data:xyz"}}]},{"role":"assistant","content":null,"tool_calls":[]}]}"#;
        assert_eq!(
            prompt_size(body),
            PromptSize {
                text_bytes: 4 + 5,
                token_ids: 0
            },
            "escaped quote is one byte; image parts and null content add nothing"
        );
    }

    #[test]
    fn completions_prompts_in_every_shape() {
        let text = prompt_size(br#"{"prompt":"four","max_tokens":3}"#);
        assert_eq!(text.text_bytes, 4, "string prompt");
        let texts = prompt_size(br#"{"prompt":["ab","cde"]}"#);
        assert_eq!(texts.text_bytes, 5, "list of strings");
        let ids = prompt_size(br#"{"prompt":[1,2,3]}"#);
        assert_eq!(
            ids,
            PromptSize {
                text_bytes: 0,
                token_ids: 3
            },
            "token ids counted exactly"
        );
        let lists = prompt_size(br#"{"prompt":[[1,2],[3]]}"#);
        assert_eq!(lists.token_ids, 3, "lists of token ids");
    }

    #[test]
    fn unparseable_bodies_count_whole() {
        let body = br#"{"messages": 5}"#;
        assert_eq!(
            prompt_size(body).text_bytes,
            body.len() as u64,
            "measured whole, never zero"
        );
    }

    #[test]
    fn calibration_converges_on_the_backend_ratio() {
        let calibrator = Calibrator::new(0.25, 50, None);
        let model: Arc<str> = Arc::from("m");
        let size = PromptSize {
            text_bytes: 2000,
            token_ids: 0,
        };
        assert_eq!(
            calibrator.estimate(&model, size),
            500,
            "the prior before any response"
        );
        // The backend's tokenizer makes 0.5 tokens per byte (e.g. "w w w ..." on the sim).
        for i in 0..200u64 {
            let size = PromptSize {
                text_bytes: 1000 + 10 * i,
                token_ids: 0,
            };
            let estimated = calibrator.estimate(&model, size);
            calibrator.observe(&model, size, estimated, size.text_bytes / 2);
        }
        let ratio = calibrator.tokens_per_byte(&model);
        assert!(
            (ratio - 0.5).abs() < 0.001,
            "converged to 0.5 tokens/byte, got {ratio}"
        );
        assert_eq!(
            calibrator.estimate(&model, size),
            1000,
            "2000 bytes are now estimated at 1000 tokens"
        );
        let other: Arc<str> = Arc::from("other-model");
        assert_eq!(
            calibrator.tokens_per_byte(&other),
            0.25,
            "each model has its own ratio"
        );
    }

    #[test]
    fn token_ids_do_not_teach_the_text_ratio() {
        let calibrator = Calibrator::new(0.25, 10, None);
        let model: Arc<str> = Arc::from("m");
        let size = PromptSize {
            text_bytes: 0,
            token_ids: 700,
        };
        assert_eq!(calibrator.estimate(&model, size), 700, "exact");
        calibrator.observe(&model, size, 700, 700);
        assert_eq!(
            calibrator.tokens_per_byte(&model),
            0.25,
            "no text: the ratio is unchanged"
        );
    }
}
