//! A metered stream without a network: the real [`MeteredBody`] (framer, classifier, record,
//! metric handles) over an in-memory upstream body that yields one vLLM chunk per frame. Shared
//! by the micro benchmarks (`benches/micro.rs`) and the allocation test (`tests/serial/alloc_meter.rs`).
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body::{Body, Frame};
use tokenmeter::config::Config;
use tokenmeter::context::{FinishHook, FinishHooks, RequestContext};
use tokenmeter::dialect::Dialect;
use tokenmeter::dialect::Operation;
use tokenmeter::meter::body::{MeteredBody, StreamMeter};
use tokenmeter::meter::finish::MeterHook;
use tokenmeter::meter::record::SloTargets;
use tokenmeter::meter::series::{MeterSeries, RequestLabels};
use tokenmeter::metrics::Metrics;
use tokenmeter::proxy::BodyError;
use tokenmeter::sse::DEFAULT_MAX_LINE;
use tokenmeter::sse::{Framer, StreamFormat};
use tokenmeter::upstream::Target;

/// A typical vLLM chat chunk: one token of content (~230 bytes on the wire).
pub const VLLM_CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-7f3a\",\"object\":\"chat.completion.chunk\",\"created\":1764400000,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

/// An upstream body that yields the same frame forever (a `Bytes` clone: no allocation).
#[derive(Debug)]
pub struct Repeat(pub Bytes);

impl Body for Repeat {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Poll::Ready(Some(Ok(Frame::data(self.0.clone()))))
    }
}

/// The meter's series in the proxy's metrics, with the shipped defaults.
pub fn series() -> Arc<MeterSeries> {
    let config = Config::default();
    let metrics = Arc::new(Metrics::new(&config).expect("default buckets are valid"));
    Arc::new(MeterSeries::new(metrics, &config))
}

/// The context of a chat request the server has just dispatched to backend `b` of pool `p`,
/// whose finish runs the meter's hook (the per-request series), as the stack's does.
pub fn chat_context(series: &Arc<MeterSeries>, model: &str) -> Box<RequestContext> {
    let slo = SloTargets {
        ttft: std::time::Duration::from_millis(800),
        tpot: std::time::Duration::from_millis(35),
        max_gap: None,
    };
    let hook: Arc<dyn FinishHook> = Arc::new(MeterHook::new(Arc::clone(series), slo));
    let mut context = RequestContext::for_head(
        tokio::time::Instant::now(),
        &Method::POST,
        &"/v1/chat/completions".parse().expect("a path"),
        &HeaderMap::new(),
        FinishHooks::new([hook]),
    );
    let label = series.metrics().model_label(Some(model));
    series
        .streams_active(Operation::of(Dialect::OpenAiChat), &label)
        .increment(1.0);
    context.request.model = Some(model.to_owned());
    context.request.model_label = Some(label);
    context.request.active = true;
    context.route.pool = Some(Arc::from("default"));
    context.route.backend = Some(Target::from_url("http://127.0.0.1:8001").expect("a target"));
    context.upstream_status = Some(StatusCode::OK);
    context.status = Some(StatusCode::OK);
    context
}

/// A metered stream of `dialect` framed as `format` over `inner`, for `context`, with every
/// handle resolved as the layer does it.
pub fn metered_as<B: Body>(
    series: &Arc<MeterSeries>,
    mut context: Box<RequestContext>,
    dialect: Dialect,
    framer: Framer,
    inner: B,
) -> MeteredBody<B> {
    context.dialect = Some(dialect);
    let label = |value: Option<&Arc<str>>| value.cloned().unwrap_or_else(|| Arc::from("none"));
    let backend = context
        .route
        .backend
        .as_ref()
        .map(|target| Arc::clone(&target.label));
    let handles = series.stream(&RequestLabels {
        operation: Operation::of(dialect),
        model: series
            .metrics()
            .model_label(context.request.model.as_deref()),
        backend: label(backend.as_ref()),
        pool: label(context.route.pool.as_ref()),
    });
    let meter = StreamMeter {
        handles,
        dialect,
        framer: Some(framer),
        stripper: None,
        whole: None,
    };
    MeteredBody::new(inner, context, meter)
}

/// A metered OpenAI chat stream over `inner`, with every handle resolved as the layer does it.
pub fn metered<B: Body>(series: &Arc<MeterSeries>, inner: B) -> MeteredBody<B> {
    let context = chat_context(series, "meta-llama/Llama-3.1-8B-Instruct");
    let framer = Framer::new(StreamFormat::Sse, DEFAULT_MAX_LINE);
    metered_as(series, context, Dialect::OpenAiChat, framer, inner)
}

/// Nothing to wake: the inner body is always ready.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// A waker that does nothing (made once: building it allocates its `Arc`).
pub fn noop_waker() -> Waker {
    Waker::from(Arc::new(Noop))
}

/// Polls one frame out of a body whose inner body is always ready; returns its length.
pub fn poll_one<B: Body<Data = Bytes> + Unpin>(body: &mut B, waker: &Waker) -> usize {
    let mut cx = Context::from_waker(waker);
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.data_ref().map_or(0, Bytes::len),
        _ => 0,
    }
}
