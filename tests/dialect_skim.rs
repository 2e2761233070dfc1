//! The skimming classifier against the definition: whatever `openai::classify_fast` answers
//! equals what the serde walk (`openai::classify_parsed`) answers, and `openai::classify` (fast
//! path, then the walk) always equals the walk. Checked on every event of every fixture of every
//! dialect, on hand-picked adversarial payloads, and on random JSON written with random
//! whitespace and escapes: chunk-shaped objects, arbitrary values, and both with bytes mutated.
//!
//! The fast path must also be *used*: the ordinary chunks of the OpenAI fixtures and a list of
//! real servers' chunk shapes must be answered by it, so this test cannot pass by the fast path
//! declining everything.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::TestRng;
use tokenmeter::dialect::openai::{classify, classify_fast, classify_parsed};
use tokenmeter::sse::{Framer, StreamFormat};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The differential check; `true` when the fast path answered.
fn agrees(data: &[u8]) -> Result<bool, TestCaseError> {
    let parsed = classify_parsed(data);
    let fast = classify_fast(data);
    if let Some(fast) = fast {
        prop_assert_eq!(
            fast,
            parsed,
            "fast path differs on {:?}",
            String::from_utf8_lossy(data)
        );
    }
    prop_assert_eq!(classify(data), parsed);
    Ok(fast.is_some())
}

fn check(data: &[u8]) -> bool {
    match agrees(data) {
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

/// Every event's data of a fixture, framed by the proxy's own framer.
fn events(path: &Path) -> Vec<Vec<u8>> {
    let format = if path.extension().is_some_and(|ext| ext == "ndjson") {
        StreamFormat::NdJson
    } else {
        StreamFormat::Sse
    };
    let bytes = std::fs::read(path).expect("a readable fixture");
    let mut framer = Framer::new(format, 1 << 20);
    let mut out = Vec::new();
    framer.feed(&bytes, |event| out.push(event.data.to_vec()));
    out
}

#[test]
fn every_fixture_event_of_every_dialect_agrees() {
    let mut files = Vec::new();
    fixture_files(Path::new(FIXTURES), &mut files);
    files.sort();
    assert!(files.len() >= 20, "fixtures found: {files:?}");
    let (mut total, mut fast) = (0, 0);
    for file in &files {
        let openai = file.to_string_lossy().contains("/openai/")
            || file.to_string_lossy().contains("llamacpp-chat");
        for data in events(file) {
            total += 1;
            let answered = check(&data);
            fast += usize::from(answered);
            // An OpenAI stream's ordinary chunk (no usage object, no llama.cpp timings, not an
            // error event) is the fast path's to answer.
            let text = String::from_utf8_lossy(&data);
            let ordinary = !text.contains("\"usage\":{")
                && !text.contains("\"usage\": {")
                && !text.contains("\"timings\"");
            if openai && ordinary {
                assert!(
                    answered,
                    "{}: the fast path declined {text}",
                    file.display()
                );
            }
        }
    }
    assert!(total > 150, "events checked: {total}");
    assert!(fast > total / 2, "fast path answered {fast} of {total}");
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
    // llama.cpp's ordinary chunk and an error event after a 200
    r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" the"}}],"created":1,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}"#,
    r#"{"error":{"message":"engine died","type":"internal_error","code":500}}"#,
    "[DONE]",
];

#[test]
fn ordinary_chunks_of_real_servers_take_the_fast_path() {
    for chunk in ORDINARY {
        assert!(check(chunk.as_bytes()), "declined: {chunk}");
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
    ])
    .collect();
    for case in &cases {
        check(case);
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_chunks_agree(value in chunk(), seed in any::<u64>()) {
        agrees(&written(&value, seed))?;
    }

    #[test]
    fn random_json_agrees(value in json(), seed in any::<u64>()) {
        agrees(&written(&value, seed))?;
    }

    #[test]
    fn mutated_chunks_agree(
        value in chunk(),
        seed in any::<u64>(),
        at in any::<usize>(),
        byte in byte(),
        how in any::<u8>(),
    ) {
        agrees(&mutate(written(&value, seed), at, byte, how))?;
    }
}
