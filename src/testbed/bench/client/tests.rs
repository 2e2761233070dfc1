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
    chat["messages"] = serde_json::json!([{ "role": "user", "content": "r3x7 w w" }]);
    assert_eq!(
        request_body(&target(Endpoint::Chat), &plan(Prompt::Words { seed: 3 })),
        chat,
        "chat: one user message of prompt_words words"
    );
    let mut completions = common;
    completions["prompt"] = serde_json::json!("r3x7 w w");
    assert_eq!(
        request_body(
            &target(Endpoint::Completions),
            &plan(Prompt::Words { seed: 3 })
        ),
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
    let mut p = plan(Prompt::Words { seed: 3 });
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
    let plain =
        build_request(&target(Endpoint::Chat), &plan(Prompt::Words { seed: 3 })).expect("builds");
    assert_eq!(
        plain.headers().len(),
        2,
        "without one, only content-type and accept: {:?}",
        plain.headers()
    );
}

/// The client's arithmetic, from stamps the test chooses (no clock, no socket): the loopback
/// tests in `tests/serial/bench_e2e.rs` can only bound what a loaded machine delays, so the exact
/// figures are checked here.
#[test]
fn the_record_times_the_stream_from_the_stamps_of_its_events() {
    let point_start = Instant::now();
    let t0 = point_start + Duration::from_millis(40);
    let at = |ms| t0 + Duration::from_millis(ms);
    let mut st = StreamState::default();
    let token =
        |text: &str| format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#);
    st.on_event(
        br#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        at(1),
    );
    for (ms, text) in [(150, "a"), (200, "b"), (250, "c"), (300, "d"), (350, "e")] {
        st.on_event(token(text).as_bytes(), at(ms));
    }
    // Usage says 9 tokens in those 5 events (several tokens per chunk).
    st.on_event(
        br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}"#,
        at(351),
    );
    st.on_event(b"[DONE]", at(352));
    let planned = Planned {
        index: 7,
        class: "c",
        prompt_words: 3,
        max_tokens: 9,
    };
    let (record, _) = st.into_record(planned, t0, point_start, at(360));
    assert_eq!(record.outcome, Ending::Ok, "a whole stream is ok");
    assert_eq!(
        record.start_s, 0.040,
        "start: from the point's start to the request's t0"
    );
    assert_eq!(
        record.ttft_s,
        Some(0.150),
        "TTFT: t0 to the first content event (the role chunk at 1 ms is no token)"
    );
    assert_eq!(
        record.itl_s, [0.050; 4],
        "ITL: every gap between consecutive token events"
    );
    assert_eq!(
        record.tpot_s,
        Some(0.025),
        "TPOT: first to last token event (200 ms) over N_out - 1 = 8, N_out from usage"
    );
    assert_eq!(record.e2e_s, 0.360, "E2E: t0 to the end of the stream");
    assert_eq!(
        (record.token_events, record.output_tokens),
        (5, 9),
        "5 token events, 9 tokens by usage"
    );
}
