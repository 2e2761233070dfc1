//! A metered stream without a network: the real [`MeteredBody`] (framer, classifier, record,
//! metric handles) over an in-memory upstream body that yields one vLLM chunk per frame. Shared
//! by the micro benchmarks (`benches/micro.rs`) and the allocation test (`tests/alloc_meter.rs`).
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame};
use tokenmeter::config::Config;
use tokenmeter::dialect::Dialect;
use tokenmeter::meter::body::{MeteredBody, StreamMeter};
use tokenmeter::meter::record::{SloTargets, StreamRecord};
use tokenmeter::metrics::{Metrics, Operation};
use tokenmeter::proxy::BodyError;
use tokenmeter::sse::DEFAULT_MAX_LINE;
use tokenmeter::sse::{Framer, StreamFormat};

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

/// The proxy's metrics with the shipped defaults.
pub fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new(&Config::default()).expect("default buckets are valid"))
}

/// A metered OpenAI chat stream over `inner`, with every handle resolved as the layer does it.
pub fn metered<B>(metrics: &Arc<Metrics>, inner: B) -> MeteredBody<B> {
    let dialect = Dialect::OpenAiChat;
    let operation = Operation::of(dialect);
    let model = metrics.model_label(Some("meta-llama/Llama-3.1-8B-Instruct"));
    let backend: Arc<str> = Arc::from("http://127.0.0.1:8001");
    let pool: Arc<str> = Arc::from("default");
    let active = metrics.streams_active(operation, &model);
    active.increment(1.0);
    let meter = StreamMeter {
        record: StreamRecord::new(tokio::time::Instant::now()),
        handles: metrics.stream(operation, &model, &backend, &pool),
        metrics: Arc::clone(metrics),
        active,
        status: StatusCode::OK,
        slo: SloTargets {
            ttft: std::time::Duration::from_millis(800),
            tpot: std::time::Duration::from_millis(35),
        },
        dialect,
        framer: Some(Framer::new(StreamFormat::Sse, DEFAULT_MAX_LINE)),
        stripper: None,
        whole: None,
        estimate: None,
        trace: None,
    };
    MeteredBody::new(inner, meter)
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
