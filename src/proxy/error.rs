//! Errors a request can meet on its way upstream, and the one place they become HTTP responses.
//!
//! Every error answers with an OpenAI-style JSON body (`{"error": {"message", "type", "param",
//! "code"}}`), because the clients in front of tokenmeter are OpenAI SDKs that parse exactly that.
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::context::Outcome;
use crate::context::RequestContext;

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
    /// No tenant named the request and `tenants.anonymous = "refuse"` (see [`crate::tenant`]):
    /// why, never the key.
    #[error("{reason}")]
    Unauthorized { reason: &'static str },
    /// The tenant is over one of its budgets ([`crate::tenant::budget`]): 429, with
    /// `retry-after` when waiting can help (not for a request larger than the limit itself).
    #[error("{message}")]
    OverBudget {
        /// The limit's name (`tokens_per_minute`, ...).
        limit: &'static str,
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// The pool's gateway queue shed the request (`[pools.queue]`): its TTFT target could no
    /// longer be met (`deadline`), or the queue was full (`full`). 429 with `retry-after`.
    #[error("pool {pool:?} cannot serve this request within its TTFT target now (gateway queue: {why}); retry later")]
    Shed { pool: Arc<str>, why: &'static str },
    /// The budget store did not answer and `tenants.budgets.on_store_error = "deny"`.
    #[error("the tenant budget store did not answer in time; the request was refused unchecked (tenants.budgets.on_store_error = \"deny\")")]
    BudgetStoreUnavailable,
    /// The request head had both `transfer-encoding` and `content-length` (see [`crate::server::smuggling`]).
    #[error("the request has both transfer-encoding and content-length (RFC 9112 section 6.3); refused as possible request smuggling")]
    ConflictingFraming,
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
            ProxyError::NoUpstream | ProxyError::BudgetStoreUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::OverBudget { .. } | ProxyError::Shed { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ProxyError::ContextLost => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ProxyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::ClientBody { .. } | ProxyError::ConflictingFraming => {
                StatusCode::BAD_REQUEST
            }
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
            ProxyError::Unauthorized { .. } => "authentication_error",
            ProxyError::OverBudget { .. } | ProxyError::Shed { .. } => "rate_limit_exceeded",
            ProxyError::BudgetStoreUnavailable => "service_unavailable",
            ProxyError::BodyTooLarge { .. }
            | ProxyError::ClientBody { .. }
            | ProxyError::ConflictingFraming => "invalid_request_error",
        }
    }

    /// How the request is counted: a client that left mid-body is `cancelled` like one that left
    /// at any later phase; a malformed body is the client's error.
    pub fn outcome(&self) -> Outcome {
        if matches!(
            self,
            ProxyError::ClientBody {
                client_gone: true,
                ..
            }
        ) {
            return Outcome::Cancelled;
        }
        if matches!(
            self,
            ProxyError::BudgetStoreUnavailable | ProxyError::Shed { .. }
        ) {
            // Turned away by tokenmeter itself, never sent upstream.
            return Outcome::Overloaded;
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

    /// The response the client sees. After a request whose framing is in doubt, where the next
    /// request starts is in doubt too: that connection is closed (RFC 9112 §6.3 requires it).
    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let mut response = json_error(self.status(), self.kind(), &self.to_string());
        let retry_after = match self {
            ProxyError::OverBudget { retry_after, .. } => *retry_after,
            ProxyError::BudgetStoreUnavailable | ProxyError::Shed { .. } => {
                Some(std::time::Duration::from_secs(1))
            }
            _ => None,
        };
        let headers = response.headers_mut();
        if let Some(wait) = retry_after {
            // Whole seconds, rounded up (RFC 9110 §10.2.3); the OpenAI SDKs also read the
            // milliseconds and wait that long before their automatic retry.
            let millis = wait.as_millis().max(1);
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(millis.div_ceil(1000) as u64),
            );
            headers.insert(RETRY_AFTER_MS, HeaderValue::from(millis as u64));
        }
        if matches!(self, ProxyError::ConflictingFraming) {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
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

#[cfg(test)]
mod tests;
