//! The prefill phase on the prefill pool: picking a prefill backend, the prefill request, and each
//! protocol's transfer of the KV cache to the decode backend.
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request};
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::llamacpp::{self, TransferFile};
use super::phase::Handoff;
use super::prefill::{self, PrefillError};
use super::slots::{Placement, SlotGuard, SlotTable};
use super::{vllm, PoolHandoff};
use crate::context::RequestContext;
use crate::proxy::RequestBody;
use crate::route::backend::{Backend, LoadGuard};
use crate::route::handoff::record::HandoffResult;
use crate::route::health::Fault;
use crate::route::placement::Demand;
use crate::route::record::RoutePlan;
use crate::trace::record::TraceState;

/// The request a remote prefill is for, as the handoff phase decided it: what each protocol's
/// prefill works from.
#[derive(Clone, Copy)]
pub(super) struct PrefillInput<'a> {
    pub handoff: &'a PoolHandoff,
    pub req: &'a Request<RequestBody>,
    /// The client's body.
    pub body: &'a Bytes,
    /// The prompt tokens the decode backend's cache was not known to hold (the prefill's load).
    pub uncached: u64,
}

impl PrefillInput<'_> {
    /// `prefill` within the pool's `prefill_timeout`; past it the prefill is dropped (and its
    /// request with it) and the result is `prefill_timeout`.
    pub(super) async fn in_time<T>(
        self,
        prefill: impl Future<Output = Result<T, HandoffResult>>,
    ) -> Result<T, HandoffResult> {
        tokio::time::timeout(self.handoff.prefill_timeout, prefill)
            .await
            .unwrap_or(Err(HandoffResult::PrefillTimeout))
    }
}

impl Handoff {
    /// The handoff of the pool named `name`, when it has one.
    pub(super) fn handoff_of(&self, name: &str) -> Option<Arc<PoolHandoff>> {
        let pool = self.router.pools.iter().find(|pool| &*pool.name == name)?;
        pool.handoff.clone()
    }

    /// The slot table of a llama.cpp server, its size learned from `GET /props` the first time.
    pub(super) async fn slot_table(&self, backend: &Arc<Backend>) -> Option<Arc<SlotTable>> {
        if let Some(table) = self.router.slot_tables.get(&backend.target.label) {
            return Some(table);
        }
        let client = self.router.client.get()?;
        let slots =
            llamacpp::total_slots(client, backend, self.router.settings.probe_timeout).await?;
        Some(self.router.slot_tables.of(&backend.target.label, slots))
    }

    /// The request's conversation key (its prompt's prefix name), when its pool names prompts.
    pub(super) fn conversation_key(
        &self,
        context: &RequestContext,
        headers: &HeaderMap,
    ) -> Option<u64> {
        self.router
            .affinity_keys(context, headers)
            .prefix
            .map(|prefix| prefix.key)
    }

    /// A prefill backend of `handoff`'s prefill pool (its balancing and affinity), written into
    /// the record; none while every one is ejected.
    fn pick_prefill(
        &self,
        handoff: &PoolHandoff,
        context: &mut RequestContext,
        headers: &HeaderMap,
    ) -> Result<Arc<Backend>, HandoffResult> {
        let plan = RoutePlan {
            pools: vec![handoff.prefill],
            spill_queue_tokens: None,
        };
        let keys = self.router.affinity_keys_in(context, headers, &plan.pools);
        let now = Instant::now();
        let pick = self
            .router
            .pick(&plan, &keys, Demand::of(context, now), &[], now)
            .filter(|pick| pick.reason != "panic")
            .ok_or(HandoffResult::PrefillUnavailable)?;
        if let Some(record) = context.handoff.as_mut() {
            record.prefill_backend = Some(pick.backend.target.clone());
        }
        Ok(pick.backend)
    }

    /// Sends the prefill request (its prompt counted as the backend's queued load meanwhile; its
    /// span started in `context`'s trace, when traced) and returns a successful answer; a failure
    /// is reported to the backend's health as a dispatch would report it.
    async fn send_prefill(
        &self,
        input: PrefillInput<'_>,
        backend: &Arc<Backend>,
        context: &mut RequestContext,
        body: Bytes,
    ) -> Result<Bytes, HandoffResult> {
        let PrefillInput {
            handoff,
            req,
            uncached,
            ..
        } = input;
        let traceparent = context
            .tracing
            .as_deref_mut()
            .and_then(TraceState::start_prefill);
        let client = self
            .router
            .client
            .get()
            .ok_or(HandoffResult::PrefillUnavailable)?;
        let path = req.uri().path_and_query().map_or("/", |path| path.as_str());
        let before = backend.load(Instant::now());
        let started = Instant::now();
        let load = LoadGuard::new(Arc::clone(backend), uncached);
        let sent = prefill::send(
            client,
            backend,
            path,
            req.headers(),
            traceparent,
            body,
            handoff.prefill_timeout,
        )
        .await;
        drop(load);
        let failed = |fault: Fault, result: HandoffResult| {
            self.router.report(handoff.prefill, backend, fault);
            Err(result)
        };
        match sent {
            Ok((status, answer)) if status.is_success() => {
                backend.on_success();
                let prompt_tokens = context.route.estimate.map_or(uncached, |e| e.tokens);
                self.prefilled(context, backend, before, prompt_tokens, started.elapsed());
                Ok(answer)
            }
            Ok((status, _)) if status.is_server_error() => {
                failed(Fault::Answer, HandoffResult::PrefillFailed)
            }
            Ok(_) => Err(HandoffResult::PrefillFailed),
            Err(PrefillError::Timeout(_)) => failed(Fault::Answer, HandoffResult::PrefillTimeout),
            Err(err) => {
                tracing::debug!(error = %err, backend = &*backend.target.label, "prefill failed");
                failed(Fault::Connection, HandoffResult::PrefillFailed)
            }
        }
    }

    /// vLLM: the prefill request asks for a remote decode; its answer's `kv_transfer_params`.
    pub(super) async fn prefill_vllm(
        &self,
        input: PrefillInput<'_>,
        context: &mut RequestContext,
    ) -> Result<Box<RawValue>, HandoffResult> {
        let backend = self.pick_prefill(input.handoff, context, input.req.headers())?;
        let prefill_body =
            vllm::prefill_body(input.body).map_err(|_| HandoffResult::Unsupported)?;
        let answer = self
            .send_prefill(input, &backend, context, prefill_body)
            .await;
        prefilled(context);
        vllm::offered(&answer?).ok_or(HandoffResult::TransferFailed)
    }

    /// llama.cpp: the prompt computed in a reserved slot of the prefill server and saved to a
    /// file (removed when the returned guard drops: after the restore, or with the request).
    pub(super) async fn prefill_llamacpp(
        &self,
        input: PrefillInput<'_>,
        context: &mut RequestContext,
    ) -> Result<TransferFile, HandoffResult> {
        let PrefillInput {
            handoff,
            req,
            body,
            uncached,
        } = input;
        let client = self
            .router
            .client
            .get()
            .ok_or(HandoffResult::PrefillUnavailable)?;
        let dir = handoff
            .slot_dir
            .as_deref()
            .ok_or(HandoffResult::Unsupported)?;
        let backend = self.pick_prefill(handoff, context, req.headers())?;
        let table = self
            .slot_table(&backend)
            .await
            .ok_or(HandoffResult::PrefillUnavailable)?;
        // Short prompts before long ones in the server's batches (see [`Placement::First`]).
        let placement = if uncached < handoff.min_prompt_tokens {
            Placement::First
        } else {
            Placement::Last
        };
        let slot = table
            .reserve(placement, handoff.slot_wait)
            .await
            .ok_or(HandoffResult::PrefillUnavailable)?;
        let prefill_body =
            llamacpp::prefill_body(body, slot.id()).map_err(|_| HandoffResult::Unsupported)?;
        let answer = self
            .send_prefill(input, &backend, context, prefill_body)
            .await;
        prefilled(context);
        answer?;
        let file = TransferFile::new(dir, &llamacpp::file_name(), handoff.prefill_timeout);
        llamacpp::slot_action(
            client,
            &backend,
            slot.id(),
            "save",
            file.name(),
            handoff.prefill_timeout,
        )
        .await
        .map_err(|err| {
            tracing::debug!(error = %err, "KV save failed");
            HandoffResult::TransferFailed
        })?;
        Ok(file)
    }

    /// llama.cpp: restores a saved prefill into `slot` of the decode server `decode`.
    pub(super) async fn restore_llamacpp(
        &self,
        handoff: &PoolHandoff,
        decode: &Backend,
        slot: &SlotGuard,
        file: &TransferFile,
    ) -> Result<(), HandoffResult> {
        let client = self
            .router
            .client
            .get()
            .ok_or(HandoffResult::TransferFailed)?;
        llamacpp::slot_action(
            client,
            decode,
            slot.id(),
            "restore",
            file.name(),
            handoff.prefill_timeout,
        )
        .await
        .map(drop)
        .map_err(|err| {
            tracing::debug!(error = %err, "KV restore failed");
            HandoffResult::TransferFailed
        })
    }
}

/// The prefill's answer is in.
fn prefilled(context: &mut RequestContext) {
    if let Some(record) = context.handoff.as_mut() {
        record.prefill_done = Some(Instant::now());
    }
}
