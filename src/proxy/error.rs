//! Errors a request can meet on its way upstream, and the one place they become HTTP responses.
//!
//! Every error answers with an OpenAI-style JSON body (`{"error": {"message", "type", "param",
//! "code"}}`), because the clients in front of tokenmeter are OpenAI SDKs that parse exactly that.
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::context::RequestContext;
use crate::context::{Outcome, Refusal};

/// Why a request got no upstream response (or a rejected one).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The TCP connection could not be made (refused, unreachable, connect timeout).
    #[error("upstream {backend} unreachable: {detail}")]
    Connect {
        backend: Arc<str>,
        detail: String,
        timed_out: bool,
    },
    /// No response head within `upstream.response_timeout`.
    #[error("upstream {backend} sent no response within {timeout:?}")]
    ResponseTimeout {
        backend: Arc<str>,
        timeout: std::time::Duration,
    },
    /// The connection broke before a response head arrived.
    #[error("upstream {backend} failed: {detail}")]
    Upstream { backend: Arc<str>, detail: String },
    /// No upstream was chosen for the request (a routing bug or an empty pool).
    #[error("no upstream available for this request")]
    NoUpstream,
    /// The request body is larger than `server.max_request_body_bytes`.
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The client's request body broke off (`client_gone`: the connection ended or was reset
    /// mid-body) or was malformed while the proxy was reading it.
    #[error("could not read the request body: {detail}")]
    ClientBody { detail: String, client_gone: bool },
    /// A layer did not find the request's context: a bug in the stack, counted in
    /// `tokenmeter_internal_errors_total{kind="context_missing"}`.
    #[error("tokenmeter lost this request's context (a bug, counted in tokenmeter_internal_errors_total)")]
    ContextLost,
    /// A part of tokenmeter turned the request away (the tenant gate, a budget, a gateway queue,
    /// the smuggling guard, a limit): who, and the answer, in the vocabulary below the subsystems.
    #[error(transparent)]
    Refused(Box<Refusal>),
}

impl ProxyError {
    /// The status the client receives.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Connect {
                timed_out: true, ..
            }
            | ProxyError::ResponseTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Connect { .. } | ProxyError::Upstream { .. } => StatusCode::BAD_GATEWAY,
            ProxyError::NoUpstream => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ContextLost => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::ClientBody { .. } => StatusCode::BAD_REQUEST,
            ProxyError::Refused(refusal) => refusal.status,
        }
    }

    /// The OpenAI-style error `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::Connect {
                timed_out: true, ..
            }
            | ProxyError::ResponseTimeout { .. } => "upstream_timeout",
            ProxyError::Connect { .. } => "upstream_unavailable",
            ProxyError::Upstream { .. } => "upstream_error",
            ProxyError::NoUpstream => "no_upstream",
            ProxyError::ContextLost => "internal_error",
            ProxyError::BodyTooLarge { .. } | ProxyError::ClientBody { .. } => {
                "invalid_request_error"
            }
            ProxyError::Refused(refusal) => refusal.kind,
        }
    }

    /// How the request is counted: a client that left mid-body is `cancelled` like one that left
    /// at any later phase; a malformed body is the client's error; a refusal as its refuser says
    /// ([`crate::context::RefusedBy::outcome`]).
    pub fn outcome(&self) -> Outcome {
        match self {
            ProxyError::ClientBody {
                client_gone: true, ..
            } => return Outcome::Cancelled,
            ProxyError::Refused(refusal) => return refusal.outcome(),
            _ => {}
        }
        match self.status() {
            StatusCode::GATEWAY_TIMEOUT => Outcome::Timeout,
            status if status.is_client_error() => Outcome::ClientError,
            _ => Outcome::UpstreamError,
        }
    }

    /// The backend the error is about, when one was chosen.
    pub fn backend(&self) -> Option<&Arc<str>> {
        match self {
            ProxyError::Connect { backend, .. }
            | ProxyError::ResponseTimeout { backend, .. }
            | ProxyError::Upstream { backend, .. } => Some(backend),
            _ => None,
        }
    }

    /// The response the client sees. A refusal says when to come back (`retry-after`), and closes
    /// the connection where it must: after a request whose framing is in doubt, where the next
    /// request starts is in doubt too (RFC 9112 §6.3).
    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let mut response = json_error(self.status(), self.kind(), &self.to_string());
        let ProxyError::Refused(refusal) = self else {
            return response;
        };
        let headers = response.headers_mut();
        if let Some(wait) = refusal.retry_after {
            // Whole seconds, rounded up (RFC 9110 §10.2.3); the OpenAI SDKs also read the
            // milliseconds and wait that long before their automatic retry.
            let millis = wait.as_millis().max(1);
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(millis.div_ceil(1000) as u64),
            );
            headers.insert(RETRY_AFTER_MS, HeaderValue::from(millis as u64));
        }
        if refusal.close {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

impl From<Refusal> for ProxyError {
    fn from(refusal: Refusal) -> Self {
        ProxyError::Refused(Box::new(refusal))
    }
}

/// A request that got no answer from the stack below the meter: why, and its context as far as it
/// got (the pool and backend of the last attempt label the failure); `None` when a layer below
/// did not find it (a bug, counted there: see [`RequestContext::take`]).
#[derive(Debug)]
pub struct Failure {
    pub error: ProxyError,
    pub context: Option<Box<RequestContext>>,
}

impl Failure {
    pub fn new(error: ProxyError, context: Box<RequestContext>) -> Self {
        Self {
            error,
            context: Some(context),
        }
    }

    /// The failure of a layer that did not find the request's context.
    pub fn lost() -> Self {
        Self {
            error: ProxyError::ContextLost,
            context: None,
        }
    }
}

/// The retry hint in milliseconds that the OpenAI SDKs read before `retry-after`.
const RETRY_AFTER_MS: http::HeaderName = http::HeaderName::from_static("retry-after-ms");

/// An OpenAI-style JSON error response.
pub fn json_error(status: StatusCode, kind: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "error": {
            "message": message,
            "type": kind,
            "param": null,
            "code": status.as_u16(),
        }
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An error answer's body, read whole as the OpenAI-style JSON error it must be.
#[cfg(test)]
pub(crate) async fn error_json<B>(response: http::Response<B>) -> serde_json::Value
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    use http_body_util::BodyExt;
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    serde_json::from_slice(&body).expect("JSON body")
}

/// Checks an error answer's body (see [`error_json`]): its `type`, its `code` (the status) and a
/// `message` that names each of `names`, what a reader needs to act on it (`why` says what).
#[cfg(test)]
pub(crate) fn assert_error_json(
    json: &serde_json::Value,
    kind: &str,
    code: u16,
    names: &[&str],
    why: &str,
) {
    assert_eq!(json["error"]["type"], kind, "type: {json}");
    assert_eq!(json["error"]["code"], code, "code: {json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .is_some_and(|message| names.iter().all(|name| message.contains(name))),
        "{why}: {json}"
    );
}

#[cfg(test)]
mod tests;
