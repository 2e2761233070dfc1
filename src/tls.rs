//! TLS on both sides, with rustls (the `ring` provider: no C toolchain beyond what `ring` needs).
//!
//! - [`acceptor`]: TLS on the traffic and admin listeners (ALPN `h2`, `http/1.1`), optional client
//!   certificates (mTLS), certificates reloaded when their files change.
//! - [`connector`]: TLS to `https://` upstreams, with SNI, the system's roots or a CA bundle, and
//!   an optional client certificate (mTLS to the backend).
//! - [`pem`]: reading the PEM files the configuration names, with errors that name the key.
//! - [`series`]: failed handshakes and certificate reloads, per listener.
use std::sync::Arc;

use rustls::crypto::CryptoProvider;

pub mod acceptor;
pub mod connector;
pub mod pem;
pub mod series;

pub(crate) use acceptor::HandshakeFailure;
pub use acceptor::ServerTls;
pub use connector::{TlsClient, UpstreamTls};

/// The crypto provider every TLS config is built with, named explicitly rather than installed
/// process-wide (a library must not depend on its caller having installed one).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
