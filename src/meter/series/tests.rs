use super::*;
use crate::dialect::Dialect;

fn series() -> MeterSeries {
    let config = Config::default();
    let metrics = Arc::new(Metrics::new(&config).expect("metrics"));
    MeterSeries::new(metrics, &config)
}

fn labels(series: &MeterSeries, model: &str, backend: &str, pool: &str) -> RequestLabels {
    RequestLabels {
        operation: Operation::of(Dialect::OpenAiChat),
        model: series.metrics().model_label(Some(model)),
        backend: Arc::from(backend),
        pool: Arc::from(pool),
    }
}

#[test]
fn ten_thousand_model_names_make_bounded_series() {
    let series = series();
    for i in 0..10_000 {
        let labels = labels(&series, &format!("model-{i}"), "b", "b");
        let stream = series.stream(&labels);
        series.request_finished(&stream.labels, Outcome::Ok);
    }
    let text = series.metrics().render();
    let count = text
        .lines()
        .filter(|line| line.starts_with(REQUESTS))
        .count();
    assert_eq!(count, 33, "32 observed models + other");
}

#[test]
fn histograms_render_as_histograms_with_slo_edges() {
    let series = series();
    let stream = series.stream(&labels(&series, "m", "b", "p"));
    stream.ttft.record(0.5);
    stream.tpot.record(0.02);
    let text = series.metrics().render();
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
    let series = series();
    let metrics = Arc::clone(series.metrics());
    let first = series.stream(&labels(&series, "m", "b", "p"));
    let second = series.stream(&labels(&series, "m", "b", "p"));
    assert!(Arc::ptr_eq(&first.ends, &second.ends), "resolved once");
    let other = series.stream(&labels(&series, "m", "b2", "p"));
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

#[test]
fn a_reloaded_stall_threshold_applies_to_streams_from_then_on() {
    let series = series();
    let before = series.stream(&labels(&series, "m", "b", "p"));
    let mut config = Config::default();
    config.metering.stall_threshold = Duration::from_millis(7);
    series.reload(&config);
    let after = series.stream(&labels(&series, "m", "b", "p"));
    assert_ne!(before.stall_threshold, after.stall_threshold, "changed");
    assert_eq!(
        after.stall_threshold,
        Duration::from_millis(7),
        "the new one"
    );
}

#[test]
fn every_slo_verdict_has_a_counter_slot_of_its_own() {
    let series = series();
    let metrics = Arc::clone(series.metrics());
    let stream = series.stream(&labels(&series, "m", "b", "p"));
    for slo in [Slo::Ttft, Slo::Tpot, Slo::Gap, Slo::All] {
        stream.slo_verdict(&metrics, slo, false);
        assert!(
            stream
                .ends
                .slo
                .get(slo as usize)
                .is_some_and(|slots| slots[0].get().is_some()),
            "{}: its counter is resolved once and kept, not looked up at each request's end",
            slo.as_str()
        );
    }
    let text = metrics.render();
    let base = r#"gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="m",backend="b",pool="p""#;
    for slo in ["ttft", "tpot", "gap", "all"] {
        let line = format!(r#"{SLO_REQUESTS}{{{base},slo="{slo}",result="missed"}} 1"#);
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
}
