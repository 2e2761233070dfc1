use super::*;

#[test]
fn request_forms() {
    let req = parse(
        br#"{"model":"claude","max_tokens":7,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"a b c"}],"stream":true}"#,
    )
    .expect("valid");
    assert_eq!(
        (
            req.prompt_tokens,
            req.max_tokens,
            req.stream,
            req.model.as_deref()
        ),
        (2 + 3 + 2 * 5 + 5, 7, true, Some("claude")),
        "system counts as a message"
    );
    for (body, want) in [
        (
            &br#"{"messages":[{"role":"user","content":"x"}]}"#[..],
            "max_tokens",
        ),
        (br#"{"max_tokens":3}"#, "messages"),
        (br#"{"max_tokens":3,"messages":[]}"#, "at least one"),
        (
            br#"{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
            "at least 1",
        ),
    ] {
        let err = parse(body).expect_err("rejected");
        assert!(err.0.contains(want), "{err:?} mentions {want}");
    }
}
