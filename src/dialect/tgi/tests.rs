use super::*;
use crate::dialect::tests::{last_event, one_token, usage};

fn summary(data: &str) -> EventSummary {
    classify(data.as_bytes())
}

#[test]
fn ordinary_tokens_count_one_each() {
    assert_eq!(
        summary(
            r#"{"index":1,"token":{"id":22557,"text":"Hello","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#
        ),
        one_token(),
        "a non-special token is one token event of one token"
    );
}

#[test]
fn the_special_last_token_ends_with_details() {
    let last = summary(
        r#"{"index":5,"token":{"id":2,"text":"</s>","logprob":-0.2,"special":true},"generated_text":"Hello world","details":{"finish_reason":"eos_token","generated_tokens":5,"seed":null,"input_length":7}}"#,
    );
    assert_eq!(
        last,
        last_event(usage(Some(7), Some(5))),
        "special EOS: not a token event; details give usage; generated_text ends"
    );
}

#[test]
fn errors_and_garbage() {
    let error =
        summary(r#"{"error":"Request failed during generation","error_type":"generation"}"#);
    assert!(error.error && !error.token, "error field: {error:?}");
    for data in [
        "",
        "[DONE]",
        r#"{"token":null}"#,
        r#"{"token":{"special":true}}"#,
    ] {
        assert!(!summary(data).token, "{data:?} is not a token event");
    }
}
