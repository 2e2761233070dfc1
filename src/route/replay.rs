//! What is needed to send a request again (a retry on another backend, a decode request sent
//! again without the KV it refused): its head and its buffered or empty body.
use bytes::Bytes;
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};
use http_body::Body;

use crate::context::RequestContext;
use crate::proxy::RequestBody;

/// What is needed to send a request again: its head and its (buffered or empty) body.
#[derive(Debug)]
pub(crate) struct Replay {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
}

impl Replay {
    /// `None` for a streamed body: once sent it is gone, so such a request is not retried.
    pub fn of(req: &Request<RequestBody>, context: &RequestContext) -> Option<Self> {
        let body = match req.body() {
            RequestBody::Buffered(_) => context.request.generation.as_ref()?.body.clone(),
            RequestBody::Streaming(incoming) if incoming.is_end_stream() => Bytes::new(),
            RequestBody::Streaming(_) => return None,
        };
        Some(Self::with_body(req, body))
    }

    /// `req`'s head with `body` (which must be what its `content-length` says).
    pub(crate) fn with_body(req: &Request<RequestBody>, body: Bytes) -> Self {
        Self {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: req.headers().clone(),
            extensions: req.extensions().clone(),
            body,
        }
    }

    pub fn build(&self) -> Request<RequestBody> {
        let mut req = Request::new(RequestBody::buffered(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        *req.extensions_mut() = self.extensions.clone();
        req
    }
}
