//! Metering: the request's head phase (reading a generation request once, usage injection), the
//! metered response body, and the per-request series recorded when a request ends.
//!
//! - [`layer`]: the meter's head phase, between admission and the plan; wraps every response.
//! - [`body`]: [`body::MeteredBody`], which observes each frame and ends the request exactly once.
//! - [`cut`]: one rate-limited WARN line per stream its upstream cut.
//! - [`finish`]: [`finish::MeterHook`], the per-request series at the one finish point.
//! - [`series`]: the meter's series (names, buckets, help) and the per-stream handles.
//! - [`strip`]: removal of the usage chunk the proxy asked for (and giving back what it took).
//! - [`whole`]: the kept body of a non-streaming (JSON) answer, whose usage is read at its end.
pub mod body;
pub mod cut;
pub mod finish;
pub mod layer;
pub mod read;
pub mod record;
pub mod series;
pub mod strip;
pub mod whole;
