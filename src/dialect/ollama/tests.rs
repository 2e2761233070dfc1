use super::*;
use crate::dialect::tests::{last_event, one_token, usage};

fn summary(data: &str) -> EventSummary {
    classify(data.as_bytes())
}

#[test]
fn chat_and_generate_lines_are_one_token_each() {
    let one = one_token();
    for line in [
        r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"The"},"done":false}"#,
        r#"{"model":"qwen3","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"","thinking":"Hmm"},"done":false}"#,
        r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#,
        r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","response":" sky","done":false}"#,
    ] {
        assert_eq!(summary(line), one, "{line}");
    }
}

#[test]
fn the_done_line_reports_usage() {
    let last = summary(
        r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:01Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":4353619900,"load_duration":63915300,"prompt_eval_count":26,"prompt_eval_duration":246847000,"eval_count":259,"eval_duration":4032296000}"#,
    );
    assert_eq!(
        last,
        last_event(usage(Some(26), Some(259))),
        "the final line: no output, usage, end"
    );
    let with_text = summary(r#"{"response":"!","done":true,"eval_count":3}"#);
    assert!(
        with_text.token && with_text.tokens.is_none() && with_text.done,
        "a final line with text is a token event whose count usage gives: {with_text:?}"
    );
}

#[test]
fn errors_and_garbage() {
    assert!(
        summary(r#"{"error":"model 'x' not found"}"#).error,
        "error member"
    );
    for data in [
        "",
        "{",
        r#"{"message":"hi"}"#,
        r#"{"done":"yes","eval_count":-1}"#,
    ] {
        assert_eq!(summary(data), EventSummary::default(), "{data:?}");
    }
}

#[test]
fn body_usage_reads_a_whole_answer() {
    let chat = r#"{"model":"llama3.2","created_at":"2023-12-12T14:13:43.416799Z","message":{"role":"assistant","content":"Hello! How are you today?"},"done":true,"total_duration":5191566416,"load_duration":2154458,"prompt_eval_count":26,"prompt_eval_duration":383809000,"eval_count":298,"eval_duration":4799921000}"#;
    assert_eq!(
        body_usage(chat.as_bytes()),
        usage(Some(26), Some(298)),
        "/api/chat: prompt_eval_count / eval_count"
    );
    let generate = r#"{"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z","response":"The sky is blue because it is the color of the sky.","done":true,"context":[1,2,3],"total_duration":5043500667,"load_duration":5025959,"prompt_eval_count":26,"prompt_eval_duration":325953000,"eval_count":290,"eval_duration":4709213000}"#;
    assert_eq!(
        body_usage(generate.as_bytes()),
        usage(Some(26), Some(290)),
        "/api/generate: prompt_eval_count / eval_count"
    );
    for body in [
        r#"{"model":"llama3.2","response":"hi","done":true}"#,
        r#"{"model":"llama3.2","response":"hi","done":true,"eval_count":2"#,
        "{}\n{}",
        "",
    ] {
        assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
    }
}
