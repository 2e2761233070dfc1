use serde_json::{json, Value};

use super::*;

#[test]
fn the_prefill_asks_for_one_unstreamed_token_and_a_remote_decode() {
    let client = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":200,"max_completion_tokens":200,"min_tokens":5,"min_completion_tokens":5,"temperature":0.5}"#;
    let body: Value =
        serde_json::from_slice(&prefill_body(client).expect("a JSON object")).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": false,
            "max_tokens": 1,
            "max_completion_tokens": 1,
            "temperature": 0.5,
            "kv_transfer_params": {
                "do_remote_decode": true,
                "do_remote_prefill": false,
                "remote_engine_id": null,
                "remote_block_ids": null,
                "remote_host": null,
                "remote_port": null
            }
        })
    );
}

#[test]
fn max_completion_tokens_is_set_only_when_the_client_gave_it() {
    let body: Value = serde_json::from_slice(&prefill_body(br#"{"prompt":"x"}"#).unwrap()).unwrap();
    assert_eq!(body["max_tokens"], 1);
    assert!(body.get("max_completion_tokens").is_none());
    assert!(prefill_body(b"[1,2]").is_err(), "not an object");
}

#[test]
fn the_offered_params_are_taken_verbatim() {
    let answer = br#"{"id":"x","choices":[],"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1, 2],"remote_engine_id":"e","remote_host":"h","remote_port":5}}"#;
    let params = offered(answer).expect("offered");
    assert_eq!(
        params.get(),
        r#"{"do_remote_prefill":true,"remote_block_ids":[1, 2],"remote_engine_id":"e","remote_host":"h","remote_port":5}"#
    );
    assert!(offered(br#"{"kv_transfer_params":null}"#).is_none(), "null");
    assert!(offered(br#"{"choices":[]}"#).is_none(), "absent");
    assert!(
        offered(br#"{"kv_transfer_params":[1]}"#).is_none(),
        "not an object"
    );
    assert!(offered(b"Internal Server Error").is_none(), "not JSON");
}

#[test]
fn the_decode_body_is_the_clients_with_the_params_spliced_first() {
    let params = RawValue::from_string(r#"{"a":1}"#.to_owned()).unwrap();
    let client = b"  {\"model\" : \"m\",\n \"stream\":true}";
    let body = decode_body(client, &params).expect("an object");
    assert_eq!(
        &body[..],
        b"  {\"kv_transfer_params\":{\"a\":1},\"model\" : \"m\",\n \"stream\":true}"
    );
    let parsed: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(parsed["kv_transfer_params"]["a"], 1);
    assert_eq!(
        &decode_body(b"{ }", &params).unwrap()[..],
        b"{\"kv_transfer_params\":{\"a\":1} }",
        "an empty object takes no comma"
    );
    assert!(decode_body(b"[]", &params).is_none());
    assert!(decode_body(b"   ", &params).is_none());
}

#[test]
fn a_body_that_names_the_member_is_noticed() {
    assert!(mentions_params(br#"{"kv_transfer_params":{}}"#));
    assert!(
        !mentions_params(br#"{"prompt":"say kv_transfer_params"}"#),
        "inside a text"
    );
    assert!(
        mentions_params(br#"{"prompt":"kv_transfer_params"}"#),
        "a prompt that quotes it exactly is not handed off: rare, and never wrong"
    );
}
