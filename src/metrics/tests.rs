use super::*;

#[test]
fn slo_targets_become_exact_edges() {
    let ms = Duration::from_millis;
    let edges = with_edges(&[0.01, 0.05, 0.1], &[ms(35)]);
    assert_eq!(
        edges,
        vec![0.01, 0.035, 0.05, 0.1],
        "35 ms inserted in order"
    );
    let same = with_edges(&[0.01, 0.035], &[ms(35)]);
    assert_eq!(
        same,
        vec![0.01, 0.035],
        "an existing edge is not duplicated"
    );
    // Every target of every model and class, past the last bucket too.
    let several = with_edges(&[0.1, 1.0], &[ms(300), ms(800), ms(1000), ms(10_000)]);
    assert_eq!(several, vec![0.1, 0.3, 0.8, 1.0, 10.0]);
}

#[test]
fn families_render_with_their_owners_buckets_and_help() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    metrics.define_histogram("owned_seconds", &[0.1, 0.8], true);
    metrics.define_histogram("owned_seconds", &[5.0], false);
    metrics.describe_histogram("owned_seconds", "An owned latency.");
    metrics.describe_counter("owned_total", "An owned counter.");
    let model = metrics.model_label(Some("m"));
    let label = [shared_label(LABEL_MODEL, &model)];
    metrics.latency("owned_seconds", &label).record(0.5);
    metrics.counter("owned_total", label.to_vec()).increment(2);
    let text = metrics.render();
    for line in [
        "# HELP owned_seconds An owned latency.",
        "# TYPE owned_seconds histogram",
        r#"owned_seconds_bucket{gen_ai_request_model="m",le="0.8"} 1"#,
        "# HELP owned_total An owned counter.",
        r#"owned_total{gen_ai_request_model="m"} 2"#,
    ] {
        assert!(
            text.contains(line),
            "{line} (the first definition's buckets) in:\n{text}"
        );
    }
    assert!(
        !text.contains(r#"le="5""#),
        "the second definition is ignored:\n{text}"
    );
    assert!(!text.contains("quantile="), "no summaries:\n{text}");
}
