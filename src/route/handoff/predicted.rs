//! What a decode pool with `balance = "slo"` predicts for a request's prefill, both ways: where it
//! decodes, and through the prefill pool ([`policy::decide_predicted`] weighs them).
//!
//! The placement chose the decode backend on the path it predicted then
//! ([`crate::route::placement::handed`]); at the dispatch the same figures are taken again, with
//! the moments since. Where it decodes is the decode backend's model (its queue, its prompt cache,
//! its measured prefill rate) less the moments since the dispatch, and whether that prefill stalls
//! the streams there, by the placement's own threshold. Through the prefill pool is the best
//! available prefill backend's predicted prefill (its latency model learns from the prefills it
//! served, [`Router::prefilled`]), then what the pool's handoffs measured from a prefill's answer
//! to the first token (the transfer and the decode replica's first step,
//! [`crate::route::placement::PoolSlo::handoff_overhead`]), or the decode backend's predicted
//! first token for a prompt it need not compute when that is longer ([`handed::through`]).
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::phase::Handoff;
use super::policy::{self, Choice, Forecast};
use crate::context::RequestContext;
use crate::route::backend::predict::{self, Ask, Load};
use crate::route::backend::Backend;
use crate::route::placement::handed;
use crate::route::placement::{for_prompt, stalling_until, stalls};

impl Handoff {
    /// Where the request of `context` (its estimated `prompt_tokens`) prefills, by
    /// [`policy::decide_predicted`], when its decode pool places by `balance = "slo"`; `None`
    /// otherwise. A prefill kept where it decodes that stalls the streams there marks the decode
    /// backend as stalling, as the placement marks a backend that prefills its own requests
    /// (which it does not do in a pool that hands prefills off: most of those go elsewhere).
    pub(super) fn decide_handoff(
        &self,
        context: &RequestContext,
        prompt_tokens: u64,
    ) -> Option<Choice> {
        let (forecast, decode) = self.predict_handoff(context, prompt_tokens)?;
        let choice = policy::decide_predicted(forecast);
        if matches!(choice, Choice::Local(_)) && forecast.local_stalls {
            let until = stalling_until(Instant::now(), forecast.local);
            decode.stall_until(until);
        }
        Some(choice)
    }

    /// The predictions of [`policy::decide_predicted`], and the decode backend.
    fn predict_handoff(
        &self,
        context: &RequestContext,
        prompt_tokens: u64,
    ) -> Option<(Forecast, Arc<Backend>)> {
        let prediction = context.route.prediction?;
        let slo = &self
            .router
            .pools
            .get(prediction.pool)?
            .placement
            .as_ref()?
            .slo;
        let decode = self.router.backend_of(
            context.route.pool.as_deref()?,
            &context.route.backend.as_ref()?.label,
        )?;
        let now = Instant::now();
        let own = Ask {
            prompt_tokens: prediction.prompt_tokens,
            cached_tokens: prediction.cached_tokens,
        };
        let load = Load {
            queued_tokens: prediction.queued_tokens,
            streams: prediction.streams,
        };
        let here = decode.predict(load, own);
        let targets = for_prompt(context.request.slo.unwrap_or(slo.targets), here.alone);
        let since_dispatch = context
            .marks
            .dispatched
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        let offer = slo
            .prefill_pool()
            .and_then(|prefill| prefill.offer(prompt_tokens, now));
        let overhead = slo.handoff_overhead();
        let through =
            offer.map(|offer| handed::through(offer, overhead, &decode, load, prompt_tokens));
        let forecast = Forecast {
            local: here.ttft.saturating_sub(since_dispatch),
            remote_times_out: offer.is_some_and(|offer| offer.times_out),
            local_stalls: prediction.streams > 0 && stalls(here.stall, targets),
            remote: through.map(|through| through.ttft),
            budget: targets
                .ttft
                .saturating_sub(now.saturating_duration_since(context.received)),
            cached: prediction.cached_tokens > 0,
        };
        Some((forecast, decode))
    }

    /// A prefill `backend` served for the request of `context` in `took`, sent when its load was
    /// `load`: its latency model learns it, when the request's decode pool places by
    /// `balance = "slo"` (whose models' memory it takes).
    pub(super) fn prefilled(
        &self,
        context: &RequestContext,
        backend: &Backend,
        load: Load,
        prompt_tokens: u64,
        took: Duration,
    ) {
        let Some(slo) = context.route.prediction.and_then(|prediction| {
            Some(Arc::clone(
                &self
                    .router
                    .pools
                    .get(prediction.pool)?
                    .placement
                    .as_ref()?
                    .slo,
            ))
        }) else {
            return;
        };
        let ask = Ask {
            prompt_tokens,
            cached_tokens: 0,
        };
        let outcome = predict::Outcome {
            ttft: took,
            tpot: None,
        };
        backend.learn(slo.memory, load, ask, outcome);
    }
}
