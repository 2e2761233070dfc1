use super::*;
use crate::testbed::sim::api::response_id;

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn fixture(name: &str) -> Vec<String> {
    let path = format!(
        "{}/tests/fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    text.split_inclusive("\n\n").map(str::to_owned).collect()
}

/// A formatter as the vLLM fixtures were recorded (their model and creation time), with usage
/// asked for at the end or, `continuous`, on every chunk.
fn as_recorded(
    endpoint: Endpoint,
    id: &str,
    prompt_tokens: u64,
    continuous: bool,
) -> StreamFormatter {
    let usage = UsageOptions {
        include_usage: true,
        continuous,
    };
    StreamFormatter::new(endpoint, id, 1764400000, MODEL, prompt_tokens, usage)
}

/// Runs a whole stream of `n` tokens, one per step, through a formatter.
fn render(formatter: &mut StreamFormatter, n: u64, per_step: u64) -> Vec<String> {
    let mut out = VecDeque::new();
    formatter.push(
        &Progress {
            id: 0,
            new_tokens: 1,
            first: true,
            finished: n == 1,
            cached_tokens: 0,
            transferred_tokens: 0,
        },
        &mut out,
    );
    let mut generated = 1;
    while generated < n {
        let new_tokens = per_step.min(n - generated);
        generated += new_tokens;
        formatter.push(
            &Progress {
                id: 0,
                new_tokens,
                first: false,
                finished: generated == n,
                cached_tokens: 0,
                transferred_tokens: 0,
            },
            &mut out,
        );
    }
    out.into_iter()
        .map(|b| String::from_utf8(b.to_vec()).expect("utf-8"))
        .collect()
}

/// The generated text of one of our events, and of the fixture's.
fn text_of(event: &str) -> Option<String> {
    let value: serde_json::Value =
        serde_json::from_str(event.strip_prefix("data: ")?.trim_end()).ok()?;
    let choice = value.get("choices")?.get(0)?;
    let text = choice
        .get("text")
        .or_else(|| choice.get("delta")?.get("content"))?;
    text.as_str().map(str::to_owned)
}

/// Asserts that `ours` equals the fixture event for event, once the generated text (and the
/// finish reason, where the fixture stopped on EOS) are swapped for the fixture's.
fn assert_same_shape(ours: &[String], theirs: &[String]) {
    assert_eq!(
        ours.len(),
        theirs.len(),
        "same number of events: ours {ours:#?}"
    );
    for (i, (ours, theirs)) in ours.iter().zip(theirs).enumerate() {
        let mut ours = ours.clone();
        if let (Some(a), Some(b)) = (text_of(&ours), text_of(theirs)) {
            if !a.is_empty() {
                ours = ours.replacen(
                    &serde_json::to_string(&a).expect("json"),
                    &serde_json::to_string(&b).expect("json"),
                    1,
                );
            }
        }
        if theirs.contains(r#""finish_reason":"stop""#) {
            ours = ours.replace(r#""finish_reason":"length""#, r#""finish_reason":"stop""#);
        }
        assert_eq!(&ours, theirs, "event {i} has vLLM's exact shape");
    }
}

#[test]
fn chat_stream_with_usage_matches_vllm() {
    let mut f = as_recorded(Endpoint::Chat, "chatcmpl-7f3a", 12, false);
    let ours = render(&mut f, 7, 1);
    assert_same_shape(&ours, &fixture("vllm-chat-usage.sse"));
    assert_eq!(ours[1], "data: {\"id\":\"chatcmpl-7f3a\",\"object\":\"chat.completion.chunk\",\"created\":1764400000,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok0\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", "first content chunk, literally");
}

#[test]
fn chat_stream_with_continuous_usage_matches_vllm() {
    let mut f = as_recorded(Endpoint::Chat, "chatcmpl-c0u5", 30, true);
    assert_same_shape(
        &render(&mut f, 5, 1),
        &fixture("vllm-chat-continuous-usage.sse"),
    );
}

#[test]
fn completions_stream_matches_vllm() {
    let mut f = as_recorded(Endpoint::Completions, "cmpl-91", 3, false);
    assert_same_shape(&render(&mut f, 4, 1), &fixture("vllm-completions.sse"));
}

#[test]
fn continuous_usage_needs_include_usage_and_no_usage_means_no_usage_chunk() {
    let usage = UsageOptions {
        include_usage: false,
        continuous: true,
    };
    let mut f = StreamFormatter::new(Endpoint::Chat, "chatcmpl-x", 1, "m", 3, usage);
    let events = render(&mut f, 2, 1);
    assert_eq!(events.len(), 4, "role + 2 content + [DONE]: {events:#?}");
    assert!(
        events.iter().all(|e| !e.contains("usage")),
        "no usage anywhere"
    );
    assert_eq!(events[3], "data: [DONE]\n\n", "ends with [DONE]");
}

#[test]
fn several_tokens_per_chunk() {
    let mut f = StreamFormatter::new(
        Endpoint::Completions,
        "cmpl-x",
        1,
        "m",
        3,
        UsageOptions::default(),
    );
    let texts: Vec<Option<String>> = render(&mut f, 7, 3).iter().map(|e| text_of(e)).collect();
    let want = [
        Some(" tok0"),
        Some(" tok1 tok2 tok3"),
        Some(" tok4 tok5 tok6"),
        None,
    ];
    assert_eq!(
        texts,
        want.map(|t| t.map(str::to_owned)),
        "1 token at prefill, then 3 per chunk"
    );
}

#[test]
fn full_responses_are_vllm_shaped() {
    let chat = full_response(Endpoint::Chat, "chatcmpl-1", 5, "m", 10, 3, None);
    assert_eq!(
        chat,
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"m","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":" tok0 tok1 tok2","tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":10,"total_tokens":13,"completion_tokens":3,"prompt_tokens_details":null},"prompt_logprobs":null}"#,
        "chat.completion body"
    );
    let text = full_response(Endpoint::Completions, "cmpl-1", 5, "m\"q", 2, 1, None);
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(value["model"], "m\"q", "model is escaped and echoed");
    assert_eq!(value["choices"][0]["text"], " tok0", "one token");
    assert_eq!(value["usage"]["total_tokens"], 3, "usage adds up");
}

#[test]
fn ids_have_vllm_prefixes() {
    let chat = response_id(Endpoint::Chat);
    let cmpl = response_id(Endpoint::Completions);
    assert!(
        chat.starts_with("chatcmpl-") && chat.len() == 9 + 32,
        "chat id {chat}"
    );
    assert!(
        cmpl.starts_with("cmpl-") && cmpl.len() == 5 + 32,
        "completions id {cmpl}"
    );
}

#[test]
fn kv_transfer_params_are_the_last_member() {
    let params = r#"{"do_remote_prefill":true,"remote_block_ids":[0]}"#;
    let text = with_kv_transfer_params(
        full_response(Endpoint::Completions, "cmpl-1", 5, "m", 2, 1, None),
        params,
    );
    assert_eq!(
        text,
        r#"{"id":"cmpl-1","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":" tok0","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1,"prompt_tokens_details":null},"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[0]}}"#,
        "text_completion body with the params after usage"
    );
    let chat = with_kv_transfer_params(
        full_response(Endpoint::Chat, "chatcmpl-1", 5, "m", 10, 1, None),
        "null",
    );
    assert!(
        chat.ends_with(r#""prompt_logprobs":null,"kv_transfer_params":null}"#),
        "chat: after prompt_logprobs, and null is written as given: {chat}"
    );
    let value: serde_json::Value = serde_json::from_str(&chat).expect("still JSON");
    assert!(value["kv_transfer_params"].is_null(), "the member is there");
}
