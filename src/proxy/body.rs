//! The request body the proxy sends upstream: either buffered (inspected, maybe rewritten) or streamed.
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;

/// A request body: buffered (chat and completions requests, which the meter inspects) or streamed
/// through untouched (every other path, of any size).
#[derive(Debug)]
pub enum RequestBody {
    Buffered(Full<Bytes>),
    Streaming(Incoming),
}

impl RequestBody {
    pub fn buffered(bytes: Bytes) -> Self {
        RequestBody::Buffered(Full::new(bytes))
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
            RequestBody::Buffered(full) => Pin::new(full)
                .poll_frame(cx)
                .map_err(|never| match never {}),
            RequestBody::Streaming(incoming) => Pin::new(incoming).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Buffered(full) => full.is_end_stream(),
            RequestBody::Streaming(incoming) => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Buffered(full) => full.size_hint(),
            RequestBody::Streaming(incoming) => incoming.size_hint(),
        }
    }
}
