//! The prefill request: the proxy's own request to a prefill replica, made from the client's head
//! and a body the protocol wrote, bounded in time and in the size of the answer read.
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};

use crate::proxy::client::UpstreamClient;
use crate::proxy::{headers, RequestBody};
use crate::route::backend::Backend;
use crate::trace::record as trace;

/// The largest prefill answer read: a one-token completion and its KV parameters (a block id per
/// 16 tokens of a 128k-token prompt is ~50 KB of JSON).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Makes the client's request object (its body, parsed) a prefill's: one token, not streamed, so
/// the replica computes the prompt and answers at once. `max_completion_tokens` too where the
/// client set it (it would win over `max_tokens`); no `stream_options`, which a server refuses
/// without `stream`. Each protocol adds its own members.
pub(crate) fn one_unstreamed_token(object: &mut Map<String, Value>) {
    object.insert("stream".to_owned(), Value::Bool(false));
    object.insert("max_tokens".to_owned(), Value::from(1));
    if object.contains_key("max_completion_tokens") {
        object.insert("max_completion_tokens".to_owned(), Value::from(1));
    }
    object.remove("stream_options");
}

/// Why a prefill request brought no answer back.
#[derive(Debug, thiserror::Error)]
pub enum PrefillError {
    /// No connection could be made (refused, unreachable, connect timeout).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The connection broke, or the answer was unreadable or too large.
    #[error("{0}")]
    Failed(String),
    /// No whole answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Sends `body` to `path_and_query` on `backend` with the client's `headers` (hop-by-hop and
/// framing headers dropped, no compression asked for: the proxy reads the answer itself; the
/// prefill span's `traceparent` when traced), and reads the whole answer within `timeout`.
pub async fn send(
    client: &UpstreamClient,
    backend: &Backend,
    path_and_query: &str,
    client_headers: &HeaderMap,
    traceparent: Option<HeaderValue>,
    body: Bytes,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), PrefillError> {
    let uri = Uri::builder()
        .scheme(backend.target.scheme.clone())
        .authority(backend.target.authority.clone())
        .path_and_query(path_and_query)
        .build()
        .map_err(|err| PrefillError::Failed(format!("cannot build the prefill URI: {err}")))?;
    let mut head = client_headers.clone();
    headers::strip_hop_by_hop(&mut head);
    for framing in [CONTENT_LENGTH, TRANSFER_ENCODING, ACCEPT_ENCODING] {
        head.remove(framing);
    }
    head.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    head.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    if let Some(traceparent) = traceparent {
        head.insert(trace::TRACEPARENT, traceparent);
    }
    let mut req = Request::new(RequestBody::buffered(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = head;
    let exchange = async {
        let response = client
            .request(req, backend.target.tls.as_ref())
            .await
            .map_err(|err| {
                if err.is_connect() {
                    PrefillError::Connect(err.to_string())
                } else {
                    PrefillError::Failed(err.to_string())
                }
            })?;
        let status = response.status();
        let answer = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|err| PrefillError::Failed(format!("reading the answer: {err}")))?
            .to_bytes();
        Ok((status, answer))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| PrefillError::Timeout(timeout))?
}
