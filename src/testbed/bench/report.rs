//! The results: one [`PointReport`] per load point, the terminal table, and the JSON file
//! (schema: `docs/bench-results.md`).
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::session_stats::SessionResults;
use super::stats::{ClassStats, Summary};
use super::{BenchError, Endpoint, LoadMode, LoadSpec, RequestRecord, Slo, Stop};

/// The results of one load point: `classes[0]` is `"all"`, then each workload class in
/// workload order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointReport {
    pub mode: LoadMode,
    pub model: String,
    /// First request sent to last request ended, seconds.
    pub wall_time_s: f64,
    pub classes: Vec<ClassStats>,
    /// Per-request records, ordered by index. Always filled by [`run_point`](super::run_point);
    /// the CLI writes them to JSON only with `--raw`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestRecord>,
}

impl PointReport {
    /// Summarises the records of one point.
    pub fn new(
        spec: &LoadSpec,
        model: &str,
        wall_time_s: f64,
        requests: Vec<RequestRecord>,
    ) -> Self {
        let mut classes = vec![ClassStats::from_records(
            "all",
            &requests,
            wall_time_s,
            &spec.slo,
        )];
        for name in spec.workload.class_names() {
            let of_class = requests.iter().filter(|r| r.class == name);
            classes.push(ClassStats::from_records(
                &name,
                of_class,
                wall_time_s,
                &spec.slo,
            ));
        }
        PointReport {
            mode: spec.mode,
            model: model.to_string(),
            wall_time_s,
            classes,
            requests,
        }
    }

    /// The `"all"` row.
    pub fn all(&self) -> Option<&ClassStats> {
        self.classes.iter().find(|c| c.class == "all")
    }

    /// The row of one class (or `"all"`).
    pub fn class(&self, name: &str) -> Option<&ClassStats> {
        self.classes.iter().find(|c| c.class == name)
    }

    /// A fixed-width table: one row per class (`all` first; a single-class workload shows
    /// only `all`), latencies in ms, E2E in s, then the error kinds if any.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}  model={}  wall={:.2}s",
            self.mode.label(),
            self.model,
            self.wall_time_s
        );
        let rows = if self.classes.len() == 2 {
            &self.classes[..1]
        } else {
            &self.classes[..]
        };
        // Judged against a gap target: each request's largest gap gets a column (its p99 and the
        // worst), and vLLM's goodput a line of its own. Without one, the table is as it was.
        let gaps_judged = rows.iter().any(|c| c.goodput_ttft_tpot.is_some());
        let gap_column = |cell: &str| {
            if gaps_judged {
                format!(" {cell:>18} |")
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            out,
            "{:<10} {:>6} {:>5} | {:>20} | {:>20} | {:>20} |{} {:>13} | {:>7} {:>8} {:>7}",
            "class",
            "n",
            "err",
            "TTFT p50/p90/p99 ms",
            "ITL p50/p90/p99 ms",
            "TPOT p50/p90/p99 ms",
            gap_column("max gap p99/max ms"),
            "E2E p50/p99 s",
            "req/s",
            "tok/s",
            "goodput"
        );
        for c in rows {
            let _ = writeln!(
                out,
                "{:<10} {:>6} {:>5} | {:>20} | {:>20} | {:>20} |{} {:>13} | {:>7.2} {:>8.1} {:>7.2}",
                truncate(&c.class, 10),
                c.requests,
                c.errors,
                ms3(&c.ttft),
                ms3(&c.itl),
                ms3(&c.tpot),
                gap_column(&worst_ms(&c.max_gap)),
                s2(&c.e2e),
                c.request_throughput,
                c.output_throughput,
                c.goodput
            );
        }
        // With a gap target, goodput counts it; vLLM's (TTFT and TPOT alone) stays beside it.
        let vllm: Vec<String> = rows
            .iter()
            .filter_map(|c| {
                c.goodput_ttft_tpot
                    .map(|goodput| format!("{} {goodput:.2}", c.class))
            })
            .collect();
        if !vllm.is_empty() {
            let _ = writeln!(
                out,
                "  goodput counts the gap target too; TTFT and TPOT alone (vLLM's): {}",
                vllm.join(", ")
            );
        }
        for c in rows.iter().filter(|c| !c.error_kinds.is_empty()) {
            let kinds: Vec<String> = c
                .error_kinds
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            let _ = writeln!(out, "  errors ({}): {}", c.class, kinds.join(" "));
        }
        // One example says more than a count: "connection refused" vs "HTTP 429".
        if let Some(first) = self.requests.iter().find_map(|r| r.error.as_deref()) {
            let _ = writeln!(out, "  first error: {}", truncate(first, 160));
        }
        out
    }
}

pub(crate) fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

pub(crate) fn ms3(s: &Summary) -> String {
    if s.count == 0 {
        return "-".into();
    }
    format!("{:.1}/{:.1}/{:.1}", s.p50 * 1e3, s.p90 * 1e3, s.p99 * 1e3)
}

/// The p99 and the largest of a summary in ms: where the worst of a measure lies.
fn worst_ms(s: &Summary) -> String {
    if s.count == 0 {
        return "-".into();
    }
    format!("{:.1}/{:.1}", s.p99 * 1e3, s.max * 1e3)
}

fn s2(s: &Summary) -> String {
    if s.count == 0 {
        return "-".into();
    }
    format!("{:.2}/{:.2}", s.p50, s.p99)
}

/// The whole run as written by `--json`: the settings shared by every point, then the points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Bumped when a field changes meaning or disappears.
    pub schema_version: u32,
    pub tool: String,
    pub url: String,
    pub endpoint: Endpoint,
    /// The workload in its canonical text form.
    pub workload: String,
    pub slo: Slo,
    pub stop: Stop,
    pub seed: u64,
    pub points: Vec<PointReport>,
    /// Session runs only: the per-turn rows and the prefix cache's share (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionResults>,
}

/// [`BenchReport::tool`]: this program and its version.
pub(crate) fn tool() -> String {
    format!("tokenmeter bench {}", env!("CARGO_PKG_VERSION"))
}

/// The current [`BenchReport::schema_version`].
pub const SCHEMA_VERSION: u32 = 1;

impl BenchReport {
    /// The report of a run whose points share `spec`'s settings.
    pub fn new(spec: &LoadSpec, points: Vec<PointReport>) -> Self {
        BenchReport {
            schema_version: SCHEMA_VERSION,
            tool: tool(),
            url: spec.url.clone(),
            endpoint: spec.endpoint,
            workload: spec.workload.to_string(),
            slo: spec.slo,
            stop: spec.stop,
            seed: spec.seed,
            points,
            sessions: None,
        }
    }

    /// Writes pretty JSON to `path`.
    pub fn write_json(&self, path: &Path) -> Result<(), BenchError> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n").map_err(|source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
