//! The skimming classifiers against the definition: for OpenAI chat / completions, Anthropic
//! Messages and OpenAI Responses, whatever `classify_fast` answers equals what the serde walk
//! (`classify_parsed`) answers, and `classify` (fast path, then the walk) always equals the walk.
//! Checked on every event of every fixture of every dialect (each classifier on every fixture),
//! on hand-picked adversarial payloads, and on random JSON written with random whitespace and
//! escapes: event-shaped objects, arbitrary values, and both with bytes mutated.
//!
//! The fast paths must also be *used*: the token events of the fixtures and a list of real
//! servers' chunk shapes must be answered by them, so this test cannot pass by a fast path
//! declining everything. (TGI, Triton, Ollama and llama.cpp's native API keep the serde walk.)

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::TestRng;
use tokenmeter::dialect::{anthropic, openai, responses, EventSummary};
use tokenmeter::sse::{Framer, StreamFormat};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// A dialect's three entry points, as `(event, data)` functions.
struct Classifier {
    name: &'static str,
    fast: fn(&[u8], &[u8]) -> Option<EventSummary>,
    parsed: fn(&[u8], &[u8]) -> EventSummary,
    classify: fn(&[u8], &[u8]) -> EventSummary,
}

const OPENAI: Classifier = Classifier {
    name: "openai",
    fast: |_, data| openai::classify_fast(data),
    parsed: |_, data| openai::classify_parsed(data),
    classify: |_, data| openai::classify(data),
};

const ANTHROPIC: Classifier = Classifier {
    name: "anthropic",
    fast: anthropic::classify_fast,
    parsed: anthropic::classify_parsed,
    classify: anthropic::classify,
};

const RESPONSES: Classifier = Classifier {
    name: "responses",
    fast: responses::classify_fast,
    parsed: responses::classify_parsed,
    classify: responses::classify,
};

const ALL: [&Classifier; 3] = [&OPENAI, &ANTHROPIC, &RESPONSES];

/// The differential check; `true` when the fast path answered.
fn agrees(c: &Classifier, event: &[u8], data: &[u8]) -> Result<bool, TestCaseError> {
    let parsed = (c.parsed)(event, data);
    let fast = (c.fast)(event, data);
    if let Some(fast) = fast {
        prop_assert_eq!(
            fast,
            parsed,
            "{} fast path differs on event {:?} data {:?}",
            c.name,
            String::from_utf8_lossy(event),
            String::from_utf8_lossy(data)
        );
    }
    prop_assert_eq!((c.classify)(event, data), parsed);
    Ok(fast.is_some())
}

fn check(c: &Classifier, event: &[u8], data: &[u8]) -> bool {
    match agrees(c, event, data) {
        Ok(fast) => fast,
        Err(failure) => panic!("{failure}"),
    }
}

fn fixture_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the fixtures directory is readable") {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            fixture_files(&path, out);
        } else if path
            .extension()
            .is_some_and(|ext| ext == "sse" || ext == "ndjson")
        {
            out.push(path);
        }
    }
}

/// Every event (`event:` name, data) of a fixture, framed by the proxy's own framer.
fn events(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let format = if path.extension().is_some_and(|ext| ext == "ndjson") {
        StreamFormat::NdJson
    } else {
        StreamFormat::Sse
    };
    let bytes = std::fs::read(path).expect("a readable fixture");
    let mut framer = Framer::new(format, 1 << 20);
    let mut out = Vec::new();
    framer.feed(&bytes, |event| {
        out.push((event.event.to_vec(), event.data.to_vec()))
    });
    out
}

#[test]
fn every_fixture_event_of_every_dialect_agrees() {
    let mut files = Vec::new();
    fixture_files(Path::new(FIXTURES), &mut files);
    files.sort();
    assert!(files.len() >= 20, "fixtures found: {files:?}");
    let mut total = 0;
    let mut fast = [0usize; 3];
    for file in &files {
        let path = file.to_string_lossy();
        let own = if path.contains("/openai/") || path.contains("llamacpp-chat") {
            Some(0)
        } else if path.contains("anthropic") {
            Some(1)
        } else if path.contains("responses") {
            Some(2)
        } else {
            None
        };
        for (event, data) in events(file) {
            total += 1;
            let text = String::from_utf8_lossy(&data).into_owned();
            for (i, classifier) in ALL.iter().enumerate() {
                let answered = check(classifier, &event, &data);
                fast[i] += usize::from(answered);
                // A stream's token events are its own fast path's to answer (usage objects, llama.cpp
                // timings and lifecycle events may go to the walk).
                if own == Some(i) && (classifier.parsed)(&event, &data).token {
                    assert!(
                        answered,
                        "{}: the {} fast path declined {text}",
                        file.display(),
                        classifier.name
                    );
                }
            }
        }
    }
    assert!(total > 150, "events checked: {total}");
    for (i, classifier) in ALL.iter().enumerate() {
        assert!(
            fast[i] > 0,
            "the {} fast path answered nothing",
            classifier.name
        );
    }
}

/// Chunk shapes as real servers send them; each must be answered by the fast path.
const ORDINARY: &[&str] = &[
    // vLLM
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}"#,
    // OpenAI, with `usage: null` on every chunk and an obfuscation member
    r#"{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"aB3"}"#,
    // SGLang (pretty spacing), reasoning and tool calls
    r#"{ "id": "x", "choices": [ { "index": 0, "delta": { "reasoning_content": "Let me think" } } ] }"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"city\": \"Paris\"}"}}]}}]}"#,
    // completions, unicode, escapes
    r#"{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"日本語 🦀","logprobs":null,"finish_reason":null}]}"#,
    r#"{"choices":[{"delta":{"content":"line\nbreak \"quoted\" \u00e9 \\ /"}}]}"#,
    // vLLM's `continuous_usage_stats` (usage on every chunk) and the usage-only last chunk
    r#"{"id":"c","choices":[{"index":0,"delta":{"content":"The"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":30,"total_tokens":31,"completion_tokens":1}}"#,
    r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":30,"total_tokens":94,"completion_tokens":64,"prompt_tokens_details":{"cached_tokens":16}}}"#,
    // llama.cpp's ordinary chunk and an error event after a 200
    r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" the"}}],"created":1,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}"#,
    r#"{"error":{"message":"engine died","type":"internal_error","code":500}}"#,
    "[DONE]",
];

/// Anthropic and Responses token events as the APIs send them: `(event, data)`.
const TYPED: &[(&Classifier, &str, &str)] = &[
    (
        &ANTHROPIC,
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
    ),
    (
        &ANTHROPIC,
        "content_block_delta",
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"loc"}}"#,
    ),
    (
        &ANTHROPIC,
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#,
    ),
    (&ANTHROPIC, "ping", r#"{"type": "ping"}"#),
    (&ANTHROPIC, "message_stop", r#"{"type":"message_stop"}"#),
    (
        &RESPONSES,
        "response.output_text.delta",
        r#"{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" world","logprobs":[]}"#,
    ),
    (
        &RESPONSES,
        "response.function_call_arguments.delta",
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\"a\""}"#,
    ),
];

#[test]
fn ordinary_chunks_of_real_servers_take_the_fast_path() {
    for chunk in ORDINARY {
        assert!(check(&OPENAI, b"", chunk.as_bytes()), "declined: {chunk}");
    }
    for (classifier, event, data) in TYPED {
        assert!(
            check(classifier, event.as_bytes(), data.as_bytes()),
            "declined: {data}"
        );
    }
}

#[test]
fn adversarial_payloads_agree() {
    let deep = format!(
        r#"{{"choices":[{{"delta":{{"content":"x","z":{}1{}}}}}]}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let cases: Vec<Vec<u8>> = [
        r#"{"choices":[{"delta":{"content":"x"}}]}garbage"#,
        r#"{"choices":[{"delta":{"content":"x"}}],}"#,
        r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud83e\udd80"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\x"}}]}"#,
        "{\"choices\":[{\"delta\":{\"content\":\"tab\there\"}}]}",
        r#"{"\u0063hoices":[{"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"delta":{"\u0063ontent":"x"}}]}"#,
        r#"{"id":"\"content\":\"x\"","choices":[{"delta":{"content":""}}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"choices":[]}"#,
        r#"{"choices":[],"choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"choices":null,"choices":[{"text":"x"}]}"#,
        // Each below would show a token if the rest were read: an error must void it.
        r#"{"choices":[{"delta":"content","text":"x"}]}"#,
        r#"{"choices":[{"delta":1e400,"text":"x"}]}"#,
        r#"{"choices":[{"text":"x"}],"choices":1e999}"#,
        r#"{"choices":[-1e999,{"text":"x"}]}"#,
        r#"{"choices":[1,{"text":"x"}]}"#,
        r#"{"choices":[{"text":"x","index":01}]}"#,
        r#"{"choices":[{"text":"x","index":-}]}"#,
        r#"{"choices":[{"text":"x","index":1.}]}"#,
        r#"{"choices":[{"text":"x","index":1e}]}"#,
        r#"{"choices":[{"text":"x","logprobs":nul}]}"#,
        r#"{"choices":[{"text":"x","logprobs":[1,]}]}"#,
        r#"{"choices":[{"text":"x","logprobs":{"a":1,}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[ ]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":{}}}]}"#,
        r#"{"choices":[{"finish_reason":false}]}"#,
        r#"{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#,
        // Counts the walk reads as floats (with its own range checks) or not at all.
        r#"{"choices":[],"usage":{"prompt_tokens":1e400,"completion_tokens":3}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":-1e400,"completion_tokens":3}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":-3,"completion_tokens":3}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3.0,"completion_tokens":3}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551616,"completion_tokens":3},"choices":[]}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551615},"choices":[]}"#,
        r#"{"usage":{"prompt_tokens":"3","completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}},"choices":[]}"#,
        r#"{"usage":{"prompt_tokens":3,"prompt_tokens_details":7},"choices":[]}"#,
        r#"{"usage":{"prompt_tokens":3,"prompt_tokens_details":1e400},"choices":[]}"#,
        r#"{"usage":{"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1e400}},"choices":[]}"#,
        r#"{"usage":{"completion_tokens":03},"choices":[]}"#,
        r#"{"usage":{"completion_tokens":3,"completion_tokens":null},"choices":[]}"#,
        r#"{"usage":{"prompt_tokens":[1],"completion_tokens":{}},"choices":[]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":"3"}}"#,
        r#"{"choices":[],"usage":null,"usage":{"completion_tokens":5}}"#,
        r#"{"error":null}"#,
        r#"{"error":null,"error":0}"#,
        r#"[{"choices":[{"text":"x"}]}]"#,
        r#""just a string""#,
        "\u{feff}{\"choices\":[{\"text\":\"x\"}]}",
        " \t\r\n{\"choices\":[{\"text\":\"x\"}]} \n",
        "[DONE] ",
        "",
        "{",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([
        deep.into_bytes(),
        b"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}".to_vec(),
        b"{\"id\":\"\xc3\",\"choices\":[{\"text\":\"x\"}]}".to_vec(),
        b"{\"choices\":[{\"text\":\"\xe2\x82\xac\"}]}".to_vec(),
        // Found by `mutated_events_agree`: a non-UTF-8 byte in a word of a string that ends
        // within the last eight bytes of the event.
        b"{\"r\xffsponse\":\t[\t]}".to_vec(),
        b"{\"choices\":[],\"r\xc3sponse\":1}".to_vec(),
    ])
    .collect();
    let typed: Vec<&[u8]> = vec![
        br#"{"type":"content_block_delta","delta":{"text":"x"}} x"#,
        br#"{"type":"content_block_delta","delta":"text"}"#,
        br#"{"type":"content_block_delta","delta":1e400}"#,
        br#"{"type":"content_block_delta","delta":{"text":"x"},"delta":null}"#,
        br#"{"type":"content_block_delta","delta":{"text":"x"},"type":1}"#,
        br#"{"type":"content_block\u005fdelta","delta":{"text":"x"}}"#,
        br#"{"type":"content_block_delta","delta":{"text":"x","index":01}}"#,
        br#"{"type":"message_delta","usage":{"output_tokens":5},"delta":{"stop_reason":"end_turn"}}"#,
        br#"{"type":"message_start","message":{"usage":{"input_tokens":3}}}"#,
        br#"{"type":"message_start","message":null}"#,
        br#"{"delta":{"text":"x"}}"#,
        br#"{"type":"response.output_text.delta","delta":""}"#,
        br#"{"type":"response.output_text.delta","delta":["x"]}"#,
        br#"{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":5}}}"#,
        br#"{"type":"response.created","response":null}"#,
        br#"{"type":"response.failed"}"#,
        br#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        br#"{"delta":"x"}"#,
    ];
    let events: [&[u8]; 4] = [
        b"",
        b"content_block_delta",
        b"response.output_text.delta",
        b"error",
    ];
    for classifier in ALL {
        for case in cases.iter().map(Vec::as_slice).chain(typed.iter().copied()) {
            for event in events {
                check(classifier, event, case);
            }
        }
    }
}

/// A JSON value with everything a writer may vary kept explicit: numbers as text (so `1e400`
/// and `-0` appear), objects as member lists (so keys repeat).
#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

const NAMES: &[&str] = &[
    "type",
    "message",
    "response",
    "partial_json",
    "thinking",
    "input_tokens",
    "output_tokens",
    "choices",
    "delta",
    "content",
    "text",
    "finish_reason",
    "tool_calls",
    "reasoning",
    "reasoning_content",
    "usage",
    "timings",
    "error",
    "index",
    "role",
    "logprobs",
    "id",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "cache_n",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(NAMES).prop_map(str::to_owned),
        1 => "[a-z_]{0,12}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop::sample::select(NAMES).prop_map(|n| format!("\"{n}\":\"x\"")),
        "[ -~]{0,24}",
        "[\\x00-\\x1f\"\\\\/]{1,4}",
        "[é日本語🦀\u{2028}\u{ffff}a]{1,6}",
    ]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        prop::sample::select(&[
            "0",
            "-0",
            "1e400",
            "-1E-400",
            "0.5e+3",
            "18446744073709551616",
            "12.0",
        ])
        .prop_map(str::to_owned),
    ]
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        number().prop_map(Json::Number),
        text().prop_map(Json::Str),
    ];
    leaf.prop_recursive(5, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((name(), inner), 0..5).prop_map(Json::Object),
        ]
    })
}

/// An OpenAI chunk of random shape: the members the classifier reads, in any order, with values
/// of the expected type most of the time and of any type otherwise, among random members.
fn chunk() -> impl Strategy<Value = Json> {
    let string_or_any = prop_oneof![3 => text().prop_map(Json::Str), 1 => json()];
    let delta = prop::collection::vec(
        (
            prop::sample::select(&["content", "reasoning", "reasoning_content", "role", "x"])
                .prop_map(str::to_owned),
            string_or_any.clone(),
        ),
        0..4,
    )
    .prop_map(Json::Object);
    let tool_calls = prop::collection::vec(json(), 0..2).prop_map(Json::Array);
    let choice = prop::collection::vec(
        prop_oneof![
            delta.prop_map(|d| ("delta".to_owned(), d)),
            tool_calls.prop_map(|t| {
                (
                    "delta".to_owned(),
                    Json::Object(vec![("tool_calls".to_owned(), t)]),
                )
            }),
            string_or_any.clone().prop_map(|t| ("text".to_owned(), t)),
            prop_oneof![Just(Json::Null), text().prop_map(Json::Str), json()]
                .prop_map(|f| ("finish_reason".to_owned(), f)),
            (name(), json()),
        ],
        0..5,
    )
    .prop_map(Json::Object);
    let choices = prop_oneof![
        4 => prop::collection::vec(choice, 0..3).prop_map(Json::Array),
        1 => json(),
    ];
    prop::collection::vec(
        prop_oneof![
            3 => choices.prop_map(|c| ("choices".to_owned(), c)),
            1 => prop_oneof![Just(Json::Null), json()].prop_map(|u| ("usage".to_owned(), u)),
            1 => prop_oneof![Just(Json::Null), json()].prop_map(|e| ("error".to_owned(), e)),
            2 => (name(), json()),
        ],
        0..6,
    )
    .prop_map(Json::Object)
}

/// Event types of Anthropic and Responses streams (and some of neither).
const TYPES: &[&str] = &[
    "content_block_delta",
    "content_block_start",
    "message_start",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.created",
    "",
];

fn event_type() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(TYPES).prop_map(str::to_owned),
        1 => "[a-z_.]{0,16}",
    ]
}

/// An Anthropic or Responses event of random shape: `type`, a `delta` object or string, the
/// objects the walk reads for usage, in any order, among random members.
fn typed() -> impl Strategy<Value = Json> {
    let delta_object = prop::collection::vec(
        (
            prop::sample::select(&["text", "thinking", "partial_json", "type", "x"])
                .prop_map(str::to_owned),
            prop_oneof![3 => text().prop_map(Json::Str), 1 => json()],
        ),
        0..3,
    )
    .prop_map(Json::Object);
    let delta = prop_oneof![
        2 => delta_object,
        2 => text().prop_map(Json::Str),
        1 => json(),
    ];
    let nullable = || prop_oneof![Just(Json::Null), json()];
    prop::collection::vec(
        prop_oneof![
            3 => prop_oneof![4 => event_type().prop_map(Json::Str), 1 => json()]
                .prop_map(|t| ("type".to_owned(), t)),
            3 => delta.prop_map(|d| ("delta".to_owned(), d)),
            1 => nullable().prop_map(|u| ("usage".to_owned(), u)),
            1 => nullable().prop_map(|m| ("message".to_owned(), m)),
            1 => nullable().prop_map(|r| ("response".to_owned(), r)),
            2 => (name(), json()),
        ],
        0..5,
    )
    .prop_map(Json::Object)
}

/// Writes `value` as JSON, varying what JSON lets a writer vary: whitespace between tokens and
/// how each character of a string or key is spelled (raw, short escape, `\u` escape, surrogate
/// pair). Characters JSON forbids raw are always escaped, so the output is valid JSON.
fn write(value: &Json, rng: &mut TestRng, out: &mut String) {
    space(rng, out);
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(n),
        Json::Str(s) => string(s, rng, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, rng, out);
            }
            space(rng, out);
            out.push(']');
        }
        Json::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(rng, out);
                string(key, rng, out);
                space(rng, out);
                out.push(':');
                write(item, rng, out);
            }
            space(rng, out);
            out.push('}');
        }
    }
    space(rng, out);
}

fn space(rng: &mut TestRng, out: &mut String) {
    if rng.random_ratio(1, 6) {
        out.push([' ', '\n', '\t', '\r'][rng.random_range(0..4)]);
    }
}

fn string(s: &str, rng: &mut TestRng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let must = c == '"' || c == '\\' || c < ' ';
        if !must && !rng.random_ratio(1, 8) {
            out.push(c);
            continue;
        }
        match (c, rng.random_range(0..2)) {
            ('"', 0) => out.push_str("\\\""),
            ('\\', 0) => out.push_str("\\\\"),
            ('\n', 0) => out.push_str("\\n"),
            ('/', 0) => out.push_str("\\/"),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

fn written(value: &Json, seed: u64) -> Vec<u8> {
    let mut rng = TestRng::from_seed(
        proptest::test_runner::RngAlgorithm::ChaCha,
        &[seed.to_le_bytes(), [7; 8], [3; 8], [1; 8]].concat(),
    );
    let mut out = String::new();
    write(value, &mut rng, &mut out);
    out.into_bytes()
}

/// A byte-level mutation: replace, insert or delete one byte, or truncate.
fn mutate(mut bytes: Vec<u8>, at: usize, byte: u8, how: u8) -> Vec<u8> {
    if bytes.is_empty() {
        return vec![byte];
    }
    let at = at % bytes.len();
    match how % 4 {
        0 => bytes[at] = byte,
        1 => bytes.insert(at, byte),
        2 => {
            bytes.remove(at);
        }
        _ => bytes.truncate(at),
    }
    bytes
}

/// Bytes a mutation is likely to make interesting.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        prop::sample::select(b"{}[],:\"\\ 0-e.nul\x00\x1f\x7f\xc3\xff".to_vec()),
        any::<u8>(),
    ]
}

/// Every classifier on the same bytes, with an SSE event name.
fn all_agree(event: &str, data: &[u8]) -> Result<(), TestCaseError> {
    for classifier in ALL {
        agrees(classifier, event.as_bytes(), data)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_chunks_agree(value in chunk(), seed in any::<u64>()) {
        all_agree("", &written(&value, seed))?;
    }

    #[test]
    fn random_typed_events_agree(value in typed(), seed in any::<u64>(), event in event_type()) {
        all_agree(&event, &written(&value, seed))?;
    }

    #[test]
    fn random_json_agrees(value in json(), seed in any::<u64>(), event in event_type()) {
        all_agree(&event, &written(&value, seed))?;
    }

    #[test]
    fn mutated_events_agree(
        value in prop_oneof![chunk(), typed()],
        seed in any::<u64>(),
        at in any::<usize>(),
        byte in byte(),
        how in any::<u8>(),
        event in event_type(),
    ) {
        all_agree(&event, &mutate(written(&value, seed), at, byte, how))?;
    }
}
