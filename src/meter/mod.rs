//! Metering: request inspection, usage injection, the metered response body.
//!
//! - [`layer`]: the outermost service; stamps t0, inspects requests, wraps responses.
//! - [`request`]: what a request asks for (model, stream) and the `include_usage` injection.
//! - [`body`]: [`body::MeteredBody`], which observes each frame and finishes exactly once.
//! - [`record`]: the per-stream record and the metric definitions applied at finish.
//! - [`strip`]: removal of the usage chunk the proxy asked for.
//! - [`dialect`]: what counts as a token event in each API's stream.
//! - [`whole`]: the kept body of a non-streaming (JSON) answer, whose usage is read at its end.
pub mod body;
pub mod dialect;
pub mod layer;
pub mod record;
pub mod request;
pub mod strip;
pub mod whole;
