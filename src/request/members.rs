//! Where a body's prompt members lie, so prefix affinity names the prompt from the one walk
//! instead of walking the body again ([`super::prefix`]).
use std::ops::Range;

use serde_json::value::RawValue;

use super::usage::span;

/// The members that make a prompt, in the order prefix affinity names them: chat and completions
/// (`messages`, `prompt`), Anthropic Messages (`system`, `messages`), OpenAI Responses
/// (`instructions`, `input`), TGI (`inputs`) and llama.cpp (`prompt`).
pub(crate) const PROMPT_MEMBERS: [&str; 6] = [
    "instructions",
    "system",
    "messages",
    "input",
    "prompt",
    "inputs",
];

pub(super) const INSTRUCTIONS: usize = 0;
pub(super) const SYSTEM: usize = 1;
pub(super) const MESSAGES: usize = 2;
pub(super) const INPUT: usize = 3;
pub(super) const PROMPT: usize = 4;
pub(super) const INPUTS: usize = 5;

/// Where each prompt member's value lies in the body: its last occurrence (as the backends'
/// parsers take it); a `null` member is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptSpans([Option<Range<usize>>; PROMPT_MEMBERS.len()]);

impl PromptSpans {
    /// The spans of the members the walk borrowed from `body`.
    pub(super) fn of(body: &[u8], members: &[Option<&RawValue>; PROMPT_MEMBERS.len()]) -> Self {
        Self(members.map(|raw| {
            let raw = raw.filter(|raw| raw.get() != "null")?;
            span(body, raw).ok()
        }))
    }

    /// The members present, in naming order, with their values' text in `body` (the body they
    /// were located in).
    pub(crate) fn in_order<'b>(
        &self,
        body: &'b [u8],
    ) -> impl Iterator<Item = (&'static str, &'b str)> + use<'_, 'b> {
        PROMPT_MEMBERS
            .iter()
            .zip(&self.0)
            .filter_map(move |(name, range)| {
                let text = std::str::from_utf8(body.get(range.clone()?)?).ok()?;
                Some((*name, text))
            })
    }

    /// Whether the body has any prompt member.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// The spans once `edit` of the body was replaced by `len` bytes (the usage splice, which
    /// never falls inside a prompt member): what follows it moves.
    pub(super) fn moved_by(&mut self, edit: &Range<usize>, len: usize) {
        for range in self.0.iter_mut().flatten() {
            if range.start >= edit.end {
                let start = range.start - edit.end + edit.start + len;
                *range = start..start + range.len();
            }
        }
    }
}
