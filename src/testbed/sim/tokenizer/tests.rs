use super::*;

#[test]
fn words_separated_by_spaces_count_one_each() {
    let text = vec!["w"; 1000].join(" ");
    assert_eq!(
        count_prompt_tokens(&text),
        1000,
        "N space-separated words are N tokens"
    );
}

#[test]
fn punctuation_and_runs() {
    assert_eq!(count_prompt_tokens("Hello, world!"), 4, "Hello , world !");
    assert_eq!(count_prompt_tokens("abc123def"), 1, "one alphanumeric run");
    assert_eq!(count_prompt_tokens("a-b"), 3, "a - b");
    assert_eq!(count_prompt_tokens("  \t\n "), 0, "whitespace is free");
    assert_eq!(count_prompt_tokens(""), 0, "empty text");
}

#[test]
fn non_ascii_counts_per_byte() {
    assert_eq!(
        count_prompt_tokens("é"),
        2,
        "2-byte UTF-8 character is 2 tokens"
    );
    assert_eq!(
        count_prompt_tokens("x€y"),
        5,
        "x, 3 bytes of the euro sign, y"
    );
}

#[test]
fn chat_overhead() {
    assert_eq!(
        count_chat_tokens(["a b", "c"]),
        2 * CHAT_TOKENS_PER_MESSAGE + 3 + CHAT_TOKENS_PER_REQUEST,
        "per-message and per-request template tokens are added"
    );
    assert_eq!(
        count_chat_tokens([]),
        CHAT_TOKENS_PER_REQUEST,
        "no messages"
    );
}

#[test]
fn token_ids_are_as_many_as_the_count_and_repeat_with_the_text() {
    for text in ["Hello, world!", "w w w", "x€y  abc123", "", "tok0 tok1"] {
        let mut ids = Vec::new();
        token_ids(text, &mut ids);
        assert_eq!(ids.len() as u64, count_prompt_tokens(text), "{text:?}");
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    token_ids("the same words", &mut a);
    token_ids("the  same\twords", &mut b);
    assert_eq!(a, b, "whitespace does not make tokens");
    let chat = chat_token_ids([("system", "be brief"), ("user", "hi, you")]);
    assert_eq!(
        chat.len() as u64,
        count_chat_tokens(["be brief", "hi, you"]),
        "the template counts as count_chat_tokens says"
    );
    let mut reply = Vec::new();
    token_ids(&tokens_text(0, 3), &mut reply);
    assert_eq!(
        reply,
        (0..3).map(output_token_id).collect::<Vec<_>>(),
        "a reply's text tokenizes to the ids the engine gave its tokens"
    );
}
