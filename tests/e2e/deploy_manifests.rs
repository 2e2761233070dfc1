//! The deployment files are checked by `scripts/check-deploy.sh` (Kubernetes schemas, operator CRD
//! schemas, rules mirrored, every shipped tokenmeter.toml accepted by `serve --check`). Its validators
//! live in a virtualenv that `scripts/install-test-deps.sh` creates.
use std::process::Command;

#[test]
fn deployment_manifests_are_valid() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new("bash")
        .arg(format!("{root}/scripts/check-deploy.sh"))
        .env("TOKENMETER", env!("CARGO_BIN_EXE_tokenmeter"))
        .current_dir(root)
        .output()
        .expect("bash runs the deploy check");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "scripts/check-deploy.sh failed:\n{report}"
    );
    for section in [
        "ok: Kubernetes 1.29.0",
        "ok: Kubernetes 1.37.0",
        "rules equal",
    ] {
        assert!(
            report.contains(section),
            "the check ran {section:?}:\n{report}"
        );
    }
}
