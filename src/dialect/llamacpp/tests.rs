use super::*;
use crate::dialect::tests::{last_event, usage};

fn summary(data: &str) -> EventSummary {
    classify(data.as_bytes())
}

#[test]
fn content_events_are_tokens_with_running_counts() {
    assert_eq!(
        summary(
            r#"{"index":0,"content":" Paris","tokens":[],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":9}"#
        ),
        EventSummary {
            token: true,
            usage: usage(Some(9), Some(1)),
            ..EventSummary::default()
        },
        "content is a token; the running counts are cumulative usage"
    );
}

#[test]
fn the_stop_event_ends_with_final_counts() {
    let last = summary(
        r#"{"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"m.gguf","tokens_predicted":12,"tokens_evaluated":9,"stop_type":"limit","stopping_word":"","tokens_cached":20,"timings":{"prompt_n":9,"prompt_ms":10.5,"predicted_n":12,"predicted_ms":100.2}}"#,
    );
    assert_eq!(
        last,
        last_event(Some(Usage {
            prompt_tokens: Some(9),
            completion_tokens: Some(12),
            cached_tokens: None,
            prefill_micros: Some(10_500)
        })),
        "stop: usage (and the server's prompt time) and end, no token"
    );
    let timings_only =
        summary(r#"{"content":"","stop":true,"timings":{"prompt_n":4,"predicted_n":6}}"#);
    assert_eq!(
        timings_only.usage,
        usage(Some(4), Some(6)),
        "timings stand in for missing counts"
    );
    for (prompt_ms, micros) in [("12", Some(12_000)), ("-1", None), ("\"x\"", None)] {
        let data = format!(r#"{{"content":"","stop":true,"timings":{{"prompt_ms":{prompt_ms}}}}}"#);
        assert_eq!(
            summary(&data).usage.and_then(|u| u.prefill_micros),
            micros,
            "prompt_ms {prompt_ms}"
        );
    }
}

#[test]
fn errors_and_garbage() {
    assert!(
        summary(r#"{"error":{"code":500,"message":"x","type":"server_error"}}"#).error,
        "error member"
    );
    for data in ["", "[DONE]", r#"{"content":7,"stop":1}"#] {
        assert_eq!(summary(data), EventSummary::default(), "{data:?}");
    }
}

#[test]
fn body_usage_reads_a_whole_answer() {
    let body = r#"{"index":0,"content":" Paris.","tokens":[],"id_slot":0,"stop":true,"model":"gpt-3.5-turbo","tokens_predicted":3,"tokens_evaluated":9,"generation_settings":{"n_predict":-1,"temperature":0.8},"prompt":"<s> The capital of France is","has_new_line":false,"truncated":false,"stop_type":"eos","stopping_word":"","tokens_cached":11,"timings":{"prompt_n":9,"prompt_ms":51.2,"prompt_per_token_ms":5.7,"prompt_per_second":175.8,"predicted_n":3,"predicted_ms":30.1,"predicted_per_token_ms":10.0,"predicted_per_second":99.7}}"#;
    assert_eq!(
        body_usage(body.as_bytes()),
        Some(Usage {
            prompt_tokens: Some(9),
            completion_tokens: Some(3),
            cached_tokens: None,
            prefill_micros: Some(51_200)
        }),
        "tokens_evaluated / tokens_predicted"
    );
    let timings_only = r#"{"content":"x","stop":true,"timings":{"prompt_n":4,"predicted_n":1}}"#;
    assert_eq!(
        body_usage(timings_only.as_bytes()),
        usage(Some(4), Some(1)),
        "timings stand in for missing top-level counts"
    );
    for body in [
        r#"{"content":" Paris.","stop":true}"#,
        r#"{"content":" Paris.","tokens_predicted":3"#,
        "",
    ] {
        assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
    }
}

#[test]
fn cached_prompt_tokens_are_timings_cache_n() {
    let last = r#"{"index":0,"content":"","stop":true,"tokens_predicted":4,"tokens_evaluated":60,"timings":{"cache_n":52,"prompt_n":8,"prompt_ms":9.1,"predicted_n":4,"predicted_ms":25.2}}"#;
    assert_eq!(
        summary(last).usage,
        Some(Usage {
            prompt_tokens: Some(60),
            completion_tokens: Some(4),
            cached_tokens: Some(52),
            prefill_micros: Some(9_100)
        }),
        "tokens_evaluated is the whole prompt; cache_n of it came from the slot's cache"
    );
    let timings_only =
        r#"{"content":"","stop":true,"timings":{"cache_n":52,"prompt_n":8,"predicted_n":4}}"#;
    assert_eq!(
        summary(timings_only).usage,
        Some(Usage {
            prompt_tokens: Some(60),
            completion_tokens: Some(4),
            cached_tokens: Some(52),
            prefill_micros: None
        }),
        "without the top-level counts the prompt is prompt_n + cache_n"
    );
}
