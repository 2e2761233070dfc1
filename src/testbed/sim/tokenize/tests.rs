use super::*;

#[test]
fn counts_prompts_and_messages_like_the_usage_it_reports() {
    assert_eq!(
        count(br#"{"prompt":"r1 w w w","add_special_tokens":false}"#),
        Ok(4)
    );
    assert_eq!(
        count(br#"{"model":"m","messages":[{"role":"user","content":"w w"}]}"#),
        Ok(count_chat_tokens(["w w"])),
        "messages carry the chat template, as usage.prompt_tokens does"
    );
    assert!(count(br#"{"model":"m"}"#).is_err(), "nothing to count");
    assert!(count(b"{").is_err(), "not JSON");
    let answer: serde_json::Value = serde_json::from_str(&answer(3, 100)).expect("JSON answer");
    assert_eq!(answer["count"], 3);
    assert_eq!(answer["tokens"].as_array().map(Vec::len), Some(3));
}
