//! The plan phase: between the meter (which read the body) and the dispatch.
//!
//! It writes the request's `estimate`, `plan` and `pool` ([`Router::plan`]): the prompt's size
//! from the meter's one walk of the body, times the model's calibrated tokens-per-byte ratio
//! ([`super::estimate`]); while a model is untrusted, a prompt whose pool depends on its true
//! length first asks a backend's tokenizer for the exact count, for at most
//! `routing.tokenize_timeout` ([`super::tokenize`]); then the rules list the candidate pools,
//! best first ([`super::rules`]). Every request is planned (one that is not a generation has no
//! prompt, and the rules may still name its pool by path); the dispatch then picks a backend.
//! The calibration learns from each finished request's `usage.prompt_tokens` at the finish point
//! ([`super::estimate::Calibrator`] is a finish hook).
//!
//! ```no_run
//! # use tokenmeter::{config::Config, metrics::Metrics, proxy, route};
//! # use tokenmeter::proxy::phase::Then;
//! # use std::sync::Arc;
//! let config = Config::default();
//! let metrics = Arc::new(Metrics::new(&config).unwrap());
//! let router = Arc::new(route::Router::from_config(&config, metrics).unwrap());
//! let forward = proxy::Forward::new(proxy::client::build(&config.upstream), &config.upstream);
//! let below_the_meter = Then::new(
//!     route::Plan::new(Arc::clone(&router)),
//!     Then::new(route::Dispatch::new(router), forward),
//! );
//! ```
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use tokio::time::Instant;

use super::backend::Backend;
use super::rules::RuleInput;
use super::tokenize;
use super::Router;
use crate::context::{Refusal, RequestContext};
use crate::proxy::phase::Check;
use crate::proxy::RequestBody;
use crate::request::{self, Inspection, PromptSize};
use crate::route::record::Estimate;

/// Background tokenizer samples are taken of prompts at least this long: a shorter one says more
/// about its chat template than about its tokenizer.
const MIN_SAMPLE_BYTES: u64 = 256;

impl Router {
    /// The plan phase for a request to `path`: writes `estimate`, `plan` and `pool` (the first
    /// planned pool) into the context. A generation body is measured from its one walk; any other
    /// request has no prompt.
    pub async fn plan(&self, path: &str, context: &mut RequestContext) {
        let label = context
            .request
            .model_label
            .clone()
            .unwrap_or_else(|| self.metrics.model_label(context.request.model.as_deref()));
        let measured = context.request.generation.as_ref().map(|generation| {
            let size = Inspection::prompt_of(generation.read.as_ref(), &generation.body);
            (size, generation.body.clone())
        });
        let mut tokens = measured
            .as_ref()
            .map_or(0, |(size, _)| self.calibrator.estimate(&label, *size));
        if let Some((size, body)) = &measured {
            if let Some(counted) = self
                .count_untrusted(path, context.request.model.as_deref(), &label, *size, body)
                .await
            {
                tokens = counted;
            }
        }
        context.route.estimate = measured.map(|(size, _)| Estimate { size, tokens });
        context.route.plan = self.rules.pools_for(RuleInput {
            path,
            model: context.request.model.as_deref(),
            prompt_tokens: tokens,
        });
        context.route.pool = context
            .route
            .plan
            .pools
            .first()
            .map(|&index| Arc::clone(&self.pools[index].name));
    }

    /// For a model whose prompt ratio is not trusted yet: when the prompt's pool depends on its
    /// true length (the low and high ends of [`Calibrator::range`] plan different first pools),
    /// asks a backend's tokenizer and returns the exact count, waiting at most
    /// `tokenize_timeout`; otherwise starts a background sample (at most one per model) and
    /// returns `None`. The count teaches the calibration either way, even when it comes after
    /// the wait was given up.
    async fn count_untrusted(
        &self,
        path: &str,
        model: Option<&str>,
        label: &Arc<str>,
        size: PromptSize,
        body: &Bytes,
    ) -> Option<u64> {
        let client = self.client.get()?;
        if !self.settings.tokenize || size.text_bytes == 0 || self.calibrator.trusted(label) {
            return None;
        }
        let (low, high) = self.calibrator.range(label, size);
        let first_pool = |prompt_tokens| {
            self.rules
                .pools_for(RuleInput {
                    path,
                    model,
                    prompt_tokens,
                })
                .pools
                .first()
                .copied()
        };
        let decides = first_pool(low) != first_pool(high);
        if !decides && (size.text_bytes < MIN_SAMPLE_BYTES || !self.calibrator.claim_sample(label))
        {
            return None;
        }
        let estimated = self.calibrator.estimate(label, size);
        let Some(backend) = self.tokenizer(first_pool(estimated)) else {
            if !decides {
                self.calibrator.end_sample(label);
            }
            return None;
        };
        let text = request::prompt_text(body)?;
        let mode = if decides { "wait" } else { "background" };
        let calibrator = Arc::clone(&self.calibrator);
        let metrics = Arc::clone(&self.metrics);
        let client = client.clone();
        let model = model.map(str::to_owned);
        let label = Arc::clone(label);
        let timeout = self
            .settings
            .probe_timeout
            .max(self.settings.tokenize_timeout);
        let ask = tokio::spawn(async move {
            let counted = tokenize::ask(&client, &backend, model.as_deref(), &text, timeout).await;
            match &counted {
                Ok(tokens) => calibrator.learn(&label, size.text_bytes, *tokens),
                Err(err) => {
                    tracing::debug!(error = %err, backend = &*backend.target.label, "tokenize failed");
                    calibrator.end_sample(&label);
                }
            }
            let result = counted.as_ref().map_or_else(|err| err.as_str(), |_| "ok");
            super::series::prompt_tokenize(&metrics, &label, mode, result);
            counted.ok().map(|tokens| size.token_ids + tokens)
        });
        if !decides {
            return None;
        }
        match tokio::time::timeout(self.settings.tokenize_timeout, ask).await {
            Ok(joined) => joined.ok().flatten(),
            Err(_elapsed) => None,
        }
    }

    /// A backend to ask for a token count: an available one that serves `/tokenize`, from the
    /// pool the estimate points at first, else from any pool.
    fn tokenizer(&self, preferred: Option<usize>) -> Option<Arc<Backend>> {
        let now = Instant::now();
        let pools = preferred
            .and_then(|index| self.pools.get(index))
            .into_iter()
            .chain(self.pools.iter());
        pools
            .flat_map(|pool| pool.backends().iter().cloned().collect::<Vec<_>>())
            .find(|backend| backend.tokenizes() && backend.available(now))
    }
}

/// The plan phase: plans each request, then passes it on.
#[derive(Debug, Clone)]
pub struct Plan {
    router: Arc<Router>,
}

impl Plan {
    pub fn new(router: Arc<Router>) -> Self {
        Self { router }
    }
}

impl Check for Plan {
    async fn check(
        &self,
        context: &mut RequestContext,
        req: &Request<RequestBody>,
    ) -> Result<(), Refusal> {
        self.router.plan(req.uri().path(), context).await;
        Ok(())
    }
}
