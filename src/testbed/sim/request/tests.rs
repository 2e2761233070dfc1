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
            kv_transfer: KvTransfer::default(),
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

#[test]
fn kv_transfer_params_are_read_on_chat_and_completions() {
    let body = format!(
        r#"{{"prompt":"{}","max_tokens":3,"kv_transfer_params":{{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[4,5,6],"remote_engine_id":"e1","remote_host":"10.0.0.2","remote_port":8100,"tp_size":1}}}}"#,
        vec!["w"; 40].join(" ")
    );
    let req = completion(&body).expect("valid decode request");
    assert_eq!(
        req.kv_transfer,
        KvTransfer {
            remote_decode: false,
            remote_prefill: Some(crate::testbed::sim::kv_transfer::RemotePrefill {
                engine_id: "e1".to_owned(),
                host: "10.0.0.2".to_owned(),
                port: 8100,
                blocks: 3,
            }),
        },
        "40 tokens fill 3 blocks; the params name where they are"
    );
    let req = chat(
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}"#,
    )
    .expect("valid prefill request, as vLLM's proxy sends it");
    assert_eq!(
        req.kv_transfer,
        KvTransfer {
            remote_decode: true,
            remote_prefill: None,
        },
        "a prefill request with the proxy's null members"
    );
    let plain = chat(r#"{"messages":[{"role":"user","content":"hi"}],"kv_transfer_params":null}"#)
        .expect("null params");
    assert_eq!(
        plain.kv_transfer,
        KvTransfer::default(),
        "null asks nothing"
    );
}

#[test]
fn bad_kv_transfer_params_say_why() {
    let cases = [
        (
            r#"{"prompt":"a b","stream":true,"kv_transfer_params":{"do_remote_decode":true}}"#,
            "kv_transfer_params with do_remote_decode requires stream=false",
        ),
        (
            r#"{"prompt":"a b","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1,2],"remote_host":"h","remote_port":1}}"#,
            "kv_transfer_params.remote_block_ids: 2 block ids, but this request's prompt of 2 tokens fills 1 blocks",
        ),
        (
            r#"{"prompt":"a b","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"","remote_block_ids":[1],"remote_host":"h","remote_port":1}}"#,
            "kv_transfer_params.remote_engine_id: a non-empty string is required",
        ),
        (
            r#"{"prompt":"a b","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":7}}"#,
            "kv_transfer_params.remote_engine_id: invalid type: integer `7`, expected a string",
        ),
        (
            r#"{"prompt":"a b","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":"80"}}"#,
            "kv_transfer_params.remote_port: invalid type: string",
        ),
    ];
    for (body, want) in cases {
        let err = completion(body).expect_err("must be rejected");
        assert!(
            err.0.starts_with(want),
            "{body}: error {:?} should start with {want:?}",
            err.0
        );
    }
}
