use super::*;

fn target(endpoint: Endpoint) -> Destination {
    Destination {
        uri: "http://127.0.0.1:1/v1/x".parse().expect("uri"),
        endpoint,
        model: "m".into(),
    }
}

fn plan(prompt: Prompt) -> PlannedRequest {
    PlannedRequest {
        index: 7,
        class: 0,
        prompt_words: 3,
        max_tokens: 5,
        prompt,
        header: None,
    }
}

fn conversation() -> Vec<Message> {
    let m = |role, content: &str| Message {
        role,
        content: content.into(),
    };
    vec![
        m(Role::System, "s0p1 w"),
        m(Role::User, "u0t1 w w"),
        m(Role::Assistant, " tok0 tok1"),
        m(Role::User, "u0t2 w"),
    ]
}

#[test]
fn single_turn_bodies_are_unchanged() {
    let common = serde_json::json!({
        "model": "m",
        "stream": true,
        "max_tokens": 5,
        "ignore_eos": true,
        "stream_options": { "include_usage": true },
    });
    let mut chat = common.clone();
    chat["messages"] = serde_json::json!([{ "role": "user", "content": "r7 w w" }]);
    assert_eq!(
        request_body(&target(Endpoint::Chat), &plan(Prompt::Words)),
        chat,
        "chat: one user message of prompt_words words"
    );
    let mut completions = common;
    completions["prompt"] = serde_json::json!("r7 w w");
    assert_eq!(
        request_body(&target(Endpoint::Completions), &plan(Prompt::Words)),
        completions,
        "completions: the same words as the prompt"
    );
}

#[test]
fn a_conversation_is_sent_as_messages_or_as_joined_text() {
    let chat = request_body(
        &target(Endpoint::Chat),
        &plan(Prompt::Messages(conversation())),
    );
    assert_eq!(
        chat["messages"],
        serde_json::json!([
            { "role": "system", "content": "s0p1 w" },
            { "role": "user", "content": "u0t1 w w" },
            { "role": "assistant", "content": " tok0 tok1" },
            { "role": "user", "content": "u0t2 w" },
        ]),
        "chat: the messages in order, roles in the API's spelling"
    );
    assert!(chat.get("prompt").is_none(), "chat: no prompt field");
    let completions = request_body(
        &target(Endpoint::Completions),
        &plan(Prompt::Messages(conversation())),
    );
    assert_eq!(
        completions["prompt"], "s0p1 w\nu0t1 w w\n tok0 tok1\nu0t2 w",
        "completions: the texts joined by newlines"
    );
    assert!(
        completions.get("messages").is_none(),
        "completions: no messages field"
    );
}

#[test]
fn the_extra_header_is_sent() {
    let mut p = plan(Prompt::Words);
    p.header = Some((
        HeaderName::from_static("x-session-id"),
        HeaderValue::from_static("42"),
    ));
    let req = build_request(&target(Endpoint::Chat), &p).expect("request builds");
    assert_eq!(
        req.headers().get("x-session-id").map(HeaderValue::as_bytes),
        Some(&b"42"[..]),
        "the planned header is on the request"
    );
    let plain = build_request(&target(Endpoint::Chat), &plan(Prompt::Words)).expect("builds");
    assert_eq!(
        plain.headers().len(),
        2,
        "without one, only content-type and accept: {:?}",
        plain.headers()
    );
}
