//! Forwarding to upstreams: one pooled client, header hygiene, timeouts, and the errors a client sees.
//!
//! The stack (outside in) is `meter` -> `route` (pools, rules, balancing, health) ->
//! [`forward::Forward`]. The router only chooses a [`upstream::Target`] and puts it in the request
//! extensions (with an [`InFlight`] load guard); `Forward` sends to whatever target it finds there
//! and moves the guard into the response body.
pub mod body;
pub mod client;
pub mod error;
pub mod forward;
pub mod h1;
pub mod headers;
pub mod timeout;
pub mod upstream;

pub use body::RequestBody;
pub use error::ProxyError;
pub use forward::Forward;
pub use timeout::{BodyError, BodyGuard, InFlight, TimeoutBody};
pub use upstream::{Target, Upstreams};

/// The body of an upstream response as it leaves the proxy layer: read off the upstream
/// connection, under the idle and total timeouts.
pub type UpstreamBody = TimeoutBody<h1::ResponseBody>;

/// The peer address of the client connection, put in the request extensions by the server.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);
