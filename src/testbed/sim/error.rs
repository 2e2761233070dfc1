//! Errors of the simulated replica's set-up.
use std::path::PathBuf;

/// Why a replica could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown sim profile `{name}` (known: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("invalid sim configuration: {0}")]
    Invalid(String),
    #[error("reading {}: {source}", path.display())]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    ParseConfig { path: PathBuf, message: String },
    #[error("sim listener: {0}")]
    Io(#[from] std::io::Error),
}
