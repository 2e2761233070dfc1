//! Where the budgets are kept ([`Store`]: in this process, or in Redis for every replica), and
//! why a shared store did not answer ([`StoreError`]).
use std::sync::Arc;
use std::time::Duration;

use super::series::BudgetSeries;
use super::window::Now;
use super::{memory, redis, Ask, Settlement, Verdict};
use crate::config::{BudgetsConfig, StoreUrl};

/// Why the store did not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the budget store did not answer within tenants.budgets.store_timeout")]
    Timeout,
    #[error("the budget store is unavailable: {0}")]
    Unavailable(String),
    #[error("the budget store answered unexpectedly: {0}")]
    Reply(String),
    /// The TLS handshake with the store failed (a certificate refused, either way).
    #[error("the TLS handshake with the budget store failed: {0}")]
    Tls(String),
    /// The store cannot be opened (at start).
    #[error("tenants.budgets.store: {0}")]
    Config(String),
    /// A file of `tenants.budgets.store_tls` cannot be used (at start).
    #[error(transparent)]
    File(#[from] crate::config::ConfigError),
}

impl StoreError {
    /// The `error` label.
    pub fn as_str(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) | StoreError::Config(_) | StoreError::File(_) => {
                "unavailable"
            }
            StoreError::Reply(_) => "reply",
            StoreError::Tls(_) => "tls",
        }
    }

    pub(super) fn from_redis(err: &::redis::RedisError) -> Self {
        if err.is_timeout() {
            StoreError::Timeout
        } else if let Some(detail) = tls_failure(err) {
            StoreError::Tls(detail)
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
        {
            // The kind, not the message: a message may quote the URL.
            StoreError::Unavailable(format!("{:?}", err.kind()))
        } else {
            StoreError::Reply(format!("{:?}", err.kind()))
        }
    }
}

/// What a failed TLS handshake says, if `err` is one. The client reports rustls's own error
/// (`invalid peer certificate: UnknownIssuer`: the CA does not match); Redis refusing the client
/// (no certificate, or one its CA did not sign) arrives as rustls's alert (`received fatal
/// alert: ...`). Both come wrapped as I/O errors, so they are told apart by their text: rustls's
/// messages, never the URL.
fn tls_failure(err: &::redis::RedisError) -> Option<String> {
    let text = err.to_string();
    [
        "invalid peer certificate",
        "received fatal alert",
        "peer is incompatible",
    ]
    .iter()
    .find_map(|needle| text.find(needle).map(|at| text[at..].to_owned()))
}

/// Where the budgets are kept, for the process's life.
#[derive(Debug)]
pub enum Store {
    Memory(memory::MemoryStore),
    /// Boxed: the Redis store holds its client and connection (hundreds of bytes).
    Redis(Box<redis::RedisStore>),
}

impl Store {
    /// The store `config` names (Redis connects on first use). Call from within the runtime.
    pub fn open(config: &BudgetsConfig, series: Arc<BudgetSeries>) -> Result<Self, StoreError> {
        Ok(match config.store_url() {
            StoreUrl::Memory => Store::Memory(memory::MemoryStore::reporting(series)),
            StoreUrl::Redis(url) => {
                Store::Redis(Box::new(redis::RedisStore::open(&url, config, series)?))
            }
        })
    }

    pub(super) async fn admit(&self, ask: &Ask<'_>) -> Result<Verdict, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.admit(ask)),
            Store::Redis(store) => store.admit(ask).await,
        }
    }

    /// Settles a finished request; the store reports the tenant's day where the settlement asks
    /// (the memory store at once, Redis once its settlement task has charged it).
    pub(super) fn settle(&self, settlement: Settlement) {
        match self {
            Store::Memory(store) => {
                store.settle(&settlement, Now::wall());
            }
            Store::Redis(store) => store.settle(settlement),
        }
    }

    /// Takes back the reservation of a request refused after its admission failed, should the
    /// admission have reached the store after all (only a shared store can fail).
    pub(super) fn withdraw(&self, settlement: Settlement) {
        match self {
            Store::Memory(_) => {}
            Store::Redis(store) => store.settle(settlement),
        }
    }

    /// At start: a shared store refuses to start over a TLS handshake it cannot make (see
    /// [`redis::RedisStore::verify`]); anything else waits for the requests.
    pub async fn verify(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(_) => Ok(()),
            Store::Redis(store) => store.verify().await,
        }
    }

    /// At shutdown: waits, at most `within`, for the settlements still queued; returns how many
    /// were left.
    pub async fn flush(&self, within: Duration) -> usize {
        match self {
            Store::Memory(_) => 0,
            Store::Redis(store) => store.flush(within).await,
        }
    }
}
