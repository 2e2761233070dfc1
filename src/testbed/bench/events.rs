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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventInfo {
    pub kind: EventKind,
    /// `usage.completion_tokens` if the event carries it (continuous usage: cumulative).
    pub completion_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// Carries generated output.
    Token,
    /// Role chunk, usage-only chunk, empty deltas: not output.
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
        completion_tokens: None,
        prompt_tokens: None,
    };
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return info(EventKind::Done);
    }
    let chunk: Chunk = match serde_json::from_slice(trimmed) {
        Ok(c) => c,
        Err(e) => return info(EventKind::Invalid(e.to_string())),
    };
    let (completion_tokens, prompt_tokens) = chunk
        .usage
        .as_ref()
        .map_or((None, None), |u| (u.completion_tokens, u.prompt_tokens));
    let kind = if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| err.to_string(), str::to_string);
        EventKind::Error(msg)
    } else if chunk
        .choices
        .as_deref()
        .is_some_and(|cs| cs.iter().any(Choice::carries_output))
    {
        EventKind::Token
    } else {
        EventKind::Other
    };
    EventInfo {
        kind,
        completion_tokens,
        prompt_tokens,
    }
}

#[cfg(test)]
mod tests;
