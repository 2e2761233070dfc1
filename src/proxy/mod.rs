//! Forwarding to upstreams: one pooled client, header hygiene, timeouts, and the errors a client sees.
//!
//! The stack (outside in) is `admission` -> `meter` -> `plan` -> `dispatch` (the router's two
//! layers: pools, rules, balancing, health) -> [`forward::Forward`]. The router only chooses a [`crate::upstream::Target`] and writes it in
//! the request's [`RequestContext`](crate::context::RequestContext) (with an
//! [`InFlight`](crate::upstream::InFlight) load guard); `Forward` sends to that target, moves the
//! guard into the response body, and hands the context back up with the response (or the
//! [`Failure`]).
pub mod body;
pub mod client;
pub mod error;
pub mod forward;
pub mod h1;
pub mod headers;
pub mod phase;
pub mod timeout;

pub use body::RequestBody;
pub use error::{Failure, ProxyError};
pub use forward::Forward;
pub use timeout::{BodyError, TimeoutBody};

/// The body of an upstream response as it leaves the proxy layer: read off the upstream
/// connection, under the idle and total timeouts.
pub type UpstreamBody = TimeoutBody<h1::IncomingBody>;
