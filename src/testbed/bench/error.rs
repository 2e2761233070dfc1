//! The errors `bench` reports at its boundary. Per-request failures are *not* errors here:
//! they are measurements (see [`Ending`](super::Ending)) and end up in the report.
use std::path::PathBuf;

use super::workload::WorkloadError;

/// Why a load point (or writing its report) could not be done at all.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The load description is contradictory or out of range.
    #[error("invalid load spec: {0}")]
    Spec(String),
    /// The workload description did not parse.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The target URL cannot be used.
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// Writing an output file failed.
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Encoding the JSON report failed.
    #[error("encoding the JSON report: {0}")]
    Json(#[from] serde_json::Error),
    /// Drawing the plot failed.
    #[error("drawing the plot {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
    /// A load task panicked or was cancelled.
    #[error("a load task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}
