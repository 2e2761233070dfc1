//! A `balance = "slo"` pool that hands prefills off to a prefill pool (`[pools.handoff]`): where
//! a request's prefill runs, by prediction, and what the request meets on a decode replica by that
//! path.
//!
//! The placement chooses the decode replica; the handoff then runs the prefill there or on the
//! prefill pool ([`decide_predicted`]). Scored as if every request prefilled where it decodes, a
//! document looked alike on every decode replica: predicted to stall each one's streams, its TTFT
//! that of a prefill at the decode replica's step budget. So it went where the fewest streams
//! were, whatever the prefills queued there before its first step, was counted `missed` though the
//! prefill pool would serve it in time, and a gateway queue held it for a replica that could
//! prefill it, which none needed to. Each decode replica is now scored on the path the handoff
//! will take from it ([`Handing::hands_off`]): through the prefill pool, the request's first token
//! comes after the prefill pool's best predicted prefill ([`PrefillPool::offer`]) and then what
//! the pool's handoffs measured after one, or the replica's own first step for a prompt it need
//! not compute when that is longer (the prefills queued there come first); its prefill does not
//! join that replica's batch, so it stalls no stream there and its TPOT is the batch's without it.
use std::cell::OnceCell;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::route::backend::predict::{Ask, Load, Predicted};
use crate::route::backend::Backend;
use crate::route::handoff::record::{Choice, HandoffResult};
use crate::route::members::Members;

/// The prefill pool of a `balance = "slo"` pool with a handoff, as its placement predicts it.
#[derive(Debug)]
pub struct PrefillPool {
    members: Arc<Members>,
    /// `prefill_timeout`: a prefill predicted to take longer there stays where it decodes.
    timeout: Duration,
}

/// What the prefill pool offers one prompt now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// The shortest predicted prefill among its available backends, with their queues.
    pub prefill: Duration,
    /// The shortest with nothing queued: what no placement can beat.
    pub alone: Duration,
    /// The prefill is predicted to outlast `prefill_timeout`.
    pub times_out: bool,
}

impl PrefillPool {
    pub fn new(members: Arc<Members>, timeout: Duration) -> Self {
        Self { members, timeout }
    }

    /// What its available backends offer a prompt of `prompt_tokens` (none cached: the prefill
    /// pool keeps no conversation) at `now`; `None` when it has none available.
    pub fn offer(&self, prompt_tokens: u64, now: Instant) -> Option<Offer> {
        let ask = Ask {
            prompt_tokens,
            cached_tokens: 0,
        };
        let (mut prefill, mut alone) = (Duration::MAX, Duration::MAX);
        for backend in self.members.backends().iter() {
            if backend.available(now) {
                let predicted = backend.predict(backend.load(now), ask);
                prefill = prefill.min(predicted.ttft);
                alone = alone.min(predicted.alone);
            }
        }
        if prefill == Duration::MAX {
            return None;
        }
        Some(Offer {
            prefill,
            alone,
            times_out: prefill > self.timeout,
        })
    }
}

/// What a request of `prompt_tokens` handed off meets on decode `backend` under `load`, after
/// `offer`: its first token after the prefill and then `overhead` (what the pool's handoffs
/// measured from a prefill's answer to the first token) or, when longer or before any was
/// measured, the backend's first step for a prompt it need not compute; the batch's TPOT without
/// its prefill; no stall.
pub fn through(
    offer: Offer,
    overhead: Option<Duration>,
    backend: &Backend,
    load: Load,
    prompt_tokens: u64,
) -> Predicted {
    let nothing_to_compute = Ask {
        prompt_tokens,
        cached_tokens: prompt_tokens,
    };
    let here = backend.predict(load, nothing_to_compute);
    let after = overhead.map_or(here.ttft, |overhead| overhead.max(here.ttft));
    Predicted {
        ttft: offer.prefill.saturating_add(after),
        tpot: here.tpot,
        alone: offer.alone.saturating_add(overhead.unwrap_or(here.alone)),
        stall: Duration::ZERO,
    }
}

/// What one placement in a pool that hands prefills off asks of the prefill pool: its offer for
/// the request, asked once and only when a decision weighs it (a chat that meets its targets where
/// it decodes never does, and costs nothing more than in another pool).
pub(crate) struct Handing<'a> {
    pool: &'a PrefillPool,
    prompt_tokens: u64,
    now: Instant,
    /// What the pool's handoffs measured from a prefill's answer to the first token, lately.
    overhead: Option<Duration>,
    offer: OnceCell<Option<Offer>>,
}

impl<'a> Handing<'a> {
    pub fn new(
        pool: &'a PrefillPool,
        prompt_tokens: u64,
        now: Instant,
        overhead: Option<Duration>,
    ) -> Self {
        Self {
            pool,
            prompt_tokens,
            now,
            overhead,
            offer: OnceCell::new(),
        }
    }

    fn offer(&self) -> Option<Offer> {
        *self
            .offer
            .get_or_init(|| self.pool.offer(self.prompt_tokens, self.now))
    }

    /// The request's first token through the prefill pool with nothing queued there (and what
    /// the handoffs measured after one); `None` when it would not go there (no prefill backend,
    /// or a prefill predicted past the timeout).
    pub fn alone(&self) -> Option<Duration> {
        let offer = self.offer().filter(|offer| !offer.times_out)?;
        Some(
            offer
                .alone
                .saturating_add(self.overhead.unwrap_or_default()),
        )
    }

    /// What the request meets on decode `backend` under `load` when the handoff takes its prefill
    /// off it ([`decide_predicted`]); `None` when it prefills there. `local` is what it meets
    /// prefilling there, stalling the streams there when `local_stalls`; `budget` is what is
    /// left of its TTFT target. Only a prefill that would stall the streams there or miss its
    /// target there weighs the path through the prefill pool: another stays where it decodes.
    pub fn hands_off(
        &self,
        backend: &Backend,
        load: Load,
        ask: Ask,
        local: &Predicted,
        local_stalls: bool,
        budget: Duration,
    ) -> Option<Predicted> {
        if !local_stalls && local.ttft <= budget {
            return None;
        }
        let offer = self.offer()?;
        let through = through(offer, self.overhead, backend, load, ask.prompt_tokens);
        let choice = decide_predicted(Forecast {
            local: local.ttft,
            local_stalls,
            remote: Some(through.ttft),
            remote_times_out: offer.times_out,
            budget,
            cached: ask.cached_tokens > 0,
        });
        (choice == Choice::Remote).then_some(through)
    }
}

/// What a decode pool with `balance = "slo"` weighs instead: predictions, each from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Forecast {
    /// The first token if it prefills where it decodes (the decode backend's latency model).
    pub local: Duration,
    /// A prefill where it decodes would stall the streams there: longer than the placement's
    /// stall threshold, with streams to stall.
    pub local_stalls: bool,
    /// The first token through the prefill pool ([`through`]); `None` while the prefill pool has
    /// no available backend.
    pub remote: Option<Duration>,
    /// The prefill pool's predicted prefill (before the transfer) is longer than
    /// `prefill_timeout`: handed off, the request would be abandoned there at the timeout and
    /// prefilled where it decodes anyway, late by the timeout.
    pub remote_times_out: bool,
    /// What is left of its TTFT target.
    pub budget: Duration,
    /// The decode backend's prompt cache holds part of the prompt.
    pub cached: bool,
}

/// Decides where a request's prefill runs by predicted latency: where it decodes when the prefill
/// pool is predicted to take longer than `prefill_timeout` (`local_busy`: the handoff would only
/// add the timeout to the same local prefill); the prefill pool for a prefill that would stall the
/// decode replica's streams (it would miss their ITL target there); otherwise where it decodes
/// (no transfer to pay for) when that meets its TTFT target, else the prefill pool when that
/// does, else the sooner.
pub(crate) fn decide_predicted(input: Forecast) -> Choice {
    let Some(remote) = input.remote else {
        return Choice::Local(HandoffResult::PrefillUnavailable);
    };
    if input.remote_times_out {
        return Choice::Local(HandoffResult::LocalBusy);
    }
    let local_met = input.local <= input.budget;
    let remote_met = remote <= input.budget;
    let local = || {
        Choice::Local(if input.cached {
            HandoffResult::LocalCached
        } else {
            HandoffResult::LocalShort
        })
    };
    if input.local_stalls {
        // Prefilled where it decodes, it would put every stream there past its ITL target: a
        // miss of the targets whatever its own TTFT. Protecting those streams is what the prefill
        // pool is for, even when its queue makes this request late (measured: keeping such
        // prefills local whenever the prefill pool's queue would miss a TTFT target the decode
        // replica meets took goodput at 48 requests/s from 41.8 to 14.2 req/s;
        // docs/disaggregation.md).
        return Choice::Remote;
    }
    match (local_met, remote_met) {
        (true, _) => local(),
        (false, true) => Choice::Remote,
        (false, false) if remote < input.local => Choice::Remote,
        (false, false) => local(),
    }
}
