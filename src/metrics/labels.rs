//! Label capping: a label value a client chooses (the model name, a tenant named by a header) must
//! not be able to create series without bound. Names get their own value up to a budget; the rest
//! are `other`, and a request that names none is `unknown`.
//!
//! `other` is a budget's overflow bucket for names a client chooses; the `_OTHER` of the
//! `gen_ai_operation_name` and `gen_ai_provider_name` labels is something else, OpenTelemetry's
//! value for "none of the known operations" (`crate::dialect::Operation`).
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::config::Config;

/// Label value for models beyond the label budget.
pub(crate) const MODEL_OTHER: &str = "other";
/// Label value when no model is known for a request: its body named none (or was not JSON), or
/// its body was not read: a path that is not one of the metered APIs' (an unknown POST, a `GET`)
/// streams through unread, so its model is never known.
pub(crate) const MODEL_UNKNOWN: &str = "unknown";
/// Longest model name given its own label value.
pub(crate) const MAX_MODEL_LABEL_BYTES: usize = 128;

/// The models that always get their own label value. A model with its own prompt prior needs its
/// own label: the calibration is keyed by it.
pub(super) fn labelled_models(config: &Config) -> Vec<String> {
    config
        .metering
        .models
        .iter()
        .chain(config.routing.model_tokens_per_byte.keys())
        .cloned()
        .collect()
}

/// Bounded label values: configured names, then the first `max_observed` names seen, then
/// `other` (and the `missing` value, [`MODEL_UNKNOWN`] for models, for no name). A client
/// sending 10 000 names creates at most `configured + max_observed + 2` values.
#[derive(Debug)]
pub struct BoundedLabels {
    /// `metering.models` (and the models with their own prompt prior): replaced on reload.
    fixed: RwLock<Arc<HashMap<String, Arc<str>>>>,
    observed: RwLock<HashMap<String, Arc<str>>>,
    max_observed: usize,
    other: Arc<str>,
    unknown: Arc<str>,
}

impl BoundedLabels {
    /// `configured` names always get their own value; `other` is the value past the budget,
    /// `missing` the value of no name.
    pub fn new(configured: &[String], max_observed: usize, other: &str, missing: &str) -> Self {
        Self {
            fixed: RwLock::new(Arc::new(Self::fixed_map(configured))),
            observed: RwLock::new(HashMap::new()),
            max_observed,
            other: Arc::from(other),
            unknown: Arc::from(missing),
        }
    }

    fn fixed_map(configured: &[String]) -> HashMap<String, Arc<str>> {
        configured
            .iter()
            .map(|name| (name.clone(), Arc::from(name.as_str())))
            .collect()
    }

    /// Replaces the configured names (a reload); names observed so far keep their labels.
    pub fn set_fixed(&self, configured: &[String]) {
        *self.fixed.write().unwrap_or_else(PoisonError::into_inner) =
            Arc::new(Self::fixed_map(configured));
    }

    pub fn label(&self, model: Option<&str>) -> Arc<str> {
        let Some(name) = model else {
            return Arc::clone(&self.unknown);
        };
        if let Some(label) = lookup(&self.fixed, name) {
            return label;
        }
        if name.len() > MAX_MODEL_LABEL_BYTES || name.is_empty() {
            return Arc::clone(&self.other);
        }
        if let Some(label) = lookup(&self.observed, name) {
            return label;
        }
        let mut observed = self
            .observed
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(label) = observed.get(name) {
            return Arc::clone(label);
        }
        if observed.len() >= self.max_observed {
            return Arc::clone(&self.other);
        }
        let label: Arc<str> = Arc::from(name);
        observed.insert(name.to_owned(), Arc::clone(&label));
        label
    }
}

/// `name`'s label in `map` (the fixed names or the observed ones), under its read lock. A
/// poisoned lock only means another thread panicked mid-insert; the map is still usable.
fn lookup<M: Borrow<HashMap<String, Arc<str>>>>(map: &RwLock<M>, name: &str) -> Option<Arc<str>> {
    let map = map.read().unwrap_or_else(PoisonError::into_inner);
    let map: &HashMap<String, Arc<str>> = (*map).borrow();
    map.get(name).cloned()
}

#[cfg(test)]
mod tests;
