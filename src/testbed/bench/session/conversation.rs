//! One session's conversation: the messages so far, and the request each turn sends.
//!
//! The list only ever grows at its end (system prompt, then user and assistant messages in
//! turn), so every turn's prompt starts with the whole of the previous turn's prompt and reply:
//! the prefix a server's cache can reuse, if the turn lands where the previous one ran.
use http::header::{HeaderName, HeaderValue};

use crate::testbed::bench::client::{Message, PlannedRequest, Prompt, Role};

/// The messages of one session so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    messages: Vec<Message>,
}

impl Conversation {
    /// A conversation that opens with a system prompt.
    pub fn new(system: String) -> Self {
        Conversation {
            messages: vec![Message {
                role: Role::System,
                content: system,
            }],
        }
    }

    /// Appends the next user message (it opens a turn).
    pub fn ask(&mut self, text: String) {
        self.messages.push(Message {
            role: Role::User,
            content: text,
        });
    }

    /// Appends the reply to the last user message, exactly as the client received it.
    pub fn answer(&mut self, text: String) {
        self.messages.push(Message {
            role: Role::Assistant,
            content: text,
        });
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Whitespace-separated words over every message: the request's `prompt_words`, the prompt
    /// length a report falls back to when the server sends no usage.
    pub fn words(&self) -> u32 {
        let words: usize = self
            .messages
            .iter()
            .map(|m| m.content.split_whitespace().count())
            .sum();
        u32::try_from(words).unwrap_or(u32::MAX)
    }

    /// The request of the current turn (the one the last [`ask`](Self::ask) opened):
    /// every message so far, `max_tokens`, and the session header if there is one.
    pub fn request(
        &self,
        index: u64,
        max_tokens: u32,
        header: Option<(HeaderName, HeaderValue)>,
    ) -> PlannedRequest {
        PlannedRequest {
            index,
            class: 0,
            prompt_words: self.words(),
            max_tokens,
            prompt: Prompt::Messages(self.messages.clone()),
            header,
        }
    }
}

#[cfg(test)]
mod tests;
