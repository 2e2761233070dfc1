//! Shared helpers of the `prometheus_*` tests: child processes, a tiny HTTP client, a real
//! Prometheus, and the PromQL expressions of `dashboards/` and `deploy/prometheus/`.
#![allow(dead_code)]

pub mod exprs;
pub mod http;
pub mod process;
pub mod prometheus;

use std::path::{Path, PathBuf};

/// A file of the repository, by its path from the crate root.
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Every Grafana dashboard in `dashboards/` (name, parsed JSON).
pub fn dashboards() -> Vec<(String, serde_json::Value)> {
    let dir = repo_path("dashboards");
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/ exists")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read dashboard");
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((name, json));
    }
    assert!(!out.is_empty(), "no dashboard in {}", dir.display());
    out
}

/// Linear-interpolation percentile (numpy's default, as `tokenmeter bench` reports): rank
/// `(n - 1) q` between the two nearest sorted samples.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = (sorted.len() - 1) as f64 * q;
    let low = rank.floor() as usize;
    let high = rank.ceil() as usize;
    sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
}
