//! The gateway queue's refusal: a request it shed ([`super::gate::Admission::Shed`]), as the
//! client reads it (429 with `retry-after`, counted `overloaded`: tokenmeter turned it away for
//! its own want of room, never sent upstream).
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::context::{Refusal, RefusedBy};

/// A request the gateway queue of `pool` shed: `why` is `deadline` (its TTFT target could no
/// longer be met) or `full`.
#[derive(Debug, thiserror::Error)]
#[error("pool {pool:?} cannot serve this request within its TTFT target now (gateway queue: {why}); retry later")]
pub struct Shed {
    pub pool: Arc<str>,
    pub why: &'static str,
}

/// How long a shed client waits before it tries again.
const SHED_RETRY_AFTER: Duration = Duration::from_secs(1);

impl From<Shed> for Refusal {
    fn from(shed: Shed) -> Self {
        Refusal::new(
            RefusedBy::Queue,
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_exceeded",
            shed.to_string(),
        )
        .retry_after(SHED_RETRY_AFTER)
    }
}
