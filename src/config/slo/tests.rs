use std::time::Duration;

use crate::config::{Config, ConfigError};

fn config(toml: &str) -> Config {
    Config::from_toml(toml).expect("valid config")
}

/// The key and message of the refusal of `toml`.
fn refused(toml: &str) -> (String, String) {
    match Config::from_toml(toml) {
        Err(ConfigError::Invalid { key, message }) => (key, message),
        other => panic!("expected a refusal of {toml:?}, got {other:?}"),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const LAYERED: &str = r#"
[slo]
ttft = "800ms"
tpot = "35ms"
max_gap = "250ms"

[slo.models."llama-70b"]
ttft = "2s"
max_gap = "400ms"

[slo.classes.batch]
ttft = "10s"
tpot = "100ms"
max_gap = "2s"

[slo.classes.snappy]
ttft = "300ms"
"#;

#[test]
fn a_request_gets_its_class_over_its_model_over_the_defaults_key_by_key() {
    let slo = config(LAYERED).slo;
    let targets = |model, class| {
        let t = slo.targets(model, class);
        (t.ttft, t.tpot)
    };
    assert_eq!(targets(None, None), (ms(800), ms(35)));
    assert_eq!(targets(Some("llama-8b"), None), (ms(800), ms(35)));
    assert_eq!(targets(Some("llama-70b"), None), (ms(2000), ms(35)));
    assert_eq!(
        targets(Some("llama-70b"), Some("batch")),
        (ms(10_000), ms(100))
    );
    // A class that sets only ttft keeps the model's (here the default) tpot.
    assert_eq!(
        targets(Some("llama-70b"), Some("snappy")),
        (ms(300), ms(35))
    );
    // A class the configuration does not name is no class.
    assert_eq!(
        targets(Some("llama-70b"), Some("unheard-of")),
        (ms(2000), ms(35))
    );
    assert!(slo.varies());
    assert!(!config("").slo.varies());
}

#[test]
fn every_target_is_a_bucket_edge_once() {
    let slo = config(LAYERED).slo;
    assert_eq!(
        slo.ttft_targets(),
        vec![ms(300), ms(800), ms(2000), ms(10_000)]
    );
    assert_eq!(slo.tpot_targets(), vec![ms(35), ms(100)]);
    assert_eq!(config("").slo.ttft_targets(), vec![ms(800)]);
}

#[test]
fn the_class_header_is_x_slo_class_unless_configured() {
    assert_eq!(config("").slo.class_header.as_str(), "x-slo-class");
    let custom = config("[slo]\nclass_header = \"X-Priority-Class\"\n");
    assert_eq!(custom.slo.class_header.as_str(), "x-priority-class");
}

#[test]
fn a_zero_or_unreadable_target_is_refused_by_its_key() {
    let (key, message) = refused("[slo.classes.batch]\nttft = \"0s\"\n");
    assert_eq!(key, "slo.classes.batch.ttft");
    assert_eq!(message, "must be greater than zero");
    let (key, _) = refused("[slo.models.\"llama-70b\"]\ntpot = \"0ms\"\n");
    assert_eq!(key, "slo.models.llama-70b.tpot");
    let (key, message) = refused("[slo.classes.batch]\nttft = \"soon\"\n");
    assert_eq!(key, "slo.classes.batch.ttft");
    assert!(message.contains("\"soon\""), "{message}");
    let (key, message) = refused("[slo]\nclass_header = \"not a header\"\n");
    assert_eq!(key, "slo.class_header");
    assert!(message.contains("is not a header name"), "{message}");
    let (key, message) = refused("[slo.classes.batch]\nttfb = \"1s\"\n");
    assert_eq!(key, "slo.classes.batch.ttfb");
    assert!(message.contains("unknown field"), "{message}");
    let (key, _) = refused("[slo.classes.\"\"]\nttft = \"1s\"\n");
    assert_eq!(key, "slo.classes");
}

#[test]
fn the_gap_target_is_unset_unless_configured_and_layers_like_the_others() {
    let unset = config("").slo;
    assert_eq!(unset.max_gap, None, "gaps are not judged by default");
    assert_eq!(unset.targets(Some("m"), Some("batch")).max_gap, None);
    assert!(unset.gap_targets().is_empty(), "no gap target, no edge");
    let slo = config(LAYERED).slo;
    let gap = |model, class| slo.targets(model, class).max_gap;
    assert_eq!(gap(None, None), Some(ms(250)));
    assert_eq!(gap(Some("llama-70b"), None), Some(ms(400)));
    assert_eq!(gap(Some("llama-70b"), Some("batch")), Some(ms(2000)));
    assert_eq!(gap(Some("llama-70b"), Some("unheard-of")), Some(ms(400)));
    assert_eq!(slo.gap_targets(), vec![ms(250), ms(400), ms(2000)]);
    // A layer may set a gap target where the defaults have none.
    let only_batch = config("[slo.classes.batch]\nmax_gap = \"1s\"\n").slo;
    assert_eq!(only_batch.targets(None, None).max_gap, None);
    assert_eq!(
        only_batch.targets(None, Some("batch")).max_gap,
        Some(ms(1000))
    );
}

#[test]
fn a_zero_gap_target_is_refused_by_its_key() {
    let (key, message) = refused("[slo]\nmax_gap = \"0ms\"\n");
    assert_eq!(key, "slo.max_gap");
    assert!(message.contains("greater than zero"), "{message}");
    let (key, _) = refused("[slo.classes.batch]\nmax_gap = \"0s\"\n");
    assert_eq!(key, "slo.classes.batch.max_gap");
    let (key, _) = refused("[slo]\nmax_gap = \"a while\"\n");
    assert_eq!(key, "slo.max_gap");
}
