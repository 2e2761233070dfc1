use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::*;

const CHAT: &[u8] = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Seven tokens of answer here, roughly."},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}"#;

const ELEVEN_SEVEN: Usage = Usage {
    prompt_tokens: Some(11),
    completion_tokens: Some(7),
    cached_tokens: None,
    prefill_micros: None,
};

fn headers(pairs: &[(http::HeaderName, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| (name.clone(), HeaderValue::from_static(value)))
        .collect()
}

/// Keeps `body` cut into frames of `size` bytes, then reads it as OpenAI chat.
fn read_in_frames(body: &[u8], size: usize, limit: usize) -> Option<Usage> {
    let mut whole = WholeBody::with_limit(limit);
    for frame in body.chunks(size) {
        whole.keep(&Bytes::copy_from_slice(frame));
    }
    whole.usage(Dialect::OpenAiChat)
}

#[test]
fn kept_only_for_json_successes_of_known_dialects() {
    let json = headers(&[(CONTENT_TYPE, "application/json")]);
    let cases = [
        (Dialect::OpenAiChat, StatusCode::OK, json.clone(), true),
        (
            Dialect::AnthropicMessages,
            StatusCode::OK,
            headers(&[(CONTENT_TYPE, "Application/JSON; charset=utf-8")]),
            true,
        ),
        (
            Dialect::OllamaChat,
            StatusCode::OK,
            headers(&[
                (CONTENT_TYPE, "application/json"),
                (CONTENT_ENCODING, "identity"),
            ]),
            true,
        ),
        (
            Dialect::OpenAiChat,
            StatusCode::OK,
            headers(&[
                (CONTENT_TYPE, "application/json"),
                (CONTENT_ENCODING, "gzip"),
            ]),
            false,
        ),
        (
            Dialect::OpenAiChat,
            StatusCode::OK,
            headers(&[(CONTENT_TYPE, "text/event-stream")]),
            false,
        ),
        (
            Dialect::OpenAiChat,
            StatusCode::OK,
            headers(&[(CONTENT_TYPE, "application/jsonl")]),
            false,
        ),
        (Dialect::OpenAiChat, StatusCode::OK, HeaderMap::new(), false),
        (
            Dialect::OpenAiChat,
            StatusCode::BAD_REQUEST,
            json.clone(),
            false,
        ),
        (
            Dialect::OpenAiChat,
            StatusCode::INTERNAL_SERVER_ERROR,
            json.clone(),
            false,
        ),
        (Dialect::Unknown, StatusCode::OK, json.clone(), false),
    ];
    for (dialect, status, headers, want) in cases {
        assert_eq!(
            WholeBody::for_response(dialect, status, &headers).is_some(),
            want,
            "{dialect:?} {status} {headers:?}"
        );
    }
}

#[test]
fn frames_are_kept_by_reference_not_copied() {
    let frame = Bytes::from_static(CHAT);
    let mut whole = WholeBody::new();
    whole.keep(&frame);
    assert_eq!(
        whole.frames[0].as_ptr(),
        frame.as_ptr(),
        "the kept frame is the forwarded buffer"
    );
    assert_eq!(
        whole.usage(Dialect::OpenAiChat),
        Some(ELEVEN_SEVEN),
        "read once at the end"
    );
}

#[test]
fn every_split_gives_the_same_usage() {
    for size in 1..=CHAT.len() {
        assert_eq!(
            read_in_frames(CHAT, size, MAX_WHOLE_BODY),
            Some(ELEVEN_SEVEN),
            "frames of {size} bytes"
        );
    }
    let mut whole = WholeBody::new();
    let (head, tail) = CHAT.split_at(40);
    for frame in [head, b"", tail] {
        whole.keep(&Bytes::copy_from_slice(frame));
    }
    assert_eq!(whole.frames.len(), 2, "empty frames are not kept");
    assert_eq!(
        whole.usage(Dialect::OpenAiChat),
        Some(ELEVEN_SEVEN),
        "empty frame ignored"
    );
}

#[test]
fn past_the_bound_nothing_is_kept_or_counted() {
    assert_eq!(
        read_in_frames(CHAT, 16, CHAT.len()),
        Some(ELEVEN_SEVEN),
        "a body exactly at the bound is read"
    );
    assert_eq!(
        read_in_frames(CHAT, 16, CHAT.len() - 1),
        None,
        "one byte over: nothing"
    );
    let mut whole = WholeBody::with_limit(CHAT.len() - 1);
    whole.keep(&Bytes::from_static(CHAT));
    assert!(
        whole.over && whole.frames.is_empty(),
        "memory released at once"
    );
    whole.keep(&Bytes::from_static(b"{}"));
    assert!(whole.frames.is_empty(), "nothing kept after the bound");
    assert_eq!(
        whole.usage(Dialect::OpenAiChat),
        None,
        "over the bound: no usage"
    );
}

#[test]
fn dialects_without_a_whole_body_reader_give_nothing() {
    let ollama_shaped =
        br#"{"done":true,"prompt_eval_count":11,"eval_count":7,"details":{"generated_tokens":7}}"#;
    for dialect in [Dialect::Tgi, Dialect::Triton, Dialect::Unknown] {
        let mut whole = WholeBody::new();
        whole.keep(&Bytes::from_static(ollama_shaped));
        assert_eq!(whole.usage(dialect), None, "{dialect:?}");
    }
    assert_eq!(
        WholeBody::new().usage(Dialect::OpenAiChat),
        None,
        "an empty body has no usage"
    );
    let mut garbage = WholeBody::new();
    garbage.keep(&Bytes::from_static(b"{\"usage\":{\"prompt_tokens\":11,"));
    assert_eq!(
        garbage.usage(Dialect::OpenAiChat),
        None,
        "a truncated body is nothing, not a panic"
    );
}
