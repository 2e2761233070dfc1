//! Why a store cannot be opened (at start).
use crate::config::ConfigError;

/// Why a store cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL (never repeated: it may carry a password) or the store's settings.
    #[error("{0}")]
    Config(String),
    /// A file of the `store_tls` table cannot be used.
    #[error(transparent)]
    File(#[from] ConfigError),
}
