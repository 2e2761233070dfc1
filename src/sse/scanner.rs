//! The incremental scanner: bytes in, [`Event`]s out, frames never modified or retained.
//!
//! Long on purpose: one state machine over raw bytes (the WHATWG rules, on the per-chunk path);
//! split, each of its states would be read in another file.
//!
//! It implements the WHATWG event-stream interpretation (REFERENCE.md §5) on raw bytes: one
//! leading BOM stripped, lines ended by CRLF, LF or a lone CR, `:` comments, `data` lines joined
//! with `\n`, `event` naming the event, a blank line dispatching it, and an event whose data
//! buffer is empty not dispatched. `id` and `retry` are parsed as fields and ignored: we meter
//! streams, we do not reconnect them.
//!
//! Offsets count every byte of the stream, the BOM included. Because a CR may end a line before
//! the reader can know whether an LF follows (it may sit in the next frame), the scanner treats
//! the CR as the line ending the moment it sees it: a blank line ending in CR or CRLF dispatches
//! at once with `end` just past the CR, and the LF of a CRLF (in the same frame or the next one)
//! is consumed silently, belonging to no event; the next block starts after it. This keeps the
//! offsets identical however the stream is cut into frames, and no event waits for a frame that
//! may take seconds to come.

use std::ops::Range;

use memchr::{memchr, memchr2};

/// The default cap for one line and for one event's data: 1 MiB. vLLM's largest events (a final
/// usage chunk, a long tool-call argument delta) are a few KiB; a megabyte leaves room for any
/// sane server while bounding what one misbehaving stream can make us hold.
pub const DEFAULT_MAX_LINE: usize = 1 << 20;

/// The UTF-8 byte order mark, stripped once at stream start.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// One dispatched event. Its slices borrow either the frame being fed (the common case: a single
/// `data` line and its blank line inside one frame) or the scanner's reusable buffers, so they live
/// only for the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event:` field's value, empty when none was given (= "message").
    pub event: &'a [u8],
    /// The data: all `data` field values of the event joined with b'\n'.
    pub data: &'a [u8],
    /// Stream offset of the first byte of this event's block (after the previous blank line, so
    /// it includes any comment lines inside the block).
    pub start: u64,
    /// Stream offset just past the blank line that dispatched it; for a blank line ended by CRLF
    /// that is just past the CR (see the module docs).
    pub end: u64,
}

/// Where a field value of the open event lives. `Chunk` ranges point into the frame being fed and
/// are copied into the owned buffer before `feed` returns, so nothing outlives its frame.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// No value yet.
    Empty,
    /// A single value, inside the current frame.
    Chunk(Range<usize>),
    /// The value is in the scanner's own buffer.
    Owned,
}

/// Where the line being handled lives, so a value can be borrowed from the frame when possible.
#[derive(Debug, Clone, Copy)]
enum LineSrc {
    /// The line is the frame's bytes starting at this index.
    Chunk(usize),
    /// The line was assembled in the carry buffer (it spans frames).
    Carry,
}

/// How far the leading-BOM check has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BomState {
    /// This many bytes of the BOM have been seen at stream start (0..=2).
    Matching(u8),
    /// Stripped, or ruled out: never look again.
    Done,
}

/// A byte-level, incremental SSE scanner for one stream. See the module docs for the rules.
#[derive(Debug)]
pub struct Scanner {
    max_line: usize,
    /// Total bytes fed (the stream offset of the next byte).
    position: u64,
    /// Stream offset where the open block starts.
    block_start: u64,
    bom: BomState,
    /// The last frame ended in a CR: an LF opening the next frame completes that line ending.
    pending_cr: bool,
    /// The partial line carried over from the previous frame (at most `max_line` bytes).
    line: Vec<u8>,
    /// The current line outgrew `max_line`: discard bytes until its line ending.
    skipping: bool,
    /// The open event lost data to an overflow; it must not be dispatched.
    broken: bool,
    data: Slot,
    /// The open event's joined data (without the final `\n`), when `data` is `Slot::Owned`.
    data_buf: Vec<u8>,
    event: Slot,
    event_buf: Vec<u8>,
    overflows: u64,
}

impl Default for Scanner {
    /// A scanner with the [`DEFAULT_MAX_LINE`] cap (1 MiB).
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LINE)
    }
}

impl Scanner {
    /// `max_line` caps the bytes carried over for one partial line and the data accumulated for one event.
    pub fn new(max_line: usize) -> Self {
        Self {
            max_line,
            position: 0,
            block_start: 0,
            bom: BomState::Matching(0),
            pending_cr: false,
            line: Vec::new(),
            skipping: false,
            broken: false,
            data: Slot::Empty,
            data_buf: Vec::new(),
            event: Slot::Empty,
            event_buf: Vec::new(),
            overflows: 0,
        }
    }

    /// How many times a line or event exceeded `max_line` (the oversized line/event is dropped, never buffered).
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// Total bytes fed so far (stream offset of the next byte).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Stream offset where the currently open (not yet terminated by a blank line) block of lines
    /// starts; equals `position()` when the stream is exactly at a block boundary.
    pub fn block_start(&self) -> u64 {
        self.block_start
    }

    /// Bytes of the partial line carried over (tests check the cap holds).
    #[cfg(test)]
    pub(super) fn carried_len(&self) -> usize {
        self.line.len()
    }

    /// Total capacity of the reusable buffers (tests check steady state does not grow them).
    #[cfg(test)]
    pub(super) fn buffer_capacity(&self) -> usize {
        self.line.capacity() + self.data_buf.capacity() + self.event_buf.capacity()
    }

    /// Scans the next chunk of the stream, calling `on_event` for every event dispatched by this chunk, in order.
    pub fn feed<F: FnMut(Event<'_>)>(&mut self, chunk: &[u8], mut on_event: F) {
        if chunk.is_empty() {
            return;
        }
        let base = self.position;
        self.position += chunk.len() as u64;
        let mut i = self.skip_bom(chunk);
        if self.pending_cr && i < chunk.len() {
            self.pending_cr = false;
            if chunk[i] == b'\n' {
                i += 1;
                // The LF completes the previous frame's CRLF. When that CR ended a blank line, the
                // LF belongs to no block: the next one starts after it.
                if self.block_start == base {
                    self.block_start = base + 1;
                }
            }
        }
        while i < chunk.len() {
            let rest = &chunk[i..];
            let Some(k) = memchr2(b'\r', b'\n', rest) else {
                self.carry(rest);
                break;
            };
            let term = i + k;
            let mut next = term + 1;
            // `end` of a dispatched event: past the CR even when an LF follows (module docs).
            let end = base + next as u64;
            if chunk[term] == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            let after = base + next as u64;
            self.end_line(chunk, i, term, end, after, &mut on_event);
            i = next;
        }
        self.own_chunk_slots(chunk);
    }

    /// Consumes what is left of a leading BOM at the front of `chunk`; returns the index where
    /// stream content starts. A partial BOM that turns out not to be one is stream content.
    fn skip_bom(&mut self, chunk: &[u8]) -> usize {
        let BomState::Matching(mut seen) = self.bom else {
            return 0;
        };
        let mut i = 0;
        while let Some(&b) = chunk.get(i) {
            if b != BOM[usize::from(seen)] {
                self.bom = BomState::Done;
                // The bytes that looked like a BOM start the first line. They may lie in earlier
                // frames, so they go to the carry buffer whichever frame they came in.
                self.carry(&BOM[..usize::from(seen)]);
                return i;
            }
            seen += 1;
            i += 1;
            if usize::from(seen) == BOM.len() {
                self.bom = BomState::Done;
                self.block_start = BOM.len() as u64;
                return i;
            }
        }
        self.bom = BomState::Matching(seen);
        i
    }

    /// Keeps the unterminated tail of a frame for the next one, or drops the line (and breaks the
    /// open event) when it outgrows `max_line`.
    fn carry(&mut self, bytes: &[u8]) {
        if self.skipping || bytes.is_empty() {
            return;
        }
        if self.line.len() + bytes.len() > self.max_line {
            self.overflow_line();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn overflow_line(&mut self) {
        self.overflows += 1;
        self.broken = true;
        self.skipping = true;
        self.line.clear();
    }

    /// Handles the line that ends at `chunk[term]` (its bytes are the carry buffer followed by
    /// `chunk[from..term]`).
    fn end_line<F: FnMut(Event<'_>)>(
        &mut self,
        chunk: &[u8],
        from: usize,
        term: usize,
        end: u64,
        after: u64,
        on_event: &mut F,
    ) {
        if self.skipping {
            // The tail of an oversized line: it was counted and dropped already.
            self.skipping = false;
            return;
        }
        let tail = &chunk[from..term];
        if self.line.len() + tail.len() > self.max_line {
            self.overflows += 1;
            self.broken = true;
            self.line.clear();
            return;
        }
        if self.line.is_empty() {
            self.on_line(chunk, tail, LineSrc::Chunk(from), end, after, on_event);
        } else {
            // Take the buffer so the line can be read while the event state is updated; put it
            // back so its capacity is reused.
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(tail);
            self.on_line(chunk, &line, LineSrc::Carry, end, after, on_event);
            line.clear();
            self.line = line;
        }
    }

    /// Interprets one complete line (without its line ending).
    fn on_line<F: FnMut(Event<'_>)>(
        &mut self,
        chunk: &[u8],
        line: &[u8],
        src: LineSrc,
        end: u64,
        after: u64,
        on_event: &mut F,
    ) {
        if line.is_empty() {
            self.dispatch(chunk, end, on_event);
            self.block_start = after;
            return;
        }
        let colon = memchr(b':', line);
        if colon == Some(0) {
            return; // a comment
        }
        let (name, value_at) = match colon {
            Some(c) if line.get(c + 1) == Some(&b' ') => (&line[..c], c + 2),
            Some(c) => (&line[..c], c + 1),
            None => (line, line.len()),
        };
        let value = &line[value_at..];
        let in_chunk = match src {
            LineSrc::Chunk(at) => Some(at + value_at..at + line.len()),
            LineSrc::Carry => None,
        };
        match name {
            b"data" => self.push_data(chunk, value, in_chunk),
            b"event" => {
                self.event_buf.clear();
                self.event = match in_chunk {
                    Some(range) => Slot::Chunk(range),
                    None => {
                        self.event_buf.extend_from_slice(value);
                        Slot::Owned
                    }
                };
            }
            // `id`, `retry` and unknown fields change nothing we report.
            _ => {}
        }
    }

    /// Appends one `data` value to the open event, keeping a lone in-frame value borrowed.
    fn push_data(&mut self, chunk: &[u8], value: &[u8], in_chunk: Option<Range<usize>>) {
        if self.broken {
            return;
        }
        let joined = match &self.data {
            Slot::Empty => value.len(),
            Slot::Chunk(range) => range.len() + 1 + value.len(),
            Slot::Owned => self.data_buf.len() + 1 + value.len(),
        };
        if joined > self.max_line {
            self.overflows += 1;
            self.broken = true;
            self.data = Slot::Empty;
            self.data_buf.clear();
            return;
        }
        match std::mem::replace(&mut self.data, Slot::Owned) {
            Slot::Empty => match in_chunk {
                Some(range) => self.data = Slot::Chunk(range),
                None => {
                    self.data_buf.clear();
                    self.data_buf.extend_from_slice(value);
                }
            },
            // A second data line: the event can no longer borrow one slice of the frame.
            Slot::Chunk(first) => {
                self.data_buf.clear();
                self.data_buf
                    .extend_from_slice(chunk.get(first).unwrap_or_default());
                self.data_buf.push(b'\n');
                self.data_buf.extend_from_slice(value);
            }
            Slot::Owned => {
                self.data_buf.push(b'\n');
                self.data_buf.extend_from_slice(value);
            }
        }
    }

    /// Emits the open event if it has data and lost nothing, then resets the event state.
    fn dispatch<F: FnMut(Event<'_>)>(&mut self, chunk: &[u8], end: u64, on_event: &mut F) {
        let data = std::mem::replace(&mut self.data, Slot::Empty);
        let event = std::mem::replace(&mut self.event, Slot::Empty);
        if !self.broken && data != Slot::Empty {
            on_event(Event {
                event: slot_bytes(&event, chunk, &self.event_buf),
                data: slot_bytes(&data, chunk, &self.data_buf),
                start: self.block_start,
                end,
            });
        }
        self.broken = false;
        self.data_buf.clear();
        self.event_buf.clear();
    }

    /// Before a frame goes away, copies any value still borrowed from it into the owned buffers.
    fn own_chunk_slots(&mut self, chunk: &[u8]) {
        if let Slot::Chunk(range) = &self.data {
            self.data_buf.clear();
            self.data_buf
                .extend_from_slice(chunk.get(range.clone()).unwrap_or_default());
            self.data = Slot::Owned;
        }
        if let Slot::Chunk(range) = &self.event {
            self.event_buf.clear();
            self.event_buf
                .extend_from_slice(chunk.get(range.clone()).unwrap_or_default());
            self.event = Slot::Owned;
        }
    }
}

/// The bytes a slot stands for.
fn slot_bytes<'a>(slot: &Slot, chunk: &'a [u8], owned: &'a [u8]) -> &'a [u8] {
    match slot {
        Slot::Empty => &[],
        Slot::Chunk(range) => chunk.get(range.clone()).unwrap_or_default(),
        Slot::Owned => owned,
    }
}
