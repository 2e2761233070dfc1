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
