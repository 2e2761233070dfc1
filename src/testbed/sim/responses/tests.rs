use super::*;

#[test]
fn request_forms() {
    let text = parse(br#"{"model":"m","input":"a b c","max_output_tokens":5,"stream":true}"#)
        .expect("string input");
    assert_eq!(
        (
            text.prompt_tokens,
            text.max_tokens,
            text.stream,
            text.model.as_deref()
        ),
        (3 + 5 + 5, 5, true, Some("m")),
        "one user message: 3 words + message and request template"
    );
    let items = parse(
        br#"{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"x y"}]}]}"#,
    )
    .expect("item input");
    assert_eq!(
        (items.prompt_tokens, items.max_tokens, items.stream),
        (2 + 2 + 2 * 5 + 5, DEFAULT_MAX_TOKENS, false),
        "instructions count as a system message; defaults"
    );
    for (body, want) in [
        (&br#"{"model":"m"}"#[..], "input"),
        (br#"{"input":[]}"#, "empty"),
        (br#"{"input":"x","max_output_tokens":0}"#, "at least 1"),
    ] {
        let err = parse(body).expect_err("rejected");
        assert!(err.0.contains(want), "{err:?} mentions {want}");
    }
}
