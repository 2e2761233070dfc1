use super::*;

#[test]
fn model_labels_are_bounded() {
    let labels = BoundedLabels::new(&["llama".to_owned()], 2, MODEL_OTHER, MODEL_UNKNOWN);
    assert_eq!(&*labels.label(Some("llama")), "llama", "configured");
    assert_eq!(&*labels.label(Some("a")), "a", "first observed");
    assert_eq!(&*labels.label(Some("b")), "b", "second observed");
    assert_eq!(&*labels.label(Some("c")), MODEL_OTHER, "over budget");
    assert_eq!(&*labels.label(Some("a")), "a", "still known");
    assert_eq!(&*labels.label(None), MODEL_UNKNOWN, "no model");
    let long = "x".repeat(MAX_MODEL_LABEL_BYTES + 1);
    assert_eq!(&*labels.label(Some(&long)), MODEL_OTHER, "over-long name");
}

#[test]
fn a_reload_replaces_the_configured_names_and_keeps_the_observed_ones() {
    let labels = BoundedLabels::new(&["llama".to_owned()], 1, MODEL_OTHER, MODEL_UNKNOWN);
    assert_eq!(&*labels.label(Some("seen")), "seen", "observed");
    labels.set_fixed(&["qwen".to_owned()]);
    assert_eq!(&*labels.label(Some("qwen")), "qwen", "newly configured");
    assert_eq!(&*labels.label(Some("seen")), "seen", "still observed");
    assert_eq!(
        &*labels.label(Some("llama")),
        MODEL_OTHER,
        "no longer configured, budget spent"
    );
}
