use super::*;

fn wire(json: &str) -> Option<WireParams> {
    Some(serde_json::from_str(json).expect("params parse"))
}

/// Decode-side params for a prompt of `blocks` blocks.
fn decode_params(blocks: u64) -> String {
    let ids: Vec<String> = (0..blocks).map(|i| (100 + i).to_string()).collect();
    format!(
        r#"{{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[{}],"remote_engine_id":"e-1","remote_host":"127.0.0.1","remote_port":8100,"tp_size":1}}"#,
        ids.join(",")
    )
}

#[test]
fn one_block_per_sixteen_tokens_rounding_up() {
    assert_eq!(BLOCK_TOKENS, 16, "vLLM's default block size");
    let cases = [
        (1, 1),
        (15, 1),
        (16, 1),
        (17, 2),
        (32, 2),
        (33, 3),
        (4000, 250),
    ];
    for (tokens, blocks) in cases {
        assert_eq!(blocks_for(tokens), blocks, "{tokens} tokens");
    }
}

#[test]
fn no_params_ask_nothing() {
    assert_eq!(
        KvTransfer::from_wire(None, 10, true),
        Ok(KvTransfer::default()),
        "absent params"
    );
    assert_eq!(
        KvTransfer::from_wire(wire("{}"), 10, true),
        Ok(KvTransfer::default()),
        "an empty object asks nothing either"
    );
}

#[test]
fn the_prefill_request_of_vllms_proxy() {
    let params = wire(
        r#"{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}"#,
    );
    assert_eq!(
        KvTransfer::from_wire(params, 40, false),
        Ok(KvTransfer {
            remote_decode: true,
            remote_prefill: None,
        }),
        "null members are absent; the prefill side needs none of them"
    );
}

#[test]
fn a_streamed_prefill_request_is_refused() {
    let params = wire(r#"{"do_remote_decode":true}"#);
    let err = KvTransfer::from_wire(params, 40, true).expect_err("stream=true");
    assert_eq!(err, ParamsError::StreamedRemoteDecode, "the variant");
    assert_eq!(
        err.to_string(),
        "kv_transfer_params with do_remote_decode requires stream=false",
        "the message"
    );
    assert!(
        KvTransfer::from_wire(wire(r#"{"do_remote_decode":false}"#), 40, true).is_ok(),
        "do_remote_decode false streams as usual"
    );
}

#[test]
fn the_decode_request_names_its_blocks() {
    let got = KvTransfer::from_wire(wire(&decode_params(3)), 40, true);
    assert_eq!(
        got,
        Ok(KvTransfer {
            remote_decode: false,
            remote_prefill: Some(RemotePrefill {
                engine_id: "e-1".to_owned(),
                host: "127.0.0.1".to_owned(),
                port: 8100,
                blocks: 3,
            }),
        }),
        "40 tokens are 3 blocks; the decode side may stream"
    );
}

#[test]
fn params_of_another_prompt_are_refused() {
    for (blocks, prompt) in [(2, 40), (4, 40), (0, 1), (250, 4001)] {
        let err = KvTransfer::from_wire(wire(&decode_params(blocks)), prompt, false)
            .expect_err("wrong block count");
        assert_eq!(
            err,
            ParamsError::BlockCount {
                got: blocks,
                want: blocks_for(prompt),
                prompt_tokens: prompt,
            },
            "{blocks} blocks for {prompt} tokens"
        );
    }
    let err = KvTransfer::from_wire(wire(&decode_params(2)), 40, false).expect_err("2 for 40");
    assert_eq!(
        err.to_string(),
        "kv_transfer_params.remote_block_ids: 2 block ids, but this request's prompt of 40 tokens \
         fills 3 blocks of 16 tokens (params of another request?)",
        "the message says what is wrong and why it matters"
    );
}

#[test]
fn every_decode_member_is_required() {
    let full: serde_json::Value = serde_json::from_str(&decode_params(3)).expect("json");
    let cases = [
        (
            "remote_engine_id",
            serde_json::Value::Null,
            "a non-empty string",
        ),
        ("remote_engine_id", "".into(), "a non-empty string"),
        (
            "remote_block_ids",
            serde_json::Value::Null,
            "an array of block ids",
        ),
        ("remote_host", serde_json::Value::Null, "a string"),
        ("remote_port", serde_json::Value::Null, "an integer port"),
    ];
    for (field, value, what) in cases {
        let mut params = full.clone();
        params[field] = value.clone();
        let err = KvTransfer::from_wire(wire(&params.to_string()), 40, false)
            .expect_err("a member is missing");
        assert_eq!(
            err,
            ParamsError::Missing { field, what },
            "{field} = {value}"
        );
        assert_eq!(
            err.to_string(),
            format!("kv_transfer_params.{field}: {what} is required with do_remote_prefill"),
            "the message names the member"
        );
    }
}

#[test]
fn both_flags_pull_then_offer() {
    let mut params: serde_json::Value = serde_json::from_str(&decode_params(1)).expect("json");
    params["do_remote_decode"] = true.into();
    let got = KvTransfer::from_wire(wire(&params.to_string()), 16, false).expect("valid");
    assert!(
        got.remote_decode && got.remote_prefill.is_some(),
        "each flag asks its own thing: {got:?}"
    );
}

#[test]
fn an_offer_is_vllms_params_with_fresh_block_ids() {
    let connector = Connector::new("10.1.2.3:8100".parse().expect("addr"));
    let id = connector.engine_id().to_owned();
    let first = connector.offer(40);
    assert_eq!(
        first,
        format!(
            r#"{{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1,2],"remote_engine_id":"{id}","remote_host":"10.1.2.3","remote_port":8100,"tp_size":1}}"#
        ),
        "vLLM's member order, ceil(40 / 16) = 3 ids"
    );
    let second = connector.offer(16);
    assert!(
        second.contains(r#""remote_block_ids":[3],"#),
        "the next offer's ids follow, never reused: {second}"
    );
    let parsed = KvTransfer::from_wire(wire(&first), 40, false).expect("an offer is valid params");
    assert_eq!(
        parsed
            .remote_prefill
            .map(|r| (r.engine_id, r.port, r.blocks)),
        Some((id, 8100, 3)),
        "what the prefill side offers, the decode side accepts for the same prompt"
    );
}

#[test]
fn engine_ids_are_uuid4_and_per_replica() {
    let a = Connector::new("127.0.0.1:1".parse().expect("addr"));
    let b = Connector::new("127.0.0.1:1".parse().expect("addr"));
    assert_ne!(a.engine_id(), b.engine_id(), "each replica draws its own");
    let id = a.engine_id();
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(groups, vec![8, 4, 4, 4, 12], "uuid layout: {id}");
    assert!(
        id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()) && id.as_bytes()[14] == b'4',
        "lower-case hex, version 4: {id}"
    );
}

#[test]
fn a_wildcard_listener_offers_loopback() {
    let offer = Connector::new("0.0.0.0:9000".parse().expect("addr")).offer(1);
    assert!(
        offer.contains(r#""remote_host":"127.0.0.1","remote_port":9000,"#),
        "0.0.0.0 is no address to pull from: {offer}"
    );
}

#[test]
fn fault_names_parse_from_toml_strings() {
    #[derive(Deserialize)]
    struct Knob {
        fault: KvTransferFault,
    }
    for (text, want) in [
        ("none", KvTransferFault::None),
        ("prefill", KvTransferFault::Prefill),
        ("decode", KvTransferFault::Decode),
    ] {
        let knob: Knob =
            serde_json::from_str(&format!(r#"{{"fault":"{text}"}}"#)).expect("known fault");
        assert_eq!(knob.fault, want, "{text}");
    }
    assert_eq!(KvTransferFault::default(), KvTransferFault::None, "default");
}
