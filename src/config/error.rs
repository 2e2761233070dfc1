//! Where a configuration problem was found, and what it is. Every table's file reports with it
//! and `config.rs` is made of those files, so it is in a file of its own.

/// Where a configuration problem was found, and what it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config: {key}: {message}")]
    Invalid { key: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: &'static str, message: String },
}
