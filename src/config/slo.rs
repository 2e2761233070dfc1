//! `[slo]`: the targets each stream is judged against (SLO attainment, goodput, a tenant's
//! attainment) and that a `balance = "slo"` pool places it by — one pair for every request, or
//! different ones per model and per request class.
//!
//! A fleet rarely holds every request to one TTFT: a 70B model's prefill is slower than an 8B's,
//! and an interactive chat wants its first token sooner than a batch summary a program reads
//! whole. So:
//!
//! ```toml
//! [slo]
//! ttft = "800ms"
//! tpot = "35ms"
//! max_gap = "250ms"               # optional: the largest gap a stream may have
//! class_header = "x-slo-class"   # the default
//!
//! [slo.models."llama-3.1-70b"]    # requests naming this model
//! ttft = "2s"
//!
//! [slo.classes.batch]             # requests with `x-slo-class: batch`
//! ttft = "10s"
//! tpot = "100ms"
//! ```
//!
//! **The gap target** (`max_gap`, off unless set): TPOT is a mean, and a mean hides a stall (a
//! 300 ms gap over 70 tokens adds ~4 ms to it), while a reader feels every one. With `max_gap`
//! set, a stream meets its SLO only if its largest gap between two token events is within it too,
//! so a placement that parks a long prefill beside a chat's decode misses the chat's SLO. It is off
//! by default because, unlike TTFT and TPOT, no one value is standard (it depends on the UI and
//! the reader), because with it off `slo="all"` and goodput keep vLLM's definition (TTFT and TPOT:
//! `vllm bench serve --goodput`) and stay comparable with it, and because an upgrade should not
//! move anyone's attainment or fire their alerts. `250ms` is a good start for chat: about seven
//! tokens at a 35 ms cadence, well under a long prompt's prefill step (0.3-0.8 s), which is the
//! stall it is there to see.
//!
//! Each request's targets are resolved once, when its body has named its model: its class's
//! (by the header's value), else its model's, else the defaults, key by key (a class that sets
//! only `ttft` keeps the model's `tpot`). A class the configuration does not name is no class.
//! The header is the operator's contract with the clients in front, and passes upstream as it
//! came. Every target is an exact bucket edge of the histograms it judges, so attainment at it
//! can be read from them too.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// The targets one stream is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SloTargets {
    pub ttft: Duration,
    pub tpot: Duration,
    /// The largest gap between two token events a stream may have; `None`: not judged.
    pub max_gap: Option<Duration>,
}

/// `[slo]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SloConfig {
    /// The default TTFT target.
    #[serde(with = "super::spelling::human_duration")]
    pub ttft: Duration,
    /// The default TPOT target (also the ITL histogram's bucket edge).
    #[serde(with = "super::spelling::human_duration")]
    pub tpot: Duration,
    /// The default gap target (also an ITL bucket edge); unset: gaps are not judged.
    #[serde(
        with = "super::spelling::some_human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_gap: Option<Duration>,
    /// The request header that names a request's class.
    #[serde(
        deserialize_with = "header_name",
        serialize_with = "super::spelling::header_text"
    )]
    pub class_header: http::HeaderName,
    /// Targets of the requests that name a model, by the model's name as the request body gives
    /// it (`[slo.models."<name>"]`).
    pub models: BTreeMap<String, TargetsOverride>,
    /// Targets of a request class (`[slo.classes.<name>]`), by the class header's value.
    pub classes: BTreeMap<String, TargetsOverride>,
}

/// Targets that replace the ones beneath them, key by key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TargetsOverride {
    #[serde(
        with = "super::spelling::some_human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttft: Option<Duration>,
    #[serde(
        with = "super::spelling::some_human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub tpot: Option<Duration>,
    #[serde(
        with = "super::spelling::some_human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_gap: Option<Duration>,
}

/// The class header's name by default.
pub(crate) const DEFAULT_CLASS_HEADER: &str = "x-slo-class";

impl Default for SloConfig {
    fn default() -> Self {
        Self {
            ttft: Duration::from_millis(800),
            tpot: Duration::from_millis(35),
            max_gap: None,
            class_header: http::HeaderName::from_static(DEFAULT_CLASS_HEADER),
            models: BTreeMap::new(),
            classes: BTreeMap::new(),
        }
    }
}

impl SloConfig {
    /// The defaults, for a request that names neither a configured model nor a class.
    pub fn defaults(&self) -> SloTargets {
        SloTargets {
            ttft: self.ttft,
            tpot: self.tpot,
            max_gap: self.max_gap,
        }
    }

    /// Whether any target differs by model or class (otherwise every request has the defaults).
    pub fn varies(&self) -> bool {
        !self.models.is_empty() || !self.classes.is_empty()
    }

    /// The targets of a request for `model` in `class`: the class's, over the model's, over the
    /// defaults, key by key.
    pub fn targets(&self, model: Option<&str>, class: Option<&str>) -> SloTargets {
        let layers = [
            model.and_then(|model| self.models.get(model)),
            class.and_then(|class| self.classes.get(class)),
        ];
        layers
            .into_iter()
            .flatten()
            .fold(self.defaults(), |targets, layer| SloTargets {
                ttft: layer.ttft.unwrap_or(targets.ttft),
                tpot: layer.tpot.unwrap_or(targets.tpot),
                max_gap: layer.max_gap.or(targets.max_gap),
            })
    }

    /// Every TTFT target, distinct and ascending: the TTFT histograms' extra bucket edges.
    pub fn ttft_targets(&self) -> Vec<Duration> {
        self.all(|layer| layer.ttft, Some(self.ttft))
    }

    /// Every TPOT target, distinct and ascending: the TPOT and ITL histograms' extra bucket edges.
    pub fn tpot_targets(&self) -> Vec<Duration> {
        self.all(|layer| layer.tpot, Some(self.tpot))
    }

    /// Every gap target, distinct and ascending: more of the ITL histograms' bucket edges, so the
    /// share of gaps over a target reads from them exactly.
    pub fn gap_targets(&self) -> Vec<Duration> {
        self.all(|layer| layer.max_gap, self.max_gap)
    }

    fn all(
        &self,
        key: impl Fn(&TargetsOverride) -> Option<Duration>,
        default: Option<Duration>,
    ) -> Vec<Duration> {
        let mut out: Vec<Duration> = default
            .into_iter()
            .chain(
                self.models
                    .values()
                    .chain(self.classes.values())
                    .filter_map(key),
            )
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Each target with its key, for the check that none is zero.
    pub(crate) fn keyed_targets(&self) -> Vec<(String, Duration)> {
        let mut out = vec![
            ("slo.ttft".to_owned(), self.ttft),
            ("slo.tpot".to_owned(), self.tpot),
        ];
        out.extend(self.max_gap.map(|gap| ("slo.max_gap".to_owned(), gap)));
        for (table, entries) in [("models", &self.models), ("classes", &self.classes)] {
            for (name, layer) in entries {
                let keyed = [
                    ("ttft", layer.ttft),
                    ("tpot", layer.tpot),
                    ("max_gap", layer.max_gap),
                ];
                for (key, value) in keyed {
                    if let Some(value) = value {
                        out.push((format!("slo.{table}.{name}.{key}"), value));
                    }
                }
            }
        }
        out
    }
}

fn header_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<http::HeaderName, D::Error> {
    let text = String::deserialize(deserializer)?;
    http::HeaderName::from_bytes(text.trim().as_bytes())
        .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a header name")))
}

#[cfg(test)]
mod tests;
