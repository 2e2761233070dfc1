use super::{classify, EventSummary, Usage};
use crate::dialect::tests::usage;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/openai");

/// Test-only event splitter: enough SSE for the fixtures (the real scanner lives in `sse`).
/// Normalises CRLF / CR, splits on blank lines, drops comments, strips `data:` and one space.
fn event_data(stream: &str) -> Vec<String> {
    let text = stream.replace("\r\n", "\n").replace('\r', "\n");
    text.split("\n\n")
        .filter_map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter(|line| !line.starts_with(':'))
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|value| value.strip_prefix(' ').unwrap_or(value))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

fn summary(json: &str) -> EventSummary {
    classify(json.as_bytes())
}

fn token_only() -> EventSummary {
    EventSummary {
        token: true,
        ..EventSummary::default()
    }
}

/// A chunk where a choice ends without output.
fn finish_only() -> EventSummary {
    EventSummary {
        finish: true,
        ..EventSummary::default()
    }
}

/// Totals over one fixture stream, in the shape of `NAME.expected.json`.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    token_events: u64,
    usage_only_chunks: u64,
    error_events: u64,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

fn expected_count(expected: &serde_json::Value, field: &str) -> u64 {
    expected.get(field).and_then(|v| v.as_u64()).unwrap_or(0)
}

#[test]
fn splitter_handles_crlf_comments_and_no_space() {
    let events = event_data(": ping\r\n\r\ndata:{\"a\":1}\r\n\r\ndata: x\ndata: y\n\n");
    assert_eq!(
        events,
        vec!["{\"a\":1}".to_owned(), "x\ny".to_owned()],
        "comments dropped, CRLF handled, multi-line data joined"
    );
}

#[test]
fn every_fixture_matches_its_expected_totals() {
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(FIXTURES)
        .expect("fixtures directory exists beside the crate")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sse"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.display().to_string();
        let stream = std::fs::read_to_string(&path).expect("fixture is UTF-8");
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(path.with_extension("expected.json"))
                .expect("every fixture has an expected.json"),
        )
        .expect("expected.json parses");

        let mut totals = Totals::default();
        let mut done_events = 0;
        let events = event_data(&stream);
        for data in &events {
            let event = classify(data.as_bytes());
            totals.token_events += u64::from(event.token);
            totals.usage_only_chunks += u64::from(event.usage_only);
            totals.error_events += u64::from(event.error);
            done_events += u64::from(event.done);
            if let Some(usage) = event.usage {
                totals.prompt_tokens = usage.prompt_tokens;
                totals.completion_tokens = usage.completion_tokens;
            }
        }
        let want = Totals {
            token_events: expected_count(&expected, "token_events"),
            usage_only_chunks: expected_count(&expected, "usage_only_chunks"),
            error_events: expected_count(&expected, "error_events"),
            prompt_tokens: expected.get("prompt_tokens").and_then(|v| v.as_u64()),
            completion_tokens: expected.get("completion_tokens").and_then(|v| v.as_u64()),
        };
        assert_eq!(totals, want, "{name}: totals differ from expected.json");
        assert_eq!(done_events, 1, "{name}: exactly one [DONE] event");
        assert!(
            events
                .last()
                .is_some_and(|last| classify(last.as_bytes()).done),
            "{name}: [DONE] is the last event"
        );
        checked += 1;
    }
    assert!(checked >= 10, "all ten fixtures were found, got {checked}");
}

#[test]
fn role_chunk_is_not_a_token() {
    let data = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
    assert_eq!(summary(data), EventSummary::default(), "role-only chunk");
}

#[test]
fn content_chunk_is_a_token() {
    let data = r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
    assert_eq!(summary(data), token_only(), "content chunk");
}

#[test]
fn escaped_content_counts_as_non_empty() {
    for content in [r#""\n""#, r#""\u0000""#, r#""\"""#, r#""é""#] {
        let data = format!(r#"{{"choices":[{{"delta":{{"content":{content}}}}}]}}"#);
        assert_eq!(summary(&data), token_only(), "content {content} is output");
    }
}

#[test]
fn null_or_non_string_content_is_not_a_token() {
    for content in ["null", "0", "true", "[]", "{}", r#"["x"]"#] {
        let data = format!(r#"{{"choices":[{{"delta":{{"content":{content}}}}}]}}"#);
        assert_eq!(summary(&data), EventSummary::default(), "content {content}");
    }
}

#[test]
fn reasoning_fields_are_tokens() {
    for field in ["reasoning", "reasoning_content"] {
        let data = format!(r#"{{"choices":[{{"delta":{{"{field}":"Let","content":null}}}}]}}"#);
        assert_eq!(summary(&data), token_only(), "{field} is output");
    }
}

#[test]
fn tool_calls_count_only_when_non_empty() {
    let empty = [r#"[]"#, "[ \n ]", "null", r#""x""#];
    for calls in empty {
        let data = format!(r#"{{"choices":[{{"delta":{{"tool_calls":{calls}}}}}]}}"#);
        assert_eq!(
            summary(&data),
            EventSummary::default(),
            "tool_calls {calls}"
        );
    }
    for calls in [
        r#"[{"index":0}]"#,
        "[ []]",
        r#"[{"function":{"arguments":""}}]"#,
    ] {
        let data = format!(r#"{{"choices":[{{"delta":{{"tool_calls":{calls}}}}}]}}"#);
        assert_eq!(summary(&data), token_only(), "tool_calls {calls}");
    }
}

#[test]
fn final_empty_delta_is_not_a_token() {
    let data = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    assert_eq!(
        summary(data),
        finish_only(),
        "empty delta, the choice finishes"
    );
    let open = r#"{"choices":[{"index":0,"delta":{},"finish_reason":null}]}"#;
    assert_eq!(summary(open), EventSummary::default(), "finish_reason null");
}

#[test]
fn completions_text_is_a_token_and_empty_text_is_not() {
    let text = r#"{"object":"text_completion","choices":[{"index":0,"text":" Once"}]}"#;
    assert_eq!(summary(text), token_only(), "non-empty text");
    let empty = r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#;
    assert_eq!(
        summary(empty),
        finish_only(),
        "empty text, the choice finishes"
    );
}

#[test]
fn any_of_several_choices_makes_a_token() {
    let data = r#"{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{"content":"b"}}]}"#;
    assert_eq!(summary(data), token_only(), "n=2, second choice has output");
    let none = r#"{"choices":[{"index":0,"delta":{"content":""}},{"index":1,"delta":{}}]}"#;
    assert_eq!(summary(none), EventSummary::default(), "n=2, no output");
}

#[test]
fn usage_only_chunk() {
    let data =
        r#"{"choices":[],"usage":{"prompt_tokens":12,"total_tokens":19,"completion_tokens":7}}"#;
    let want = EventSummary {
        usage: usage(Some(12), Some(7)),
        usage_only: true,
        ..EventSummary::default()
    };
    assert_eq!(summary(data), want, "usage-only chunk");
}

#[test]
fn usage_on_a_token_chunk_is_not_usage_only() {
    let data = r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
    let want = EventSummary {
        token: true,
        usage: usage(Some(3), Some(1)),
        ..EventSummary::default()
    };
    assert_eq!(summary(data), want, "continuous usage on a token chunk");
}

#[test]
fn usage_null_is_no_usage() {
    let data = r#"{"choices":[{"delta":{"content":"Hi"}}],"usage":null}"#;
    assert_eq!(summary(data), token_only(), "usage: null");
    let empty = r#"{"choices":[],"usage":null}"#;
    assert_eq!(
        summary(empty),
        EventSummary::default(),
        "empty choices, usage null"
    );
}

#[test]
fn numbers_as_strings_are_not_usage() {
    let data = r#"{"choices":[],"usage":{"prompt_tokens":"12","completion_tokens":"7"}}"#;
    assert_eq!(summary(data), EventSummary::default(), "string counts");
    let partial = r#"{"choices":[],"usage":{"prompt_tokens":"12","completion_tokens":7}}"#;
    let want = EventSummary {
        usage: usage(None, Some(7)),
        usage_only: true,
        ..EventSummary::default()
    };
    assert_eq!(summary(partial), want, "the readable count is kept");
}

#[test]
fn out_of_range_counts_are_dropped() {
    let max = r#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}}"#;
    assert_eq!(
        summary(max).usage,
        usage(Some(u64::MAX), Some(1)),
        "u64::MAX is representable"
    );
    let cases = [
        "18446744073709551616",
        "-1",
        "1.5",
        "99999999999999999999999999999999",
    ];
    for count in cases {
        let data = format!(r#"{{"usage":{{"prompt_tokens":{count},"completion_tokens":2}}}}"#);
        assert_eq!(summary(&data).usage, usage(None, Some(2)), "count {count}");
    }
    // serde_json refuses numbers that overflow f64, so the whole event is unreadable.
    let infinite = r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1e400}}"#;
    assert_eq!(
        summary(infinite),
        EventSummary::default(),
        "1e400 is a parse error"
    );
}

#[test]
fn error_member_marks_an_error_event() {
    let data = r#"{"error":{"object":"error","message":"engine died","code":500}}"#;
    let want = EventSummary {
        error: true,
        ..EventSummary::default()
    };
    assert_eq!(summary(data), want, "error object");
    assert_eq!(summary(r#"{"error":"boom"}"#), want, "error string");
    assert_eq!(
        summary(r#"{"choices":[{"delta":{"content":"a"}}],"error":null}"#),
        token_only(),
        "error: null is no error"
    );
}

#[test]
fn done_with_whitespace() {
    let done = EventSummary {
        done: true,
        ..EventSummary::default()
    };
    for data in ["[DONE]", " [DONE]", "[DONE]\r\n", "\t[DONE] "] {
        assert_eq!(classify(data.as_bytes()), done, "{data:?} is done");
    }
    for data in ["[done]", "[DONE", "\"[DONE]\"", "[DONE]x"] {
        assert_eq!(
            classify(data.as_bytes()),
            EventSummary::default(),
            "{data:?} is not done"
        );
    }
}

#[test]
fn malformed_or_non_object_input_is_default() {
    let cases: [&[u8]; 14] = [
        b"",
        b"{",
        b"{\"choices\":[{\"delta\":{\"content\":\"x\"}}]",
        b"{\"choices\":[{\"delta\":{\"content\":\"x\"}}]} trailing",
        b"null",
        b"42",
        b"\"text\"",
        b"[{\"delta\":{\"content\":\"x\"}}]",
        b"\xff\xfe",
        b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}",
        b"{\"choices\":[{\"delta\":{\"content\":\"\\ud800\"}}]}x",
        b"{\"choices\":NaN}",
        b"{'choices':[]}",
        b"{\"choices\":[],}",
    ];
    for data in cases {
        assert_eq!(
            classify(data),
            EventSummary::default(),
            "{:?} classifies as nothing",
            String::from_utf8_lossy(data)
        );
    }
}

#[test]
fn wrong_types_below_the_top_do_not_hide_tokens() {
    let data =
        r#"{"choices":[{"delta":{"content":"x"}},7,null],"usage":{"completion_tokens":"1"}}"#;
    assert_eq!(summary(data), token_only(), "odd siblings ignored");
    let not_array = r#"{"choices":{"delta":{"content":"x"}},"usage":{"completion_tokens":1}}"#;
    let want = EventSummary {
        usage: usage(None, Some(1)),
        ..EventSummary::default()
    };
    assert_eq!(summary(not_array), want, "choices as object is no choices");
}

#[test]
fn escaped_keys_are_matched() {
    let data = r#"{"\u0063hoices":[{"delta":{"cont\u0065nt":"x"}}]}"#;
    assert_eq!(
        summary(data),
        token_only(),
        "escaped keys decode to the real names"
    );
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let open = "[".repeat(100_000);
    let close = "]".repeat(100_000);
    let skipped = format!(r#"{{"choices":[{{"delta":{{"content":"x","extra":{open}{close}}}}}]}}"#);
    assert_eq!(
        summary(&skipped),
        token_only(),
        "skipped values are ignored iteratively, at any depth"
    );
    let walked = format!(r#"{{"choices":[{open}{close}]}}"#);
    assert_eq!(
        summary(&walked),
        EventSummary::default(),
        "a nested array where a choice belongs is no choice"
    );
    let unbalanced = format!(r#"{{"choices":{open}}}"#);
    assert_eq!(
        summary(&unbalanced),
        EventSummary::default(),
        "unterminated nesting"
    );
}

proptest::proptest! {
    #[test]
    fn classify_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        let _ = classify(&bytes);
    }

    #[test]
    fn content_token_iff_non_empty(content in ".{0,12}") {
        let data = serde_json::json!({"choices": [{"delta": {"content": content}}]}).to_string();
        proptest::prop_assert_eq!(
            classify(data.as_bytes()).token,
            !content.is_empty(),
            "content {:?}", content
        );
    }
}

/// A non-streaming `chat.completion` as the public API documents it.
const CHAT_BODY: &str = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}"#;

#[test]
fn body_usage_reads_whole_chat_and_completions_answers() {
    use super::body_usage;
    assert_eq!(
        body_usage(CHAT_BODY.as_bytes()),
        Some(Usage {
            prompt_tokens: Some(1117),
            completion_tokens: Some(46),
            cached_tokens: Some(0),
            prefill_micros: None
        }),
        "chat.completion: top-level usage, prompt_tokens_details.cached_tokens"
    );
    let completion = r#"{"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7","object":"text_completion","created":1589478378,"model":"gpt-3.5-turbo-instruct","usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12},"choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,"finish_reason":"length"}]}"#;
    assert_eq!(
        body_usage(completion.as_bytes()),
        usage(Some(5), Some(7)),
        "text_completion, usage before the choices"
    );
}

#[test]
fn body_usage_without_usage_or_json_is_nothing() {
    use super::body_usage;
    let without = CHAT_BODY.replace(r#""usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"#, "");
    assert!(!without.contains("usage"), "fixture edit applied");
    assert_eq!(body_usage(without.as_bytes()), None, "no usage member");
    let nested = r#"{"choices":[{"message":{"content":"x"},"usage":{"prompt_tokens":3,"completion_tokens":4}}]}"#;
    assert_eq!(
        body_usage(nested.as_bytes()),
        None,
        "only the top-level usage counts"
    );
    for body in [
        "",
        "{",
        &CHAT_BODY[..CHAT_BODY.len() - 1],
        r#"{"usage":null}"#,
        r#"{"usage":{"prompt_tokens":"11","completion_tokens":-7}}"#,
        r#"[{"usage":{"prompt_tokens":11}}]"#,
        r#"{"usage":{"prompt_tokens":11}} trailing"#,
        "\u{0}\u{ff}garbage",
    ] {
        assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
    }
}

#[test]
fn bytes_that_are_not_utf8_in_a_skipped_string_do_not_hide_the_token() {
    // Valid UTF-8 goes through serde_json's str reader, anything else through its byte reader
    // (walk::parse); both must classify the same, and the byte reader skips strings unchecked.
    let valid = br#"{"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}"#;
    let mut invalid = valid.to_vec();
    invalid[7] = 0xff; // inside the skipped "id" value
    assert!(
        std::str::from_utf8(&invalid).is_err(),
        "fixture is not UTF-8"
    );
    for data in [&valid[..], &invalid[..]] {
        assert!(
            classify(data).token,
            "a content delta is a token: {:?}",
            String::from_utf8_lossy(data)
        );
    }
}

#[test]
fn cached_prompt_tokens_from_usage_details_or_llama_cpp_timings() {
    let vllm = r#"{"choices":[],"usage":{"prompt_tokens":40,"total_tokens":45,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":32}}}"#;
    assert_eq!(
        summary(vllm).usage.and_then(|u| u.cached_tokens),
        Some(32),
        "prompt_tokens_details.cached_tokens"
    );
    let null_details = r#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":5,"prompt_tokens_details":null}}"#;
    assert_eq!(
        summary(null_details).usage.and_then(|u| u.cached_tokens),
        None,
        "details null: no cache figure, which is not zero"
    );
    // llama-server's usage chunk (include_usage): usage and timings agree; usage wins.
    let llama_usage = r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":54,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":53}},"timings":{"cache_n":53,"prompt_n":1,"predicted_n":3}}"#;
    let summary_usage = summary(llama_usage);
    assert!(summary_usage.usage_only, "still the usage-only chunk");
    assert_eq!(
        summary_usage.usage,
        Some(Usage {
            prompt_tokens: Some(54),
            completion_tokens: Some(3),
            cached_tokens: Some(53),
            prefill_micros: None
        }),
        "the usage member"
    );
    // Its finish chunk without include_usage: timings alone, read as the stream's usage.
    let llama_finish = r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"object":"chat.completion.chunk","timings":{"cache_n":53,"prompt_n":1,"prompt_ms":6.3,"predicted_n":3,"predicted_ms":12.6}}"#;
    let finish = summary(llama_finish);
    assert_eq!(
        finish.usage,
        Some(Usage {
            prompt_tokens: Some(54),
            completion_tokens: Some(3),
            cached_tokens: Some(53),
            prefill_micros: Some(6_300)
        }),
        "prompt = prompt_n + cache_n, cached = cache_n, output = predicted_n, prompt_ms"
    );
    assert!(
        !finish.usage_only && finish.finish,
        "a finish chunk, not a usage chunk"
    );
    let without_cache_figure = r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1},"timings":{"cache_n":4,"prompt_n":3}}"#;
    assert_eq!(
        summary(without_cache_figure)
            .usage
            .and_then(|u| u.cached_tokens),
        Some(4),
        "a usage without details takes cache_n from timings"
    );
}
