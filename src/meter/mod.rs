//! Metering: reading a generation request once, usage injection, the metered response body.
//!
//! - [`layer`]: the outermost proxy service; stamps t0, reads the request, asks the router for a
//!   plan, wraps the response.
//! - [`body`]: [`body::MeteredBody`], which observes each frame and finishes exactly once.
//! - [`record`]: the per-stream record and the metric definitions applied at finish.
//! - [`strip`]: removal of the usage chunk the proxy asked for (and giving back what it took).
//! - [`whole`]: the kept body of a non-streaming (JSON) answer, whose usage is read at its end.
pub mod body;
pub mod layer;
pub mod record;
pub mod strip;
pub mod whole;
