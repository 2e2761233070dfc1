//! Removing the usage-only chunk that usage injection made the backend send, and giving back what
//! that chunk took from the stream.
//!
//! When the proxy added `stream_options.include_usage` for a client that did not ask for it, the
//! backend sends one extra event (`"choices": []` with `usage`). The client must not see it: it
//! receives what the backend would have sent without the injection.
//!
//! Some backends also *move* members into that chunk. llama.cpp's `llama-server` puts its
//! `timings` object (prompt and decode timings, cached prompt tokens) on the last event of the
//! stream: the finish chunk without `include_usage`, the usage chunk with it. Dropping the usage
//! chunk would lose `timings`. So the finish event (a choice with a `finish_reason`) is held back
//! until the next event: if that is the usage chunk, every member the usage chunk carries besides
//! `choices` and `usage` that the finish event lacks is spliced, as the backend wrote it, before the
//! finish event's closing `}`; then the finish event goes out. Any other next event (another
//! choice still streaming, `[DONE]`) releases it unchanged. On vLLM, SGLang and OpenAI the usage
//! chunk carries nothing extra and the finish event leaves as the same bytes, one event later; on
//! every server measured the two arrive in the same write (docs/transparency.md).
//!
//! Frames that hold only whole events and neither chunk pass through as the very same `Bytes`
//! (vLLM writes one event per frame, so that is every frame of a vLLM stream but those two, and
//! the finish frame too leaves uncopied). A frame that ends inside an event keeps that partial
//! event back until the event is complete: until then nobody can know whether it is the usage
//! chunk, and an SSE client cannot act on a partial event anyway. So re-framing happens only to
//! streams whose backend splits events across frames, and only for requests whose usage the proxy
//! injected.
use bytes::{Bytes, BytesMut};

use crate::sse::FramedEvent;

/// A byte span `[start, end)` of the stream, in stream offsets.
pub type Span = (u64, u64);

/// What an event of an injected stream is to the stripper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventRole {
    /// The usage-only chunk the injection asked for: removed.
    UsageOnly,
    /// A chunk where a choice finishes: held until the next event.
    Finish,
    /// Anything else: releases a held finish event.
    Other,
}

/// An edit the stripper applies to the stream, in stream order.
#[derive(Debug)]
enum Mark {
    /// A finish event to hold until the next event.
    Hold(Span),
    /// A usage-only event to remove, with the members to give back to the held finish event
    /// (each with its leading `,`), empty when there are none.
    Strip { span: Span, members: Bytes },
    /// Another event came after a held finish event: it goes as it is.
    Release,
}

/// Strips usage-only events from one stream.
#[derive(Debug, Default)]
pub struct UsageStripper {
    /// Bytes not yet forwarded (an open event, or a held finish event and what follows it),
    /// starting at stream offset `pending_start`.
    pending: Option<Bytes>,
    pending_start: u64,
    /// The finish event being held, if any.
    held: Option<Span>,
    /// Top-level member names of the last finish event (its members are not given back twice).
    finish_members: Vec<String>,
    /// Edits found in the frame being fed; the allocation is reused.
    marks: Vec<Mark>,
    /// A stripped event ended with a CR as the frame's last byte: an LF starting the next frame
    /// completes that CRLF and goes too.
    drop_lf_at: Option<u64>,
}

impl UsageStripper {
    /// Notes one event dispatched while feeding the current frame (call before [`Self::process`]).
    pub fn on_event(&mut self, role: EventRole, event: &FramedEvent<'_>) {
        let span = (event.start, event.end);
        match role {
            EventRole::UsageOnly => {
                let members = moved_members(event.data, &self.finish_members);
                self.marks.push(Mark::Strip { span, members });
            }
            EventRole::Finish => {
                self.finish_members = member_names(event.data);
                self.marks.push(Mark::Hold(span));
            }
            EventRole::Other => {
                if self.held.is_some() || matches!(self.marks.last(), Some(Mark::Hold(_))) {
                    self.marks.push(Mark::Release);
                }
            }
        }
    }

    /// Processes one frame covering stream offsets `[frame_start, frame_start + len)`, with the
    /// events noted since the last call; `boundary` is the scanner's block start after the frame
    /// (everything before it is whole events). Returns what to forward now, or `None` when
    /// nothing is ready.
    pub fn process(&mut self, frame: Bytes, frame_start: u64, boundary: u64) -> Option<Bytes> {
        if frame.is_empty() {
            return None;
        }
        let frame_end = frame_start + frame.len() as u64;
        let lf_owed = self.drop_lf_at == Some(frame_start);
        self.drop_lf_at = None;
        let marks = std::mem::take(&mut self.marks);
        if self.pending.is_none() && marks.is_empty() && boundary == frame_end && !lf_owed {
            self.marks = marks;
            return Some(frame);
        }
        let view = View {
            pending: self.pending.take(),
            pending_start: self.pending_start,
            frame,
            frame_start,
        };
        let mut out = Output::default();
        let mut cursor = view.start();
        if lf_owed && view.byte_at(frame_start) == Some(b'\n') {
            // The LF belongs to the stripped event's CRLF: skip it by emitting around it.
            out.push(view.slice(cursor, frame_start));
            cursor = frame_start + 1;
        }
        for mark in &marks {
            match *mark {
                Mark::Hold((start, end)) => {
                    // A finish event held before this one was followed by an event: it goes as is.
                    out.push(view.slice(cursor, start.max(cursor)));
                    cursor = start.max(cursor);
                    self.held = Some((start, end));
                }
                Mark::Strip {
                    span: (start, end),
                    ref members,
                } => {
                    let start = start.max(cursor);
                    let splice = self
                        .held
                        .take()
                        .filter(|_| !members.is_empty())
                        .and_then(|held| view.splice_point(held));
                    if let Some((at, first_member)) = splice {
                        out.push(view.slice(cursor, at));
                        // The finish event's object had no member: the first needs no comma.
                        out.push(if first_member {
                            members.slice(1..)
                        } else {
                            members.clone()
                        });
                        cursor = at;
                    }
                    out.push(view.slice(cursor, start));
                    let mut end = end.max(start);
                    if end > start && view.byte_at(end - 1) == Some(b'\r') {
                        if end == frame_end {
                            self.drop_lf_at = Some(end);
                        } else if view.byte_at(end) == Some(b'\n') {
                            end += 1;
                        }
                    }
                    cursor = end;
                }
                Mark::Release => self.held = None,
            }
        }
        let ready_end = match self.held {
            Some((held_start, _)) => held_start.clamp(cursor, frame_end),
            None => boundary.clamp(cursor, frame_end),
        };
        out.push(view.slice(cursor, ready_end));
        if ready_end < frame_end {
            self.pending_start = ready_end;
            self.pending = Some(view.slice(ready_end, frame_end));
        }
        self.marks = marks;
        self.marks.clear();
        out.finish()
    }

    /// At the end of the stream: what is still held (a finish event with no usage chunk after
    /// it, an unterminated last event), to forward as is.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.held = None;
        self.pending.take().filter(|bytes| !bytes.is_empty())
    }
}

/// The bytes not yet forwarded followed by the new frame: one contiguous run of the stream.
struct View {
    pending: Option<Bytes>,
    pending_start: u64,
    frame: Bytes,
    frame_start: u64,
}

impl View {
    fn start(&self) -> u64 {
        if self.pending.is_some() {
            self.pending_start
        } else {
            self.frame_start
        }
    }

    fn byte_at(&self, offset: u64) -> Option<u8> {
        if offset >= self.frame_start {
            return self
                .frame
                .get((offset - self.frame_start) as usize)
                .copied();
        }
        let pending = self.pending.as_ref()?;
        pending
            .get(offset.checked_sub(self.pending_start)? as usize)
            .copied()
    }

    /// The stream bytes `[from, to)`: a zero-copy slice when they lie in one piece.
    fn slice(&self, from: u64, to: u64) -> Bytes {
        if from >= to {
            return Bytes::new();
        }
        let frame_range = |from: u64, to: u64| {
            (from - self.frame_start) as usize..(to - self.frame_start) as usize
        };
        if from >= self.frame_start {
            return self.frame.slice(frame_range(from, to));
        }
        let Some(pending) = &self.pending else {
            return Bytes::new();
        };
        let head = (from - self.pending_start) as usize;
        if to <= self.frame_start {
            return pending.slice(head..(to - self.pending_start) as usize);
        }
        let mut joined = BytesMut::with_capacity((to - from) as usize);
        joined.extend_from_slice(&pending[head..]);
        joined.extend_from_slice(&self.frame[frame_range(self.frame_start, to)]);
        joined.freeze()
    }

    /// Where members can be added to the held event `[start, end)`: at its JSON object's closing
    /// `}`, when only line endings follow it in the block (the shape every server writes); and
    /// whether the object is empty so far. `None` leaves the event as it is.
    fn splice_point(&self, (start, end): Span) -> Option<(u64, bool)> {
        let mut at = end;
        loop {
            at = at.checked_sub(1).filter(|&at| at >= start)?;
            match self.byte_at(at)? {
                b'\r' | b'\n' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        let mut before = at;
        let empty = loop {
            before = before.checked_sub(1).filter(|&b| b >= start)?;
            match self.byte_at(before)? {
                b' ' | b'\t' | b'\r' | b'\n' => continue,
                byte => break byte == b'{',
            }
        };
        Some((at, empty))
    }
}

/// What to forward: one zero-copy piece, or the pieces joined.
#[derive(Default)]
struct Output {
    first: Option<Bytes>,
    joined: Option<BytesMut>,
}

impl Output {
    fn push(&mut self, piece: Bytes) {
        if piece.is_empty() {
            return;
        }
        if let Some(joined) = &mut self.joined {
            joined.extend_from_slice(&piece);
        } else if let Some(first) = self.first.take() {
            let mut joined = BytesMut::with_capacity(first.len() + piece.len());
            joined.extend_from_slice(&first);
            joined.extend_from_slice(&piece);
            self.joined = Some(joined);
        } else {
            self.first = Some(piece);
        }
    }

    fn finish(self) -> Option<Bytes> {
        match self.joined {
            Some(joined) => Some(joined.freeze()),
            None => self.first,
        }
    }
}

/// The top-level member names of a JSON object (empty when `data` is not one).
fn member_names(data: &[u8]) -> Vec<String> {
    members(data)
        .map(|members| members.into_iter().map(|(name, _)| name).collect())
        .unwrap_or_default()
}

/// The members of a usage-only chunk that the backend moved there from the finish event: all
/// but `choices`, `usage` and the members the finish event has, each as the backend wrote it
/// (separator, key, value), with a leading `,`. Empty when there are none.
fn moved_members(data: &[u8], finish_members: &[String]) -> Bytes {
    let Some(members) = members(data) else {
        return Bytes::new();
    };
    let mut moved = BytesMut::new();
    // Each member's text runs from the end of the previous value (its `,` included).
    let mut previous_end: Option<usize> = None;
    for (name, value) in members {
        let keep = name != "choices" && name != "usage" && !finish_members.contains(&name);
        if keep {
            match previous_end {
                Some(from) => moved.extend_from_slice(&data[from..value.end]),
                None => {
                    // The first member: from just after the opening brace, with a comma added.
                    let open = data.iter().position(|&b| b == b'{').map_or(0, |at| at + 1);
                    moved.extend_from_slice(b",");
                    moved.extend_from_slice(data[open..value.end].trim_ascii_start());
                }
            }
        }
        previous_end = Some(value.end);
    }
    moved.freeze()
}

/// The members of a JSON object: names (unescaped) and where each value lies in `data`. Parsing
/// runs once per stream (finish and usage chunks only), so it may allocate.
fn members(data: &[u8]) -> Option<Vec<(String, std::ops::Range<usize>)>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = serde::Deserializer::deserialize_map(&mut de, RawMembers).ok()?;
    de.end().ok()?;
    let base = text.as_ptr() as usize;
    raw.into_iter()
        .map(|(name, value)| {
            let start = (value.get().as_ptr() as usize).checked_sub(base)?;
            Some((name, start..start + value.get().len()))
        })
        .collect()
}

/// Collects a JSON object's members with borrowed raw values, in order.
struct RawMembers;

impl<'de> serde::de::Visitor<'de> for RawMembers {
    type Value = Vec<(String, &'de serde_json::value::RawValue)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            members.push((name, map.next_value()?));
        }
        Ok(members)
    }
}

#[cfg(test)]
mod tests;
