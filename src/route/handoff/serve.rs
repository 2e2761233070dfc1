//! The handoff phase of one request: where its prefill runs, the protocol's prefill phase, and the
//! decode request (sent again without the KV when the decode backend refuses it).
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderName, HeaderValue, Request};
use tokio::time::Instant;

use super::phase::Handoff;
use super::policy::{self, Choice, PolicyInput};
use super::remote::PrefillInput;
use super::slots::{Held, Placement, SlotGuard};
use super::{llamacpp, vllm, PoolHandoff};
use crate::config::HandoffProtocol;
use crate::context::RequestContext;
use crate::dialect::Dialect;
use crate::proxy::phase::{Answer, Next, Phase};
use crate::proxy::{Failure, RequestBody};
use crate::route::handoff::record::{HandoffRecord, HandoffResult};
use crate::route::replay::Replay;
use crate::upstream::InFlight;

/// The header that names a request to both replicas.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What goes to the decode backend.
#[derive(Debug, Default)]
struct Decode {
    /// The decode request's body; `None`: the client's, unchanged.
    body: Option<Bytes>,
    /// After a remote prefill whose KV the decode backend may refuse: the body to send it again
    /// with (the request as it would have been without a prefill pool).
    local: Option<Bytes>,
    /// llama.cpp: the decode slot, held to the end of the stream.
    slot: Option<SlotGuard>,
}

impl Phase for Handoff {
    fn run<N: Next>(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> impl Future<Output = Answer> + Send {
        // Boxed (in a pool that hands off: the phase is there only then): the prefill's
        // exchanges are kilobytes of state that the phases above would otherwise hold inline.
        Box::pin(self.handoff(context, req, next))
    }
}

impl Handoff {
    async fn handoff<N: Next>(
        &self,
        mut context: Box<RequestContext>,
        mut req: Request<RequestBody>,
        next: &N,
    ) -> Answer {
        let handoff = context
            .route
            .pool
            .as_deref()
            .and_then(|name| self.handoff_of(name));
        let (Some(handoff), Some(generation)) = (handoff, context.request.generation.as_ref())
        else {
            return next.call(context, req).await;
        };
        let body = generation.body.clone();
        if !supported(&handoff, &context, &body) {
            context.handoff = Some(HandoffRecord::new(HandoffResult::Unsupported, 0));
            return next.call(context, req).await;
        }
        let (choice, uncached) = self.choose(&handoff, &context);
        if choice == Choice::Remote {
            // The decode backend will not compute this prompt: it stops counting as prefill
            // queued there (what the next placements and their predictions weigh). A fallback
            // that prefills it there after all is not counted again.
            if let Some(in_flight) = &context.route.in_flight {
                in_flight.0.first_frame();
            }
        }
        if choice == Choice::Remote && !req.headers().contains_key(REQUEST_ID) {
            let id = format!("tokenmeter-{:032x}", rand::random::<u128>());
            if let Ok(value) = HeaderValue::from_str(&id) {
                req.headers_mut().insert(REQUEST_ID, value);
            }
        }
        let input = PrefillInput {
            handoff: &handoff,
            req: &req,
            body: &body,
            uncached,
        };
        let decode = match handoff.protocol {
            HandoffProtocol::Vllm => self.vllm(input, choice, &mut context).await,
            HandoffProtocol::Llamacpp => self.llamacpp(input, choice, &mut context).await,
        };
        if let Some(slot) = decode.slot {
            let load = context.route.in_flight.take();
            context.route.in_flight = Some(InFlight(Arc::new(Held { load, slot })));
        }
        // Taken before the body changes: the head still describes the client's body.
        let retry = decode.local.map(|local| Replay::with_body(&req, local));
        if let Some(body) = decode.body {
            req.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
            *req.body_mut() = RequestBody::buffered(body);
        }
        if let Some(record) = context.handoff.as_mut() {
            record.decode_sent = Some(Instant::now());
        }
        let Some(retry) = retry else {
            return next.call(context, req).await;
        };
        // The decode backend's load guard outlives a refused transfer's answer, for the retry.
        let guard = context.route.in_flight.clone();
        let mut response = next.call(context, req).await?;
        if !response.status().is_server_error() {
            return Ok(response);
        }
        // The decode replica could not take the KV and answered an error before any byte of a
        // stream: it serves the whole request, as it would have without a prefill pool.
        let Some(mut context) = RequestContext::take(response.extensions_mut(), "handoff") else {
            return Err(Failure::lost());
        };
        drop(response);
        tracing::debug!("the decode replica refused the transferred KV: prefilling it there");
        context.route.in_flight = guard;
        if let Some(record) = context.handoff.as_mut() {
            record.result = HandoffResult::TransferFailed;
            record.decode_sent = Some(Instant::now());
        }
        next.call(context, retry.build()).await
    }

    /// Where the prefill runs ([`policy::decide_predicted`] in a decode pool that places by
    /// predicted latency, else [`policy::decide`]), and the uncached prompt tokens it weighed.
    fn choose(&self, handoff: &PoolHandoff, context: &RequestContext) -> (Choice, u64) {
        let (prompt_tokens, text_bytes) = context
            .route
            .estimate
            .map_or((0, 0), |e| (e.tokens, e.size.text_bytes));
        let uncached =
            policy::uncached(prompt_tokens, text_bytes, context.route.cached_prompt_bytes);
        if let Some(choice) = self.decide_handoff(context, prompt_tokens) {
            return (choice, uncached);
        }
        let input = PolicyInput {
            prompt_tokens,
            uncached_tokens: uncached,
            prefill_queue: self.router.pools[handoff.prefill]
                .members
                .shortest_queue(Instant::now()),
        };
        (policy::decide(handoff, input), uncached)
    }

    /// vLLM: a remote prefill's `kv_transfer_params` go with the client's request.
    async fn vllm(
        &self,
        input: PrefillInput<'_>,
        choice: Choice,
        context: &mut RequestContext,
    ) -> Decode {
        let PrefillInput { body, uncached, .. } = input;
        if let Choice::Local(result) = choice {
            context.handoff = Some(HandoffRecord::new(result, uncached));
            return Decode::default();
        }
        start(context, uncached);
        let prefilled = input.in_time(self.prefill_vllm(input, context)).await;
        let spliced = prefilled
            .and_then(|params| vllm::decode_body(body, &params).ok_or(HandoffResult::Unsupported));
        match spliced {
            Ok(decode) => {
                finish(context, HandoffResult::Remote);
                Decode {
                    body: Some(decode),
                    local: Some(body.clone()),
                    slot: None,
                }
            }
            Err(result) => {
                finish(context, result);
                Decode::default()
            }
        }
    }

    /// llama.cpp: every request runs in a slot of the decode server the proxy reserved. A remote
    /// prefill runs first (so a decode slot is never held while a prompt is computed elsewhere);
    /// its saved KV is restored into the slot once one is free.
    async fn llamacpp(
        &self,
        input: PrefillInput<'_>,
        choice: Choice,
        context: &mut RequestContext,
    ) -> Decode {
        let PrefillInput {
            handoff, uncached, ..
        } = input;
        let decode_backend = context.route.backend.as_ref().and_then(|target| {
            self.router
                .backend_of(context.route.pool.as_deref()?, &target.label)
        });
        let table = match &decode_backend {
            Some(backend) => self.slot_table(backend).await,
            None => None,
        };
        let (Some(decode_backend), Some(table)) = (decode_backend, table) else {
            // A server whose slots cannot be learned is served as without a prefill pool.
            context.handoff = Some(HandoffRecord::new(HandoffResult::Unsupported, uncached));
            return Decode::default();
        };
        let saved = match choice {
            Choice::Local(result) => {
                context.handoff = Some(HandoffRecord::new(result, uncached));
                None
            }
            Choice::Remote => {
                start(context, uncached);
                let saved = input.in_time(self.prefill_llamacpp(input, context)).await;
                saved.map_err(|result| finish(context, result)).ok()
            }
        };
        let key = self.conversation_key(context, input.req.headers());
        let Some(slot) = table
            .reserve(Placement::Conversation(key), handoff.slot_wait)
            .await
        else {
            match context.handoff.as_mut() {
                Some(record) => record.result = HandoffResult::SlotsBusy,
                None => {
                    context.handoff = Some(HandoffRecord::new(HandoffResult::SlotsBusy, uncached))
                }
            }
            return Decode::default();
        };
        if let Some(file) = saved {
            let restored = self
                .restore_llamacpp(handoff, &decode_backend, &slot, &file)
                .await;
            drop(file);
            if let (Ok(()), Some(record)) = (&restored, context.handoff.as_mut()) {
                record.transfer_done = Some(Instant::now());
            }
            finish(
                context,
                restored.map_or_else(|result| result, |()| HandoffResult::Remote),
            );
        }
        Decode {
            body: llamacpp::with_slot(input.body, slot.id()),
            local: None,
            slot: Some(slot),
        }
    }
}

/// Whether the protocol can hand this request off: an API it speaks, a JSON object body that does
/// not speak the protocol itself.
fn supported(handoff: &PoolHandoff, context: &RequestContext, body: &[u8]) -> bool {
    if context.malformed() {
        return false;
    }
    match handoff.protocol {
        HandoffProtocol::Vllm => {
            matches!(
                context.dialect,
                Some(Dialect::OpenAiChat | Dialect::OpenAiCompletions)
            ) && !vllm::mentions_params(body)
        }
        HandoffProtocol::Llamacpp => {
            matches!(
                context.dialect,
                Some(Dialect::OpenAiChat | Dialect::OpenAiCompletions | Dialect::LlamaCpp)
            ) && !llamacpp::mentions_slot(body)
        }
    }
}

/// A remote prefill starts: the record is pending until it ends (a request abandoned then is
/// `client_gone`).
fn start(context: &mut RequestContext, uncached: u64) {
    let mut record = HandoffRecord::new(HandoffResult::Pending, uncached);
    record.prefill_started = Some(Instant::now());
    context.handoff = Some(record);
}

/// A remote prefill's phase ended with `result`.
fn finish(context: &mut RequestContext, result: HandoffResult) {
    if let Some(record) = context.handoff.as_mut() {
        record.result = result;
        record.prefill_done.get_or_insert_with(Instant::now);
    }
}
