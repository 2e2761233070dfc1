//! `[pools.queue]`: the gateway queue of a `balance = "slo"` pool, where requests wait while no
//! backend is predicted to meet their targets.
use serde::{Deserialize, Deserializer, Serialize};

/// What becomes of a queued request once its TTFT target can no longer be met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadline {
    /// Answer 429 with `retry-after`: the client retries later or elsewhere, and the capacity
    /// goes to requests that can still meet theirs.
    #[default]
    Shed,
    /// Send it anyway, to the backend that misses the targets least (late beats never).
    Send,
}

/// A pool's gateway queue.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Requests that may wait at once; one arriving to a full queue is shed (429).
    pub capacity: usize,
    /// What becomes of a request whose TTFT target can no longer be met.
    pub on_deadline: OnDeadline,
    /// A request header with the request's priority, 0-255, higher first within its tenant
    /// (absent or unreadable: 0); none by default.
    #[serde(
        deserialize_with = "header_name",
        serialize_with = "super::spelling::some_header_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub priority_header: Option<http::HeaderName>,
    /// A request header naming the tenant whose fair share a request counts against, when
    /// `[tenants]` names none; without either, every request shares one.
    #[serde(
        deserialize_with = "header_name",
        serialize_with = "super::spelling::some_header_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub tenant_header: Option<http::HeaderName>,
    /// Holds a tenant to an equal part of the work (prompt + output tokens) the gate let through
    /// and not ended, among the tenants with streams: past it, its requests go only to a backend
    /// close to idle, else wait behind the others'; under it, they go first
    /// (src/route/placement/share.rs). Under a 5x flood it kept the quiet tenants' TTFT p99 within
    /// -9..+24 % of their own and 98-99 % of their SLOs met, at the flood's expense
    /// (docs/routing.md). Off by default: it holds a tenant with more legitimate traffic than the
    /// others to the same share.
    pub equal_shares: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            capacity: 1024,
            on_deadline: OnDeadline::Shed,
            priority_header: None,
            tenant_header: None,
            equal_shares: false,
        }
    }
}

fn header_name<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<http::HeaderName>, D::Error> {
    let text = String::deserialize(deserializer)?;
    http::HeaderName::from_bytes(text.trim().as_bytes())
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a header name")))
}
