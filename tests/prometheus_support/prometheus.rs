//! A real Prometheus (Debian's `prometheus` package) on a free loopback port, scraping given
//! targets every second and evaluating given rule files every second, with its TSDB in a scratch
//! folder; killed on drop.
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::http;
use super::process::{free_addr, wait_for, Proc};

/// The Prometheus binary (`.ci/run` installs Debian's `prometheus`).
const PROMETHEUS: &str = "prometheus";

pub struct Prometheus {
    pub addr: SocketAddr,
    pub proc: Proc,
}

impl Prometheus {
    /// Starts Prometheus with `targets` under job `tokenmeter` and `rule_files`; returns once it is
    /// ready to answer queries.
    pub fn start(dir: &Path, targets: &[SocketAddr], rule_files: &[&Path]) -> Prometheus {
        Self::start_with_features(dir, targets, rule_files, &[])
    }

    /// [`Prometheus::start`] with `--enable-feature` flags (e.g. `native-histograms`).
    pub fn start_with_features(
        dir: &Path,
        targets: &[SocketAddr],
        rule_files: &[&Path],
        features: &[&str],
    ) -> Prometheus {
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let rules: Vec<String> = rule_files
            .iter()
            .map(|p| format!("  - '{}'", p.display()))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{}\n\
             scrape_configs:\n  - job_name: tokenmeter\n    static_configs:\n      - targets: [{}]\n",
            rules.join("\n"),
            targets.join(", ")
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let addr = free_addr();
        let mut command = Command::new(PROMETHEUS);
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn");
        if !features.is_empty() {
            command.arg(format!("--enable-feature={}", features.join(",")));
        }
        let proc = Proc::spawn("prometheus", command, dir);
        let prometheus = Prometheus { addr, proc };
        wait_for("Prometheus /-/ready", Duration::from_secs(30), || {
            matches!(http::get(addr, "/-/ready"), Some((200, _))).then_some(())
        });
        prometheus
    }

    /// An instant query; panics (with Prometheus' error) unless the API answers `success`.
    pub fn query(&self, promql: &str) -> Value {
        let path = format!("/api/v1/query?query={}", http::encode(promql));
        let (status, body) = http::get(self.addr, &path)
            .unwrap_or_else(|| panic!("Prometheus did not answer\n{}", self.proc.log_tail()));
        let json: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("Prometheus answered non-JSON ({e}): {body}"));
        assert!(
            status == 200 && json["status"] == "success",
            "query failed (HTTP {status}): {promql}\n{body}"
        );
        json["data"].clone()
    }

    /// The single value of a query expected to return exactly one sample.
    pub fn scalar(&self, promql: &str) -> Option<f64> {
        let data = self.query(promql);
        let result = data["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }

    /// `/api/v1/rules` data: every group and rule, with health and last error.
    pub fn rules(&self) -> Value {
        let (status, body) = http::get(self.addr, "/api/v1/rules").expect("rules API answers");
        assert_eq!(status, 200, "rules API: {body}");
        let json: Value = serde_json::from_str(&body).expect("rules JSON");
        json["data"].clone()
    }
}

/// Whether a query's data holds at least one sample (vector / matrix) or is a scalar or string.
pub fn has_data(data: &Value) -> bool {
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => data["result"]
            .as_array()
            .is_some_and(|result| !result.is_empty()),
        Some("scalar") | Some("string") => true,
        _ => false,
    }
}
