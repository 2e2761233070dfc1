//! A real Prometheus (Debian's `prometheus` package) on a free loopback port, scraping given
//! targets every second and evaluating given rule files every second, with its TSDB in a scratch
//! folder; killed on drop. It stores tokenmeter's latency histograms as classic buckets, as native
//! histograms, or as both ([`Storage`]).
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::exprs::NATIVE_HISTOGRAMS;
use super::http;
use super::process::{free_addr, wait_for, Proc};

/// The Prometheus binary (`.ci/run` installs Debian's `prometheus`).
const PROMETHEUS: &str = "prometheus";

pub struct Prometheus {
    pub addr: SocketAddr,
    pub proc: Proc,
}

/// How a Prometheus scrapes and stores tokenmeter's histograms: the storages the dashboards and
/// rules must work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// No feature flag: Prometheus scrapes the text format and stores every histogram as classic
    /// `_bucket`, `_sum` and `_count` series.
    Classic,
    /// `--enable-feature=native-histograms`: Prometheus asks for the protobuf format and, on 2.42,
    /// stores a histogram that has native buckets ([`NATIVE_HISTOGRAMS`]) as a native histogram
    /// only; the others stay classic.
    Native,
    /// Both forms of the latency histograms, as 2.45 and later keep them with the flag and
    /// `scrape_classic_histograms`. 2.42 cannot scrape both, so [`Prometheus::start_keeping_both`]
    /// scrapes natively and federates the classic series of [`NATIVE_HISTOGRAMS`], with their
    /// labels, from a [`Storage::Classic`] Prometheus.
    Both,
}

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::Classic => "classic",
            Storage::Native => "native",
            Storage::Both => "both",
        }
    }

    /// Its process's name, and its folder's under the test's scratch folder.
    fn process_name(self) -> String {
        format!("prometheus-{}", self.name())
    }

    /// Whether the latency histograms are stored as native histograms.
    pub fn has_native(self) -> bool {
        self != Storage::Classic
    }

    /// Whether their classic series are stored.
    pub fn has_classic(self) -> bool {
        self != Storage::Native
    }
}

impl Prometheus {
    /// Starts Prometheus with `targets` under job `tokenmeter` and `rule_files`; returns once it is
    /// ready to answer queries.
    pub fn start(dir: &Path, targets: &[SocketAddr], rule_files: &[&Path]) -> Prometheus {
        Self::start_with_features(dir, targets, rule_files, &[])
    }

    /// [`Prometheus::start`] storing histograms as `storage` (classic or native) says, with
    /// `extra_features` besides (e.g. `exemplar-storage`), in a folder of its own under `dir`
    /// (named after the storage, so a test can run one of each beside the other).
    pub fn start_storing(
        dir: &Path,
        storage: Storage,
        targets: &[SocketAddr],
        rule_files: &[&Path],
        extra_features: &[&str],
    ) -> Prometheus {
        let mut features = extra_features.to_vec();
        match storage {
            Storage::Classic => {}
            Storage::Native => features.push("native-histograms"),
            Storage::Both => panic!("Storage::Both needs a classic source: start_keeping_both"),
        }
        let own = storage_dir(dir, storage);
        let config = config(targets, rule_files, "");
        Self::launch(&own, &storage.process_name(), &config, &features)
    }

    /// A [`Storage::Both`] Prometheus: `targets` scraped natively, and the classic series of the
    /// latency histograms federated from `classic` (a [`Storage::Classic`] one scraping the same
    /// targets), their labels kept.
    pub fn start_keeping_both(
        dir: &Path,
        targets: &[SocketAddr],
        rule_files: &[&Path],
        classic: &Prometheus,
    ) -> Prometheus {
        let families = NATIVE_HISTOGRAMS.join("|");
        let federation = [
            "  - job_name: classic-buckets".to_owned(),
            "    honor_labels: true".to_owned(),
            "    metrics_path: /federate".to_owned(),
            format!(
                "    params: {{'match[]': ['{{__name__=~\"({families})_(bucket|sum|count)\"}}']}}"
            ),
            format!("    static_configs: [{{targets: ['{}']}}]", classic.addr),
        ]
        .join("\n");
        let config = config(targets, rule_files, &federation);
        let own = storage_dir(dir, Storage::Both);
        let name = Storage::Both.process_name();
        Self::launch(&own, &name, &config, &["native-histograms"])
    }

    /// [`Prometheus::start`] with `--enable-feature` flags (e.g. `native-histograms`).
    pub fn start_with_features(
        dir: &Path,
        targets: &[SocketAddr],
        rule_files: &[&Path],
        features: &[&str],
    ) -> Prometheus {
        Self::launch(
            dir,
            "prometheus",
            &config(targets, rule_files, ""),
            features,
        )
    }

    /// Writes `config` to `dir/prometheus.yml` and runs Prometheus on it, its TSDB in `dir`;
    /// returns once it is ready.
    fn launch(dir: &Path, name: &str, config: &str, features: &[&str]) -> Prometheus {
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
        let proc = Proc::spawn(name, command, dir);
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

    /// The names of the series this Prometheus stores as native histograms (an instant query's
    /// sample of one carries `histogram` instead of `value`), among those `selector` selects.
    pub fn native_histogram_names(&self, selector: &str) -> std::collections::BTreeSet<String> {
        let data = self.query(selector);
        data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|sample| sample.get("histogram").is_some())
            .filter_map(|sample| sample["metric"]["__name__"].as_str().map(str::to_owned))
            .collect()
    }
}

/// `dir/prometheus-<storage>`, created.
fn storage_dir(dir: &Path, storage: Storage) -> std::path::PathBuf {
    let own = dir.join(storage.process_name());
    std::fs::create_dir_all(&own).expect("create the Prometheus folder");
    own
}

/// A configuration scraping `targets` every second under job `tokenmeter`, evaluating
/// `rule_files` every second, with `more_jobs` (YAML list items) after.
fn config(targets: &[SocketAddr], rule_files: &[&Path], more_jobs: &str) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let rules: Vec<String> = rule_files
        .iter()
        .map(|p| format!("  - '{}'", p.display()))
        .collect();
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n{}\n\
         scrape_configs:\n  - job_name: tokenmeter\n    static_configs:\n      - targets: [{}]\n{more_jobs}",
        rules.join("\n"),
        targets.join(", ")
    )
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
