//! The client side of the stream: splitting SSE bytes into events and deciding which events
//! are token events (REFERENCE.md §1).
//!
//! Deliberately independent of `crate::sse` (the proxy's scanner): `bench` cross-checks the
//! proxy, so a shared bug must not make both agree on a wrong answer. It follows the WHATWG
//! line rules (CRLF / LF / lone CR, a CR-LF split across reads, BOM, comments, multi-line
//! `data`) but only keeps `data`: OpenAI-style streams carry nothing else of interest.
use memchr::memchr2;
use serde::de::IgnoredAny;
use serde::Deserialize;

/// Incremental SSE splitter: feed it frames, get each event's data as it completes.
#[derive(Debug, Default)]
pub(crate) struct EventSplitter {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    /// The previous read ended in CR: a LF starting the next one belongs to that line ending.
    skip_lf: bool,
    seen_first_line: bool,
}

impl EventSplitter {
    /// Feeds one read; calls `on_event` with the data of every event it completes.
    pub(crate) fn push(&mut self, mut chunk: &[u8], mut on_event: impl FnMut(&[u8])) {
        // Bounded: every iteration consumes at least one byte.
        while !chunk.is_empty() {
            if std::mem::take(&mut self.skip_lf) && chunk[0] == b'\n' {
                chunk = &chunk[1..];
                continue;
            }
            match memchr2(b'\n', b'\r', chunk) {
                None => {
                    self.line.extend_from_slice(chunk);
                    return;
                }
                Some(i) => {
                    self.line.extend_from_slice(&chunk[..i]);
                    self.skip_lf = chunk[i] == b'\r';
                    chunk = &chunk[i + 1..];
                    self.finish_line(&mut on_event);
                }
            }
        }
    }

    fn finish_line(&mut self, on_event: &mut impl FnMut(&[u8])) {
        let Self {
            line,
            data,
            has_data,
            skip_lf: _,
            seen_first_line,
        } = self;
        let mut l = &line[..];
        if !std::mem::replace(seen_first_line, true) {
            l = l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l);
        }
        if l.is_empty() {
            if std::mem::take(has_data) {
                on_event(data);
            }
            data.clear();
        } else if l[0] != b':' {
            let (field, value) = match l.iter().position(|&b| b == b':') {
                Some(i) => {
                    let v = &l[i + 1..];
                    (&l[..i], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (l, &[][..]),
            };
            if field == b"data" {
                if *has_data {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
                *has_data = true;
            }
        }
        line.clear();
    }
}

/// What one event's data means to the bench client.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct EventInfo {
    pub kind: EventKind,
    /// `usage.completion_tokens` if the event carries it (continuous usage: cumulative).
    pub completion_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens` (vLLM with `--enable-prompt-tokens-details`,
    /// OpenAI, llama.cpp).
    pub cached_tokens: Option<u64>,
    /// llama.cpp's `timings.cache_n` (on its last chunk): the prompt tokens its slot reused, the
    /// stand-in when the usage has no `prompt_tokens_details`.
    pub cache_n: Option<u64>,
    /// The reply text the event carries (`delta.content`, or `text` for completions), moved out
    /// of the parsed chunk: a session sends it back as the assistant's message.
    pub content: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum EventKind {
    /// Carries generated output.
    Token,
    /// Role chunk, usage-only chunk, empty deltas: not output.
    #[default]
    Other,
    /// `data: [DONE]`.
    Done,
    /// `data: {"error": ...}`, with its message.
    Error(String),
    /// Not JSON we understand.
    Invalid(String),
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    timings: Option<Timings>,
}

/// llama.cpp's per-request timings; only the cache figure matters here.
#[derive(Deserialize)]
struct Timings {
    #[serde(default)]
    cache_n: Option<u64>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<IgnoredAny>>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

fn non_empty(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

impl Choice {
    fn carries_output(&self) -> bool {
        non_empty(&self.text)
            || self.delta.as_ref().is_some_and(|d| {
                non_empty(&d.content)
                    || non_empty(&d.reasoning)
                    || non_empty(&d.reasoning_content)
                    || d.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
            })
    }
}

/// Classifies one event's data.
pub(crate) fn classify(data: &[u8]) -> EventInfo {
    let info = |kind| EventInfo {
        kind,
        ..EventInfo::default()
    };
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return info(EventKind::Done);
    }
    let chunk: Chunk = match serde_json::from_slice(trimmed) {
        Ok(c) => c,
        Err(e) => return info(EventKind::Invalid(e.to_string())),
    };
    let Chunk {
        choices,
        usage,
        error,
        timings,
    } = chunk;
    let (completion_tokens, prompt_tokens, cached_tokens) = usage.map_or((None, None, None), |u| {
        let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens);
        (u.completion_tokens, u.prompt_tokens, cached)
    });
    let kind = if let Some(err) = error.filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| err.to_string(), str::to_string);
        EventKind::Error(msg)
    } else if choices
        .as_deref()
        .is_some_and(|cs| cs.iter().any(Choice::carries_output))
    {
        EventKind::Token
    } else {
        EventKind::Other
    };
    // One choice (bench never asks for n > 1): its content, or its completions text.
    let content = choices
        .into_iter()
        .flatten()
        .find_map(|c| c.delta.and_then(|d| d.content).or(c.text))
        .filter(|t| !t.is_empty());
    EventInfo {
        kind,
        completion_tokens,
        prompt_tokens,
        cached_tokens,
        cache_n: timings.and_then(|t| t.cache_n),
        content,
    }
}

#[cfg(test)]
mod tests;
