//! Forwarding to upstreams: one pooled client, header hygiene, timeouts, and the errors a client sees.
//!
//! The stack (outside in) is `meter` -> balance (this module's round-robin [`balance::RoundRobinLayer`],
//! later the router) -> [`forward::Forward`]. Balancing only chooses a [`upstream::Target`] and puts it
//! in the request extensions; `Forward` sends to whatever target it finds there, so a routing layer can
//! replace round-robin without touching forwarding or metering.
pub mod balance;
pub mod body;
pub mod client;
pub mod error;
pub mod forward;
pub mod headers;
pub mod timeout;
pub mod upstream;

pub use body::RequestBody;
pub use error::ProxyError;
pub use forward::Forward;
pub use timeout::{BodyError, TimeoutBody};
pub use upstream::{Target, Upstreams};

/// The body of an upstream response as it leaves the proxy layer: hyper's body under the idle and
/// total timeouts.
pub type UpstreamBody = TimeoutBody<hyper::body::Incoming>;

/// The peer address of the client connection, put in the request extensions by the server.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);
