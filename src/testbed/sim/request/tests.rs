use super::*;
use crate::testbed::sim::tokenizer::{CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REQUEST};

fn chat(body: &str) -> Result<SimRequest, BadRequest> {
    parse(Endpoint::Chat, body.as_bytes())
}

fn completion(body: &str) -> Result<SimRequest, BadRequest> {
    parse(Endpoint::Completions, body.as_bytes())
}

#[test]
fn chat_request_fields() {
    let req = chat(
        r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a b c"}]}],"stream":true,"max_completion_tokens":7,"max_tokens":3,"stream_options":{"include_usage":true},"temperature":0.5,"ignore_eos":true}"#,
    )
    .expect("valid chat request");
    assert_eq!(
        req,
        SimRequest {
            endpoint: Endpoint::Chat,
            model: Some("m".to_owned()),
            prompt_tokens: 2 + 3 + 2 * CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_PER_REQUEST,
            prompt_ids: crate::testbed::sim::tokenizer::chat_token_ids([
                ("system", "be brief"),
                ("user", "a b c")
            ]),
            max_tokens: 7,
            stream: true,
            usage: UsageOptions {
                include_usage: true,
                continuous: false
            },
        },
        "max_completion_tokens wins over max_tokens; parts are read"
    );
}

#[test]
fn completion_prompt_forms_and_default_max_tokens() {
    let text = completion(r#"{"prompt":"w w w w"}"#).expect("string prompt");
    assert_eq!(
        (text.prompt_tokens, text.max_tokens, text.stream),
        (4, 16, false),
        "4 words, default 16"
    );
    let list = completion(r#"{"prompt":["a b","c"],"max_tokens":2}"#).expect("list prompt");
    assert_eq!(list.prompt_tokens, 3, "lengths of a list add up");
    let ids = completion(r#"{"prompt":[1,2,3,4,5]}"#).expect("token id prompt");
    assert_eq!(ids.prompt_tokens, 5, "token ids count one each");
}

#[test]
fn bad_requests_say_why() {
    let cases = [
        (Endpoint::Chat, r#"{"messages":"hi"}"#, "messages"),
        (Endpoint::Chat, r#"{"messages":[]}"#, "at least one"),
        (Endpoint::Chat, r#"{"model":"m"}"#, "messages"),
        (
            Endpoint::Completions,
            r#"{"prompt":"x","max_tokens":0}"#,
            "at least 1",
        ),
        (
            Endpoint::Completions,
            r#"{"prompt":"x","max_tokens":-3}"#,
            "max_tokens",
        ),
        (Endpoint::Completions, r#"{"prompt":""}"#, "empty"),
        (Endpoint::Completions, r#"{"prompt":"x","n":2}"#, "n = 1"),
        (
            Endpoint::Completions,
            r#"{"prompt":"x","stream_options":{"include_usage":true}}"#,
            "stream=True",
        ),
        (Endpoint::Completions, "{not json", "invalid request body"),
    ];
    for (endpoint, body, want) in cases {
        let err = parse(endpoint, body.as_bytes()).expect_err("must be rejected");
        assert!(
            err.0.contains(want),
            "{body}: error {:?} should mention {want:?}",
            err.0
        );
    }
}
