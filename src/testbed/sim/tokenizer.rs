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
//!
//! The prefix cache needs the tokens themselves, not just their number: [`token_ids`] and
//! [`chat_token_ids`] give each token an id under the same rule (a word's id is a hash of its
//! bytes, any other byte's id is the byte, the template's markers have ids of their own), so a
//! prompt that repeats another's text repeats its ids. A reply's tokens have the ids of its
//! words ([`output_token_id`]), so a conversation that sends the reply back in its next turn
//! finds it cached as the engine wrote it.
use std::fmt::Write;

/// Template tokens added for every chat message (header start, role, header end, `\n\n`, eot).
pub const CHAT_TOKENS_PER_MESSAGE: u64 = 5;

/// Template tokens added once per chat request (begin-of-text plus the assistant header that
/// opens the reply).
pub const CHAT_TOKENS_PER_REQUEST: u64 = 5;

/// Ids of the chat template's markers (above every byte id, apart from word ids).
const BEGIN_OF_TEXT: u64 = 1 << 40;
const HEADER_START: u64 = BEGIN_OF_TEXT + 1;
const HEADER_END: u64 = BEGIN_OF_TEXT + 2;
const HEADER_NEWLINES: u64 = BEGIN_OF_TEXT + 3;
const END_OF_TURN: u64 = BEGIN_OF_TEXT + 4;

/// The id of a word (a run of ASCII alphanumerics): a hash with the top bit set, so it never
/// equals a byte's or a marker's id.
pub fn word_id(word: &[u8]) -> u64 {
    // FNV-1a: fixed, fast, and the same in every run.
    let hash = word.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash | 1 << 63
}

/// Appends the token ids of `text` (see the module docs); as many as [`count_prompt_tokens`].
pub fn token_ids(text: &str, ids: &mut Vec<u64>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if byte.is_ascii_alphanumeric() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                i += 1;
            }
            ids.push(word_id(&bytes[start..i]));
            continue;
        }
        if !byte.is_ascii_whitespace() {
            ids.push(u64::from(byte));
        }
        i += 1;
    }
}

/// The token ids of a chat request, template included: as many as [`count_chat_tokens`].
pub fn chat_token_ids<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u64> {
    let mut ids = vec![BEGIN_OF_TEXT];
    let header = |ids: &mut Vec<u64>, role: &str| {
        ids.extend([
            HEADER_START,
            word_id(role.as_bytes()),
            HEADER_END,
            HEADER_NEWLINES,
        ]);
    };
    for (role, text) in messages {
        header(&mut ids, role);
        token_ids(text, &mut ids);
        ids.push(END_OF_TURN);
    }
    header(&mut ids, "assistant");
    ids
}

/// The id of the reply's `index`-th token (its text is [`super::api::token_text`]).
pub fn output_token_id(index: u64) -> u64 {
    word_id(format!("tok{index}").as_bytes())
}

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

/// The text of output tokens `from..to`, concatenated.
pub fn tokens_text(from: u64, to: u64) -> String {
    let mut text = String::new();
    for index in from..to {
        let _ = write!(text, " tok{index}");
    }
    text
}
