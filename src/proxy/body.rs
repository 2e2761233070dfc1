//! The request body the proxy sends upstream: either buffered (inspected, maybe rewritten) or streamed.
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// A request body: buffered (chat and completions requests, which the meter inspects) or streamed
/// through untouched (every other path, of any size).
#[derive(Debug)]
pub enum RequestBody {
    /// The whole body; as a [`Body`] it yields it once (nothing when empty).
    Buffered(Bytes),
    Streaming(Incoming),
}

impl RequestBody {
    pub fn buffered(bytes: Bytes) -> Self {
        RequestBody::Buffered(bytes)
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Buffered(bytes) if bytes.is_empty() => Poll::Ready(None),
            RequestBody::Buffered(bytes) => {
                Poll::Ready(Some(Ok(Frame::data(std::mem::take(bytes)))))
            }
            RequestBody::Streaming(incoming) => Pin::new(incoming).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Buffered(bytes) => bytes.is_empty(),
            RequestBody::Streaming(incoming) => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Buffered(bytes) => SizeHint::with_exact(bytes.len() as u64),
            RequestBody::Streaming(incoming) => incoming.size_hint(),
        }
    }
}
