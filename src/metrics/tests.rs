use super::*;

#[test]
fn slo_target_becomes_an_exact_edge() {
    let edges = with_edge(&[0.01, 0.05, 0.1], Duration::from_millis(35));
    assert_eq!(
        edges,
        vec![0.01, 0.035, 0.05, 0.1],
        "35 ms inserted in order"
    );
    let same = with_edge(&[0.01, 0.035], Duration::from_millis(35));
    assert_eq!(
        same,
        vec![0.01, 0.035],
        "an existing edge is not duplicated"
    );
}

#[test]
fn model_labels_are_bounded() {
    let labels = ModelLabels::new(&["llama".to_owned()], 2);
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
fn ten_thousand_model_names_make_bounded_series() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let backend: Arc<str> = Arc::from("b");
    for i in 0..10_000 {
        let model = metrics.model_label(Some(&format!("model-{i}")));
        let stream = metrics.stream(
            Operation::of(Dialect::OpenAiChat),
            &model,
            &backend,
            &backend,
        );
        metrics.request_finished(&stream.labels, Outcome::Ok);
    }
    let text = metrics.render();
    let series = text
        .lines()
        .filter(|line| line.starts_with(REQUESTS))
        .count();
    assert_eq!(series, 33, "32 observed models + other");
}

#[test]
fn histograms_render_as_histograms_with_slo_edges() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let model = metrics.model_label(Some("m"));
    let stream = metrics.stream(
        Operation::of(Dialect::OpenAiChat),
        &model,
        &Arc::from("b"),
        &Arc::from("p"),
    );
    stream.ttft.record(0.5);
    stream.tpot.record(0.02);
    let text = metrics.render();
    assert!(
        text.contains("# TYPE gen_ai_server_time_to_first_token_seconds histogram"),
        "TTFT is a histogram:\n{text}"
    );
    assert!(
        text.contains(r#"gen_ai_server_time_to_first_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="m",backend="b",pool="p",le="0.8"} 1"#),
        "the 800 ms SLO is an edge:\n{text}"
    );
    assert!(
        text.contains(r#"gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="m",backend="b",pool="p",le="0.035"} 1"#),
        "the 35 ms SLO is an edge:\n{text}"
    );
    assert!(!text.contains("quantile="), "no summaries:\n{text}");
}

#[test]
fn streams_of_one_label_set_share_their_handles_and_end_counters() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let model = metrics.model_label(Some("m"));
    let (backend, pool): (Arc<str>, Arc<str>) = (Arc::from("b"), Arc::from("p"));
    let chat = Operation::of(Dialect::OpenAiChat);
    let first = metrics.stream(chat, &model, &backend, &pool);
    let second = metrics.stream(chat, &model, &backend, &pool);
    assert!(Arc::ptr_eq(&first.ends, &second.ends), "resolved once");
    let other = metrics.stream(chat, &model, &Arc::from("b2"), &pool);
    assert!(
        !Arc::ptr_eq(&first.ends, &other.ends),
        "another backend, other series"
    );

    first.finished(&metrics, Outcome::Ok);
    second.finished(&metrics, Outcome::Ok);
    second.finished(&metrics, Outcome::Timeout);
    first.slo_verdict(&metrics, Slo::Ttft, true);
    second.slo_verdict(&metrics, Slo::Ttft, false);
    first.token_count_source(&metrics, true);
    first.prompt_cache(&metrics, 30, 70);
    second.prompt_cache(&metrics, 10, 0);
    let text = metrics.render();
    let base = r#"gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="m",backend="b",pool="p""#;
    for line in [
        format!(r#"{REQUESTS}{{{base},outcome="ok"}} 2"#),
        format!(r#"{REQUESTS}{{{base},outcome="timeout"}} 1"#),
        format!(r#"{SLO_REQUESTS}{{{base},slo="ttft",result="met"}} 1"#),
        format!(r#"{SLO_REQUESTS}{{{base},slo="ttft",result="missed"}} 1"#),
        format!(r#"{TOKEN_COUNT_SOURCE}{{{base},source="usage"}} 1"#),
        format!(
            r#"{PROMPT_CACHE}{{pool="p",backend="b",gen_ai_request_model="m",result="hit"}} 40"#
        ),
        format!(
            r#"{PROMPT_CACHE}{{pool="p",backend="b",gen_ai_request_model="m",result="miss"}} 70"#
        ),
    ] {
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
    // A series appears with its first count, not before.
    assert!(!text.contains(r#"outcome="cancelled""#), "{text}");
    assert!(!text.contains(r#"source="events""#), "{text}");
    assert!(!text.contains(r#"slo="tpot""#), "{text}");
}
