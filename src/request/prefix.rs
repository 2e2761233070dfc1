//! A prompt's prefix, named in blocks: what prefix affinity looks up and remembers.
//!
//! An inference server's prompt cache (vLLM's automatic prefix cache, SGLang's radix cache,
//! llama.cpp's slot cache) skips the prefill of a prompt prefix it still holds. The router cannot
//! see tokens without a tokenizer, so it names prefixes at the text level, as vLLM names KV blocks:
//! the prompt's text is cut into blocks of `block_bytes`, and block *i* is named by
//! `xxh3(block_i, seed = name of block i-1)`, the chain starting from the model's name. Two
//! prompts share a block's name exactly when they share every byte up to its end, so a shared
//! system prompt and a conversation that grows turn by turn keep their leading names, and one
//! lookup per block finds the longest prefix a backend served. XXH3 has a fixed specification:
//! every tokenmeter replica, of any build, names the same prompt the same way.
//!
//! The text is every string (and member name, number and literal) of the body's prompt members,
//! in a fixed member order ([`super::PROMPT_MEMBERS`]: `instructions`, `system`, `messages`,
//! `input`, `prompt`, `inputs`, covering chat and completions, Anthropic Messages, OpenAI
//! Responses, TGI and llama.cpp), each followed by a separator byte so that `["ab"]` and
//! `["a", "b"]` differ. Other members (sampling parameters, `stream`) never matter: a
//! conversation's turns may change them. Where the members lie comes from the meter's one walk of
//! the body ([`super::PromptSpans`]); this module walks only their values.
//!
//! The prompt's **key** names the conversation: the chain up to the end of its first user message
//! (a chat's turns all begin with the same system prompt and first user message, and two
//! conversations rarely do), or, for a text prompt, through its first `key_blocks` blocks. The
//! router hashes a conversation's home backend from it, so tokenmeter replicas that share no
//! state still agree on where a conversation lives.
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::PromptSpans;

#[cfg(test)]
mod tests;

/// The most blocks a prompt is named by: 8 192 blocks of 128 bytes are 1 MiB of text, far past
/// any prompt a cache keeps, and the bound keeps one huge body from flooding the index.
pub(crate) const MAX_BLOCKS: usize = 8192;

/// Separator after each string (or other scalar) of the text.
const END_VALUE: u8 = 0x1f;
/// Separator after each element of a list, and each member of an object.
const END_ITEM: u8 = 0x1e;
/// Mixed into the seed of a partial block's name, so it never equals a full block's.
const PARTIAL: u64 = 0x9e37_79b9_7f4a_7c15;

/// A prompt named in blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptPrefix {
    /// The names of the prompt's whole blocks, in order (at most [`MAX_BLOCKS`]).
    pub blocks: Vec<u64>,
    /// The conversation's name (see the module docs).
    pub key: u64,
    /// Bytes of text the key covers.
    pub key_bytes: u64,
    /// Bytes of text in all.
    pub bytes: u64,
    /// Bytes of text per block.
    pub block_bytes: u64,
}

/// Names the prompt of a request to `model` whose prompt members the one walk located
/// ([`super::read_with`] with [`super::Read::with_prompt_spans`]) in `body`; `None` when the body
/// has no prompt member.
pub fn name(
    body: &[u8],
    spans: &PromptSpans,
    model: Option<&str>,
    block_bytes: usize,
    key_blocks: usize,
) -> Option<PromptPrefix> {
    if spans.is_empty() {
        return None;
    }
    let mut naming = Naming::new(model, block_bytes);
    for (name, text) in spans.in_order(body) {
        naming.member(name, text)?;
    }
    Some(naming.finish(key_blocks))
}

/// Reads `body` and names its prompt (see [`name`]): for a body nothing has read yet.
pub fn read(
    body: &[u8],
    model: Option<&str>,
    block_bytes: usize,
    key_blocks: usize,
) -> Option<PromptPrefix> {
    let read = super::read_with(body, super::Read::default().with_prompt_spans())?;
    name(
        body,
        read.prompt_spans.as_ref()?,
        model,
        block_bytes,
        key_blocks,
    )
}

/// One prompt being named, member by member in [`super::PROMPT_MEMBERS`] order: the chain and
/// the conversation's key once its first user message is seen.
struct Naming {
    chain: Chain,
    key: Option<(u64, u64)>,
}

impl Naming {
    fn new(model: Option<&str>, block_bytes: usize) -> Self {
        Self {
            chain: Chain::new(model.unwrap_or(""), block_bytes.max(1)),
            key: None,
        }
    }

    /// Feeds one prompt member: its name, then the value whose JSON `text` it has. `None` when
    /// `text` is not JSON.
    fn member(&mut self, name: &str, text: &str) -> Option<()> {
        self.chain.feed(name.as_bytes());
        self.chain.feed(&[END_VALUE]);
        let mut de = serde_json::Deserializer::from_str(text);
        let seen = Value {
            chain: &mut self.chain,
            roles: matches!(name, "messages" | "input"),
        }
        .deserialize(&mut de)
        .ok()?;
        if self.key.is_none() {
            self.key = seen.first_user;
        }
        self.chain.feed(&[END_ITEM]);
        Some(())
    }

    /// The prompt's names; without a user message, the key is the first `key_blocks` blocks.
    fn finish(self, key_blocks: usize) -> PromptPrefix {
        let Naming { chain, key } = self;
        let (key, key_bytes) = key.unwrap_or_else(|| {
            let whole = chain.blocks.len().min(key_blocks);
            match whole {
                0 => (chain.mark(), chain.bytes),
                n => (chain.blocks[n - 1], (n * chain.block_bytes) as u64),
            }
        });
        PromptPrefix {
            blocks: chain.blocks,
            key,
            key_bytes,
            bytes: chain.bytes,
            block_bytes: chain.block_bytes as u64,
        }
    }
}

/// The running chain of block names.
struct Chain {
    block_bytes: usize,
    /// The bytes of the block being filled.
    partial: Vec<u8>,
    /// The name of the last whole block (the model's name before the first).
    last: u64,
    blocks: Vec<u64>,
    bytes: u64,
}

impl Chain {
    fn new(model: &str, block_bytes: usize) -> Self {
        Self {
            block_bytes,
            partial: Vec::with_capacity(block_bytes),
            last: xxh3_64_with_seed(model.as_bytes(), 0),
            blocks: Vec::new(),
            bytes: 0,
        }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        while !bytes.is_empty() && self.blocks.len() < MAX_BLOCKS {
            if self.partial.is_empty() && bytes.len() >= self.block_bytes {
                // A whole block in place: named without a copy.
                let (block, rest) = bytes.split_at(self.block_bytes);
                self.close(block);
                bytes = rest;
                continue;
            }
            let take = (self.block_bytes - self.partial.len()).min(bytes.len());
            self.partial.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.partial.len() == self.block_bytes {
                let block = std::mem::take(&mut self.partial);
                self.close(&block);
                self.partial = block;
                self.partial.clear();
            }
        }
    }

    fn close(&mut self, block: &[u8]) {
        self.last = xxh3_64_with_seed(block, self.last);
        self.blocks.push(self.last);
    }

    /// The name of everything fed so far, a partial block included.
    fn mark(&self) -> u64 {
        if self.partial.is_empty() {
            self.last
        } else {
            xxh3_64_with_seed(&self.partial, self.last ^ PARTIAL)
        }
    }
}

/// What one value was: a user message, or the string `"user"`; for a list of chat messages,
/// the chain's mark and length after its first user message.
#[derive(Default, Clone, Copy)]
struct Seen {
    user_string: bool,
    user_message: bool,
    first_user: Option<(u64, u64)>,
}

/// Feeds one JSON value into the chain, reporting what it was. With `roles` (a prompt member's
/// list of chat messages) it looks for the first element whose `role` is `"user"`.
struct Value<'c> {
    chain: &'c mut Chain,
    roles: bool,
}

impl<'de> DeserializeSeed<'de> for Value<'_> {
    type Value = Seen;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Seen, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_> {
    type Value = Seen;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Seen, E> {
        self.chain.feed(value.as_bytes());
        self.chain.feed(&[END_VALUE]);
        Ok(Seen {
            user_string: value == "user",
            ..Seen::default()
        })
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Seen, E> {
        self.scalar(if value { "true" } else { "false" })
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Seen, E> {
        self.scalar(&value.to_string())
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Seen, E> {
        self.scalar(&value.to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Seen, E> {
        self.scalar(&value.to_string())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Seen, E> {
        self.scalar("null")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
        let mut seen = Seen::default();
        while let Some(element) = seq.next_element_seed(Value {
            chain: &mut *self.chain,
            roles: false,
        })? {
            self.chain.feed(&[END_ITEM]);
            if self.roles && seen.first_user.is_none() && element.user_message {
                seen.first_user = Some((self.chain.mark(), self.chain.bytes));
            }
        }
        Ok(seen)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        let mut seen = Seen::default();
        while let Some(super::member_name::MemberName(name)) = map.next_key()? {
            self.chain.feed(name.as_bytes());
            self.chain.feed(&[END_VALUE]);
            let value = map.next_value_seed(Value {
                chain: &mut *self.chain,
                roles: false,
            })?;
            self.chain.feed(&[END_ITEM]);
            if name == "role" && value.user_string {
                seen.user_message = true;
            }
        }
        Ok(seen)
    }
}

impl Value<'_> {
    fn scalar<E: serde::de::Error>(self, text: &str) -> Result<Seen, E> {
        self.chain.feed(text.as_bytes());
        self.chain.feed(&[END_VALUE]);
        Ok(Seen::default())
    }
}
