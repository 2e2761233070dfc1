//! Buffering a generation request's body, bounded by `server.max_request_body_bytes`, and telling
//! a client that left mid-body from a malformed one.
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::proxy::ProxyError;

/// Buffers a request body up to `max_body` bytes.
pub async fn body(
    headers: &http::HeaderMap,
    body: Incoming,
    max_body: usize,
) -> Result<Bytes, ProxyError> {
    let too_large = ProxyError::BodyTooLarge { limit: max_body };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_body as u64) {
        return Err(too_large);
    }
    match Limited::new(body, max_body).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => Err(too_large),
        Err(err) => Err(ProxyError::ClientBody {
            detail: err.to_string(),
            client_gone: connection_ended(&*err),
        }),
    }
}

/// Whether a request-body error is the client's connection ending or being reset (hyper reports
/// an early end of a body as an `UnexpectedEof` I/O error), rather than a malformed body.
fn connection_ended(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        source = err.source();
    }
    false
}
