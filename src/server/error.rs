//! Why the server could not start: each subsystem's error, naming its key.
use std::net::SocketAddr;

use crate::config::ConfigError;
use crate::metrics::MetricsError;
use crate::route::RouteError;
use crate::tenant::budget::StoreError;
use crate::tenant::system::TenantError;
use crate::upstream::UpstreamError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listener's address cannot be bound; `origin` names what set it (see [`super::ListenOrigins`]).
    #[error("cannot bind the {what} listener on {addr} ({origin}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        origin: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A listener's TLS files do not load (the error names the key).
    #[error(transparent)]
    Tls(#[from] ConfigError),
    /// The tenant subsystem cannot be built: its keys file, its usage records' file, its budget
    /// store (each error names its key, never the store's URL).
    #[error(transparent)]
    Tenants(#[from] TenantError),
    /// The budgets' store refused the start (a TLS handshake it cannot make).
    #[error(transparent)]
    Budgets(#[from] StoreError),
    /// The span exporter cannot be built (the error names the key).
    #[error("{0}")]
    Tracing(String),
}
