use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/openai/");
const NAMES: [&str; 10] = [
    "openai-chat-crlf-usage-null",
    "vllm-chat-continuous-usage",
    "vllm-chat-error-midstream",
    "vllm-chat-multi-token-chunks",
    "vllm-chat-n2",
    "vllm-chat-no-usage",
    "vllm-chat-reasoning",
    "vllm-chat-tool-calls",
    "vllm-chat-usage",
    "vllm-completions",
];

fn events_of(pieces: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut s = EventSplitter::default();
    let mut out = Vec::new();
    for p in pieces {
        s.push(p, |e| out.push(e.to_vec()));
    }
    out
}

/// (token events, last completion_tokens, error events, saw [DONE])
fn tally(events: &[Vec<u8>]) -> (u64, Option<u64>, u64, bool) {
    let (mut tokens, mut usage, mut errors, mut done) = (0, None, 0, false);
    for e in events {
        let info = classify(e);
        usage = info.completion_tokens.or(usage);
        match info.kind {
            EventKind::Token => tokens += 1,
            EventKind::Error(_) => errors += 1,
            EventKind::Done => done = true,
            EventKind::Other => {}
            EventKind::Invalid(m) => panic!("fixture event should parse: {m}"),
        }
    }
    (tokens, usage, errors, done)
}

#[test]
fn fixtures_count_as_expected_at_every_split() {
    for name in NAMES {
        let bytes = std::fs::read(format!("{FIXTURES}{name}.sse")).expect("fixture readable");
        let expected: serde_json::Value = serde_json::from_slice(
            &std::fs::read(format!("{FIXTURES}{name}.expected.json")).expect("expected readable"),
        )
        .expect("expected is JSON");
        let whole = events_of(&[&bytes]);
        let (tokens, usage, errors, done) = tally(&whole);
        assert_eq!(
            Some(tokens),
            expected["token_events"].as_u64(),
            "{name}: token events"
        );
        assert_eq!(
            usage,
            expected["completion_tokens"].as_u64(),
            "{name}: completion tokens"
        );
        assert_eq!(
            errors,
            expected
                .get("error_events")
                .and_then(|v| v.as_u64())
                .unwrap_or(0),
            "{name}: error events"
        );
        assert!(done, "{name}: [DONE] seen");
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(
                events_of(&[a, b]),
                whole,
                "{name}: split at byte {cut} gives the same events"
            );
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(
            events_of(&singles),
            whole,
            "{name}: byte-at-a-time gives the same events"
        );
    }
}

#[test]
fn line_endings_comments_bom_and_multiline_data() {
    let input = b"\xEF\xBB\xBFdata: a\r\rdata:b\r\ndata: c\n\n: note\n\ndata\n\nid: 1\n\n";
    let got = events_of(&[input]);
    assert_eq!(
        got,
        vec![b"a".to_vec(), b"b\nc".to_vec(), Vec::new()],
        "BOM stripped, CR / CRLF / LF all end lines, data lines join, comments and id-only events are not dispatched"
    );
    let unterminated = events_of(&[b"data: x\n\ndata: y\n"]);
    assert_eq!(
        unterminated,
        vec![b"x".to_vec()],
        "an unterminated event at the end is dropped"
    );
}

#[test]
fn classifies_chunks() {
    let kind = |s: &str| classify(s.as_bytes()).kind;
    assert_eq!(
        kind(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#),
        EventKind::Other,
        "role chunk"
    );
    assert_eq!(
        kind(r#"{"choices":[],"usage":{"completion_tokens":3}}"#),
        EventKind::Other,
        "usage chunk"
    );
    assert_eq!(
        kind(r#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#),
        EventKind::Token,
        "content"
    );
    assert_eq!(
        kind(r#"{"choices":[{"delta":{"reasoning":"x"}}]}"#),
        EventKind::Token,
        "reasoning"
    );
    assert_eq!(
        kind(r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#),
        EventKind::Token,
        "tool call"
    );
    assert_eq!(
        kind(r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#),
        EventKind::Other,
        "empty tool calls"
    );
    assert_eq!(
        kind(r#"{"choices":[{"text":"x"}]}"#),
        EventKind::Token,
        "completions text"
    );
    assert_eq!(
        kind(r#"{"choices":[{"text":""}]}"#),
        EventKind::Other,
        "empty completions text"
    );
    assert_eq!(kind(" [DONE] "), EventKind::Done, "[DONE]");
    assert_eq!(
        kind(r#"{"error":{"message":"boom"}}"#),
        EventKind::Error("boom".into()),
        "error event"
    );
    assert!(
        matches!(kind("nope"), EventKind::Invalid(_)),
        "non-JSON is invalid"
    );
    assert_eq!(
        classify(br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#),
        EventInfo {
            kind: EventKind::Other,
            completion_tokens: Some(3),
            prompt_tokens: Some(5),
            ..EventInfo::default()
        },
        "usage is read"
    );
}

#[test]
fn reads_cached_tokens_and_reply_text() {
    let vllm = classify(
        br#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":32}}}"#,
    );
    assert_eq!(
        (vllm.prompt_tokens, vllm.cached_tokens, vllm.cache_n),
        (Some(40), Some(32), None),
        "usage.prompt_tokens_details.cached_tokens is the cache figure"
    );
    let llama = classify(
        br#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"timings":{"cache_n":53,"prompt_n":1,"predicted_n":3}}"#,
    );
    assert_eq!(
        (llama.kind, llama.cached_tokens, llama.cache_n),
        (EventKind::Other, None, Some(53)),
        "llama.cpp's timings.cache_n is read from its last chunk"
    );
    let null_details =
        classify(br#"{"choices":[],"usage":{"prompt_tokens":7,"prompt_tokens_details":null}}"#);
    assert_eq!(
        null_details.cached_tokens, None,
        "details: null reports no cache figure"
    );
    let chat = classify(br#"{"choices":[{"index":0,"delta":{"content":" tok1 tok2"}}]}"#);
    assert_eq!(
        chat.content.as_deref(),
        Some(" tok1 tok2"),
        "chat: delta.content, spaces kept"
    );
    let text = classify(br#"{"choices":[{"index":0,"text":" tok0"}]}"#);
    assert_eq!(text.content.as_deref(), Some(" tok0"), "completions: text");
    let reasoning = classify(br#"{"choices":[{"delta":{"reasoning":"hmm"}}]}"#);
    assert_eq!(
        (reasoning.kind, reasoning.content),
        (EventKind::Token, None),
        "reasoning is output but not the reply's text"
    );
}
