//! The simulator's tokenizer: deterministic, cheap, and easy to aim at.
//!
//! The sim needs a prompt length to model prefill cost, and the load generator needs to build
//! prompts of an exact length. A real BPE tokenizer would tie both to a vocabulary file; this rule
//! is close enough in spirit (words are tokens, punctuation is tokens) and trivially invertible:
//!
//! - every maximal run of ASCII alphanumerics (`[A-Za-z0-9]+`) is **one** token;
//! - every other byte that is not ASCII whitespace is **one** token (so a 3-byte UTF-8 character
//!   counts 3, as a byte-fallback BPE would);
//! - ASCII whitespace separates runs and costs nothing.
//!
//! So `"w w w"` (N words separated by spaces) is exactly N tokens, and `"Hello, world!"` is 4.
//!
//! Chat requests add a fixed template overhead, modelled on Llama 3's chat template
//! (`<|start_header_id|>role<|end_header_id|>\n\n ... <|eot_id|>` per message, and
//! `<|begin_of_text|>` plus the assistant header once per request):
//! [`CHAT_TOKENS_PER_MESSAGE`] per message and [`CHAT_TOKENS_PER_REQUEST`] once.

/// Template tokens added for every chat message (header start, role, header end, `\n\n`, eot).
pub const CHAT_TOKENS_PER_MESSAGE: u64 = 5;

/// Template tokens added once per chat request (begin-of-text plus the assistant header that
/// opens the reply).
pub const CHAT_TOKENS_PER_REQUEST: u64 = 5;

/// Counts the tokens of `text` under the rule in the module docs.
pub fn count_prompt_tokens(text: &str) -> u64 {
    let mut tokens = 0u64;
    let mut in_word = false;
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() {
            if !in_word {
                tokens += 1;
                in_word = true;
            }
        } else {
            in_word = false;
            if !byte.is_ascii_whitespace() {
                tokens += 1;
            }
        }
    }
    tokens
}

/// Counts the prompt tokens of a chat request from the text of each message.
///
/// A message without text (e.g. an assistant message holding only tool calls) still costs its
/// template overhead.
pub fn count_chat_tokens<'a>(messages: impl IntoIterator<Item = &'a str>) -> u64 {
    messages
        .into_iter()
        .map(|text| CHAT_TOKENS_PER_MESSAGE + count_prompt_tokens(text))
        .sum::<u64>()
        + CHAT_TOKENS_PER_REQUEST
}

#[cfg(test)]
mod tests;
