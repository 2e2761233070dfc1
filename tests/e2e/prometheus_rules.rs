//! The alert and recording rules and the example Prometheus configuration, checked by `promtool`
//! (Debian's `prometheus` package): syntax, and the alerts' unit tests on synthetic series
//! (`deploy/prometheus/tokenmeter-rules.test.yaml`).

use crate::prometheus_support;
use std::process::Command;

use prometheus_support::repo_path;

/// Runs promtool with `args` in `deploy/prometheus/`; returns (success, stdout + stderr).
fn promtool(args: &[&str]) -> (bool, String) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(repo_path("deploy/prometheus"))
        .output()
        .expect("promtool is installed (Debian package `prometheus`; .ci/run installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn promtool_accepts_the_rules() {
    let (ok, text) = promtool(&["check", "rules", "tokenmeter-rules.yaml"]);
    assert!(ok, "promtool check rules failed:\n{text}");
    assert!(
        text.contains("SUCCESS: 45 rules found"),
        "all 45 rules (25 recording, 20 alerting) are found:\n{text}"
    );
}

#[test]
fn alert_unit_tests_pass() {
    let (ok, text) = promtool(&["test", "rules", "tokenmeter-rules.test.yaml"]);
    assert!(ok, "promtool test rules failed:\n{text}");
    assert!(
        text.contains("SUCCESS"),
        "promtool reports success:\n{text}"
    );
}

#[test]
fn example_scrape_config_is_valid() {
    let (ok, text) = promtool(&["check", "config", "prometheus.yml"]);
    assert!(ok, "promtool check config failed:\n{text}");
    assert!(
        text.contains("SUCCESS: 1 rule files found"),
        "the example loads the rule file:\n{text}"
    );
}
