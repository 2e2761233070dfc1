use proptest::prelude::*;
use serde_json::{json, Value};

use super::{inject_include_usage, inspect, prompt_size, Injection, PromptSize, RequestFacts};

/// Injects and returns the new body as text, failing the test on any other outcome.
fn injected(body: &str) -> String {
    match inject_include_usage(body.as_bytes()) {
        Injection::Injected(bytes) => String::from_utf8(bytes.to_vec()).expect("output is UTF-8"),
        other => panic!("expected an injection for {body:?}, got {other:?}"),
    }
}

/// The input with only `stream_options.include_usage` set to true (a missing or null
/// `stream_options` becomes an object).
fn with_usage_requested(mut input: Value) -> Value {
    let object = input.as_object_mut().expect("input is an object");
    let options = object.entry("stream_options").or_insert_with(|| json!({}));
    if options.is_null() {
        *options = json!({});
    }
    options
        .as_object_mut()
        .expect("stream_options is an object")
        .insert("include_usage".to_owned(), Value::Bool(true));
    input
}

/// The output parses, equals the input plus only the include_usage change, and differs from the
/// input by one small splice (at most `false` removed, at most the `stream_options` member
/// added), so nothing was re-serialized.
fn assert_minimal_edit(input: &str, output: &str) {
    let before: Value = serde_json::from_str(input).expect("input parses");
    let after: Value = serde_json::from_str(output).expect("injected body parses");
    assert_eq!(
        after,
        with_usage_requested(before),
        "only include_usage changed for {input:?}"
    );
    let (input, output) = (input.as_bytes(), output.as_bytes());
    let prefix = input.iter().zip(output).take_while(|(a, b)| a == b).count();
    let suffix = input[prefix..]
        .iter()
        .rev()
        .zip(output[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let removed = input.len() - prefix - suffix;
    let added = output.len() - prefix - suffix;
    assert!(
        removed <= "false".len() && added <= r#","stream_options":{"include_usage":true}"#.len(),
        "one small splice: {removed} bytes removed, {added} added at {prefix}"
    );
}

/// The exact expected output, and the semantic/minimality checks on it.
fn assert_injects(input: &str, want: &str) {
    let got = injected(input);
    assert_eq!(got, want, "exact bytes for {input:?}");
    assert_minimal_edit(input, &got);
}

#[test]
fn inserts_stream_options_after_the_last_member() {
    assert_injects(
        r#"{"model":"m","stream":true}"#,
        r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
    );
    assert_injects(
        r#"{"stream":true,"max_tokens":16}"#,
        r#"{"stream":true,"max_tokens":16,"stream_options":{"include_usage":true}}"#,
    );
}

#[test]
fn keeps_whitespace_around_the_closing_brace() {
    assert_injects(
        "{\"stream\": true }\r\n",
        "{\"stream\": true,\"stream_options\":{\"include_usage\":true} }\r\n",
    );
    assert_injects(
        " \t{\"stream\":true}\n\n",
        " \t{\"stream\":true,\"stream_options\":{\"include_usage\":true}}\n\n",
    );
}

#[test]
fn pretty_printed_body_with_unicode_escapes() {
    // The body up to its last member, which the splice follows.
    let head = concat!(
        "{\n",
        "  \"model\": \"meta-llama/Llama-3.1-8B-Instruct\",\n",
        "  \"messages\": [\n",
        "    {\"role\": \"user\", \"content\": \"h\\u00e9llo \\ud83d\\ude00 \\\"q\\\" \\n\"},\n",
        "    {\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"caf\u{e9} \u{1f600}\"}]}\n",
        "  ],\n",
        "  \"stream\": true,\n",
        "  \"temperature\": 0.70",
    );
    let input = format!("{head}\n}}\n");
    let want = format!("{head},\"stream_options\":{{\"include_usage\":true}}\n}}\n");
    assert_injects(&input, &want);
}

#[test]
fn fills_an_existing_stream_options_object() {
    assert_injects(
        r#"{"stream":true,"stream_options":{}}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
    );
    assert_injects(
        r#"{"stream":true,"stream_options":{ }}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true }}"#,
    );
    assert_injects(
        r#"{"stream_options": {"continuous_usage_stats": false}, "stream": true}"#,
        r#"{"stream_options": {"include_usage":true,"continuous_usage_stats": false}, "stream": true}"#,
    );
    assert_injects(
        "{\n  \"stream\": true,\n  \"stream_options\": {\n    \"x\": [1, {}]\n  }\n}",
        "{\n  \"stream\": true,\n  \"stream_options\": {\"include_usage\":true,\n    \"x\": [1, {}]\n  }\n}",
    );
}

#[test]
fn replaces_false_or_null_include_usage() {
    assert_injects(
        r#"{"stream":true,"stream_options":{"include_usage":false}}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
    );
    assert_injects(
        r#"{"stream":true,"stream_options":{"include_usage" : null ,"continuous_usage_stats":null}}"#,
        r#"{"stream":true,"stream_options":{"include_usage" : true ,"continuous_usage_stats":null}}"#,
    );
}

#[test]
fn replaces_null_stream_options() {
    assert_injects(
        r#"{"stream":true,"stream_options":null,"n":2}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true},"n":2}"#,
    );
}

#[test]
fn escaped_key_names_are_recognised() {
    assert_injects(
        r#"{"stre\u0061m":true,"stream\u005foptions":{"include_usage":false}}"#,
        r#"{"stre\u0061m":true,"stream\u005foptions":{"include_usage":true}}"#,
    );
}

#[test]
fn not_needed_when_not_streaming_or_already_asked() {
    let cases = [
        r#"{"model":"m"}"#,
        r#"{"stream":false,"stream_options":{"include_usage":false}}"#,
        r#"{"stream":null}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#,
        r#"{}"#,
    ];
    for body in cases {
        assert_eq!(
            inject_include_usage(body.as_bytes()),
            Injection::NotNeeded,
            "{body}"
        );
    }
}

#[test]
fn declines_what_it_cannot_edit_exactly() {
    let cases = [
        (
            r#"{"stream":true,"stream_options":{"continuous_usage_stats":true}}"#,
            "continuous_usage_stats without include_usage",
        ),
        (
            r#"{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}"#,
            "continuous_usage_stats without include_usage",
        ),
        (
            r#"{"stream":true,"stream_options":{"continuous_usage_stats":1}}"#,
            "\"continuous_usage_stats\" is not a boolean",
        ),
        (r#"{"stream":true,"stream":true}"#, "duplicate key"),
        (
            r#"{"stream":true,"stream_options":{},"stream_options":{}}"#,
            "duplicate key",
        ),
        (
            r#"{"stream":true,"stream_options":{"include_usage":false,"include_usage":false}}"#,
            "duplicate key",
        ),
        (r#"{"stream":"true"}"#, "\"stream\" is not a boolean"),
        (
            r#"{"stream":true,"stream_options":[]}"#,
            "\"stream_options\" is not an object",
        ),
        (
            r#"{"stream":true,"stream_options":{"include_usage":"no"}}"#,
            "\"include_usage\" is not a boolean",
        ),
        ("[1]", "body is not a JSON object"),
        ("", "body is not a JSON object"),
        (r#"{"stream":true"#, "body is not a JSON object"),
        (r#"{"stream":true} {}"#, "body is not a JSON object"),
        ("\u{feff}{\"stream\":true}", "body is not a JSON object"),
        (r#"{"stream":true,"x":NaN}"#, "body is not a JSON object"),
    ];
    for (body, reason) in cases {
        assert_eq!(
            inject_include_usage(body.as_bytes()),
            Injection::Declined(reason),
            "{body}"
        );
    }
}

#[test]
fn invalid_utf8_is_declined_not_a_panic() {
    assert_eq!(
        inject_include_usage(b"{\"stream\":true,\"x\":\"\xff\"}"),
        Injection::Declined("body is not a JSON object"),
        "serde_json rejects invalid UTF-8 in strings"
    );
}

#[test]
fn inspect_reads_model_stream_and_usage_request() {
    let facts =
        inspect(br#"{"model":"m\u00e9","stream":true,"stream_options":{"include_usage":true}}"#);
    assert_eq!(
        facts,
        Some(RequestFacts {
            model: Some("mé".to_owned()),
            stream: true,
            client_asked_usage: true,
            max_tokens: None,
        }),
        "all facts present, model unescaped"
    );
}

#[test]
fn the_largest_output_limit_named_is_read() {
    let cases = [
        (r#"{"max_tokens":256}"#, Some(256)),
        (
            r#"{"max_completion_tokens":64,"max_tokens":128}"#,
            Some(128),
        ),
        (r#"{"max_output_tokens":4096}"#, Some(4096)),
        (r#"{"n_predict":32}"#, Some(32)),
        (r#"{"n_predict":-1}"#, None),
        (r#"{"max_tokens":null}"#, None),
        (r#"{"max_tokens":1.5}"#, None),
        (r#"{"max_tokens":"100"}"#, None),
        (r#"{"options":{"max_tokens":100}}"#, None),
        (r#"{"max_tokens":7,"max_tokens":3}"#, Some(7)),
        (r#"{"model":"m"}"#, None),
    ];
    for (body, expected) in cases {
        assert_eq!(
            inspect(body.as_bytes()).map(|facts| facts.max_tokens),
            Some(expected),
            "{body}: the output limit a budget reserves"
        );
    }
}

#[test]
fn inspect_missing_or_odd_fields() {
    let cases = [
        (r#"{"stream":true}"#, None, true, false),
        (r#"{"model":7,"stream":true}"#, None, true, false),
        (r#"{"model":null,"stream":false}"#, None, false, false),
        (r#"{"model":"a"}"#, Some("a"), false, false),
        (r#"{"model":"a","stream":"true"}"#, Some("a"), false, false),
        (
            r#"{"stream":true,"stream_options":{"include_usage":false}}"#,
            None,
            true,
            false,
        ),
        (
            r#"{"stream":true,"stream_options":{"include_usage":"true"}}"#,
            None,
            true,
            false,
        ),
        (
            r#"{"stream":true,"stream_options":null}"#,
            None,
            true,
            false,
        ),
        (
            r#"{"model":"a","model":"b","stream":false,"stream":true}"#,
            Some("b"),
            true,
            false,
        ),
    ];
    for (body, model, stream, asked) in cases {
        assert_eq!(
            inspect(body.as_bytes()),
            Some(RequestFacts {
                model: model.map(str::to_owned),
                stream,
                client_asked_usage: asked,
                max_tokens: None,
            }),
            "{body}"
        );
    }
}

#[test]
fn inspect_rejects_non_objects() {
    for body in ["", "not json", "[]", "\"s\"", "null", "{\"model\":", "{} x"] {
        assert_eq!(inspect(body.as_bytes()), None, "{body:?}");
    }
}

#[test]
fn chat_text_and_parts_are_measured_unescaped() {
    let body = br#"{"model":"m","messages":[{"role":"system","content":"ab\"c"},{"role":"user","content":[{"type":"text","text":"hello"},{"type":"image_url","image_url":{"url":"data:xyz"}}]},{"role":"assistant","content":null,"tool_calls":[]}]}"#;
    assert_eq!(
        prompt_size(body),
        PromptSize {
            text_bytes: 4 + 5,
            token_ids: 0
        },
        "escaped quote is one byte; image parts and null content add nothing"
    );
}

#[test]
fn completions_prompts_in_every_shape() {
    let text = prompt_size(br#"{"prompt":"four","max_tokens":3}"#);
    assert_eq!(text.text_bytes, 4, "string prompt");
    let texts = prompt_size(br#"{"prompt":["ab","cde"]}"#);
    assert_eq!(texts.text_bytes, 5, "list of strings");
    let ids = prompt_size(br#"{"prompt":[1,2,3]}"#);
    assert_eq!(
        ids,
        PromptSize {
            text_bytes: 0,
            token_ids: 3
        },
        "token ids counted exactly"
    );
    let lists = prompt_size(br#"{"prompt":[[1,2],[3]]}"#);
    assert_eq!(lists.token_ids, 3, "lists of token ids");
}

#[test]
fn unparseable_bodies_count_whole() {
    let body = br#"{"messages": 5}"#;
    assert_eq!(
        prompt_size(body).text_bytes,
        body.len() as u64,
        "measured whole, never zero"
    );
}

/// Arbitrary JSON values, a few levels deep, with strings that need escaping.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        proptest::num::f64::NORMAL.prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_\"\\\\]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A `stream_options` member: absent, null, or an object that does not ask for usage.
fn stream_options() -> impl Strategy<Value = Option<Value>> {
    let flag = prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        Just(Some(json!(false)))
    ];
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        (
            proptest::collection::btree_map("[a-z]{1,6}", json_value(), 0..3),
            flag.clone(),
            flag,
        )
            .prop_map(|(extra, include, continuous)| {
                let mut options: serde_json::Map<String, Value> = extra.into_iter().collect();
                if let Some(v) = include {
                    options.insert("include_usage".to_owned(), v);
                }
                if let Some(v) = continuous {
                    options.insert("continuous_usage_stats".to_owned(), v);
                }
                Some(Value::Object(options))
            }),
    ]
}

proptest! {
    #[test]
    fn injection_changes_only_include_usage(
        fields in proptest::collection::btree_map("[a-z_]{1,10}", json_value(), 0..6),
        options in stream_options(),
        pretty in any::<bool>(),
    ) {
        let mut object: serde_json::Map<String, Value> = fields.into_iter().collect();
        object.insert("stream".to_owned(), Value::Bool(true));
        match options {
            Some(options) => object.insert("stream_options".to_owned(), options),
            None => object.remove("stream_options"),
        };
        let value = Value::Object(object);
        let input = if pretty {
            serde_json::to_string_pretty(&value)
        } else {
            serde_json::to_string(&value)
        }
        .expect("serializes");
        let output = injected(&input);
        assert_minimal_edit(&input, &output);
        let facts = inspect(output.as_bytes()).expect("output is an object");
        prop_assert!(facts.client_asked_usage, "the rewritten body asks for usage");
        prop_assert_eq!(inject_include_usage(output.as_bytes()), Injection::NotNeeded,
            "injection is idempotent");
    }

    #[test]
    fn inject_and_inspect_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = inspect(&bytes);
        let _ = inject_include_usage(&bytes);
    }
}
