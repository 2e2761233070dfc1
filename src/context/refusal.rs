//! Refusals: the small vocabulary in which any part of tokenmeter turns a request away before a
//! backend answers it.
//!
//! Each subsystem decides its own refusals and keeps its own error type (the tenant gate's
//! [`crate::tenant::identity::Unnamed`], the budget's [`crate::tenant::budget::BudgetRefusal`],
//! the gateway queue's [`crate::route::placement::Shed`], the smuggling guard's
//! [`crate::server::smuggling::ConflictingFraming`], the admission limits); each converts into
//! a [`Refusal`], which says who refused, with what status, and when to come back. Below them,
//! the proxy answers every refusal the same way ([`crate::proxy::ProxyError::Refused`]) and the
//! finish point counts it, so no layer above has to know any subsystem's reasons.
use std::borrow::Cow;
use std::time::Duration;

use http::StatusCode;

use super::Outcome;

/// Who turned a request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The request itself is unsafe to serve (its framing is in doubt).
    Client,
    /// The tenant gate: no tenant named the request (`tenants.anonymous = "refuse"`).
    Tenant,
    /// The tenant's budget: it is over one of its limits.
    Budget,
    /// The budget store did not answer and its policy denies (`on_store_error = "deny"`).
    Store,
    /// A pool's gateway queue: the request's TTFT target can no longer be met, or it is full.
    Queue,
    /// tokenmeter's own limits (`server.max_streams`, `server.max_connections`).
    Limit,
    /// The request came back to this tokenmeter: its upstream points at itself.
    Loop,
}

impl RefusedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusedBy::Client => "client",
            RefusedBy::Tenant => "tenant",
            RefusedBy::Budget => "budget",
            RefusedBy::Store => "store",
            RefusedBy::Queue => "queue",
            RefusedBy::Limit => "limit",
            RefusedBy::Loop => "loop",
        }
    }

    /// How a request this refused is counted: turned away for tokenmeter's own want of capacity
    /// (a queue, a limit, a store it depends on) is `overloaded`; for what the client sent or
    /// who it is, the client's error.
    pub fn outcome(self) -> Outcome {
        match self {
            RefusedBy::Store | RefusedBy::Queue | RefusedBy::Limit => Outcome::Overloaded,
            RefusedBy::Client | RefusedBy::Tenant | RefusedBy::Budget | RefusedBy::Loop => {
                Outcome::ClientError
            }
        }
    }
}

/// A request turned away before any backend answered it: who refused, and the answer the client
/// gets (an OpenAI-style JSON error with `kind` as its `type` and `message`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub by: RefusedBy,
    pub status: StatusCode,
    /// The OpenAI-style error `type` (`rate_limit_exceeded`, `authentication_error`, ...).
    pub kind: &'static str,
    /// Why, for the client: never a secret (a key, another tenant's use).
    pub message: Cow<'static, str>,
    /// When waiting can help: sent as `retry-after` (whole seconds) and `retry-after-ms`.
    pub retry_after: Option<Duration>,
    /// The connection closes after the answer (where the next request starts is in doubt).
    pub close: bool,
}

impl Refusal {
    /// A refusal by `by` with `status`, `kind` and `message`, nothing to wait for, the connection
    /// kept.
    pub fn new(
        by: RefusedBy,
        status: StatusCode,
        kind: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            by,
            status,
            kind,
            message: message.into(),
            retry_after: None,
            close: false,
        }
    }

    /// The same refusal, telling the client to come back after `wait`.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// The same refusal, closing the connection after the answer.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    pub fn outcome(&self) -> Outcome {
        self.by.outcome()
    }
}
