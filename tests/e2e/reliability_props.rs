//! Properties of the metered body over arbitrary input: whatever the upstream sends (real streams,
//! garbage, over-long lines) and however it is split into frames, the meter never panics, forwards
//! exactly the bytes it received, and finishes the stream exactly once.

use crate::support;

#[path = "../../benches/common/meter_fixture.rs"]
mod fixture;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http_body::{Body, Frame};
use proptest::prelude::*;
use tokenmeter::dialect::Dialect;
use tokenmeter::meter::body::MeteredBody;
use tokenmeter::proxy::BodyError;
use tokenmeter::sse::{Framer, StreamFormat};

/// An upstream body of ready frames.
struct Frames(VecDeque<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Poll::Ready(
            self.get_mut()
                .0
                .pop_front()
                .map(|data| Ok(Frame::data(data))),
        )
    }
}

/// Every frame is ready at once, so nothing ever needs waking.
struct Ready;

impl Wake for Ready {
    fn wake(self: Arc<Self>) {}
}

/// Runs `input`, cut at `cuts`, through a metered body; returns the forwarded bytes and the metrics.
fn meter(
    input: &[u8],
    cuts: &[usize],
    dialect: Dialect,
    framing: StreamFormat,
) -> (Vec<u8>, Arc<tokenmeter::metrics::Metrics>) {
    let series = fixture::series();
    let context = fixture::chat_context(&series, "m");
    let mut points: Vec<usize> = cuts.iter().map(|cut| cut % (input.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut frames = VecDeque::new();
    let mut start = 0;
    for point in points.into_iter().chain([input.len()]) {
        if point > start {
            frames.push_back(Bytes::copy_from_slice(&input[start..point]));
            start = point;
        }
    }
    // The smallest line cap the config allows, so over-long lines are exercised too.
    let framer = Framer::new(framing, 1024);
    let mut body: MeteredBody<Frames> =
        fixture::metered_as(&series, context, dialect, framer, Frames(frames));
    let waker = Waker::from(Arc::new(Ready));
    let mut cx = Context::from_waker(&waker);
    let mut out = Vec::new();
    // Bounded: one poll per frame plus the end.
    for _ in 0..=input.len() + 2 {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                out.extend_from_slice(&frame.into_data().expect("data frames only"))
            }
            Poll::Ready(Some(Err(err))) => panic!("no error from a clean upstream: {err}"),
            Poll::Ready(None) => break,
            Poll::Pending => panic!("ready frames never pend"),
        }
    }
    drop(body);
    (out, Arc::clone(series.metrics()))
}

fn finished_once(metrics: &tokenmeter::metrics::Metrics) -> f64 {
    support::prom::sum(&metrics.render(), "tokenmeter_requests_total", &[])
}

/// Real streams, mutated: the fixtures plus garbage spliced in.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let fixtures: Vec<Vec<u8>> = [
        "vllm-chat-usage.sse",
        "vllm-chat-tool-calls.sse",
        "vllm-completions.sse",
        "openai-chat-crlf-usage-null.sse",
    ]
    .iter()
    .map(|name| support::fixture(name))
    .collect();
    (
        prop::sample::select(fixtures),
        prop::collection::vec(
            (any::<usize>(), prop::collection::vec(any::<u8>(), 0..64)),
            0..8,
        ),
        prop::collection::vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(mut fixture, splices, tail)| {
            for (at, garbage) in splices {
                let at = at % (fixture.len() + 1);
                fixture.splice(at..at, garbage);
            }
            fixture.extend(tail);
            fixture
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_splits_and_garbage_forward_every_byte_unchanged(
        input in stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
        dialect in prop::sample::select(Dialect::ALL.to_vec()),
        ndjson in any::<bool>(),
    ) {
        let framing = if ndjson { StreamFormat::NdJson } else { StreamFormat::Sse };
        let (out, metrics) = meter(&input, &cuts, dialect, framing);
        prop_assert!(out == input, "forwarded {} bytes of {} for {dialect:?}/{framing:?}", out.len(), input.len());
        prop_assert_eq!(finished_once(&metrics), 1.0, "the stream finished exactly once");
    }

    #[test]
    fn pure_garbage_never_panics_and_passes_through(
        input in prop::collection::vec(any::<u8>(), 0..20_000),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
        dialect in prop::sample::select(Dialect::ALL.to_vec()),
        ndjson in any::<bool>(),
    ) {
        let framing = if ndjson { StreamFormat::NdJson } else { StreamFormat::Sse };
        let (out, metrics) = meter(&input, &cuts, dialect, framing);
        prop_assert!(out == input, "forwarded {} bytes of {}", out.len(), input.len());
        prop_assert_eq!(finished_once(&metrics), 1.0, "the stream finished exactly once");
    }
}
