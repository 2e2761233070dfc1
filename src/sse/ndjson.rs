//! The incremental NDJSON line scanner: Ollama's native streams are one JSON object per line
//! (`application/x-ndjson`), not SSE.
//!
//! It mirrors [`crate::sse::Scanner`] so the meter has one code path for both: bytes in,
//! [`Event`]s out (one per non-empty line, `event` always empty), frames never modified or
//! retained. A line that lies whole inside one frame is lent straight from it; only a line that
//! spans frames is copied, into a carry buffer reused for the life of the stream and capped at
//! `max_line` bytes (a longer line is dropped and counted in [`NdJsonScanner::overflows`]).
//!
//! Lines end in `\n`; a `\r` just before it is part of the line ending (`\r\n`), so `data` never
//! holds it. Lines that are empty or all ASCII whitespace are skipped. Offsets count raw stream
//! bytes: `start` is the line's first byte and `end` is just past its `\n`, so they do not depend
//! on how the stream is cut into frames. An unterminated last line is held until
//! [`NdJsonScanner::finish`] (NDJSON writers end every line, but a server may not).

use memchr::memchr;

use crate::sse::Event;

/// A byte-level, incremental NDJSON scanner for one stream. See the module docs.
#[derive(Debug)]
pub struct NdJsonScanner {
    max_line: usize,
    /// Total bytes fed (the stream offset of the next byte).
    position: u64,
    /// Stream offset where the current (partial) line starts.
    line_start: u64,
    /// The partial line carried over from earlier frames (at most `max_line` bytes).
    carry: Vec<u8>,
    /// The current line outgrew `max_line`: discard bytes until its `\n`.
    skipping: bool,
    overflows: u64,
}

impl NdJsonScanner {
    /// `max_line` caps the bytes of one line (the carry-over buffer never holds more).
    pub fn new(max_line: usize) -> Self {
        Self {
            max_line,
            position: 0,
            line_start: 0,
            carry: Vec::new(),
            skipping: false,
            overflows: 0,
        }
    }

    /// How many lines exceeded `max_line` (each was dropped, never buffered whole).
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// Total bytes fed so far (stream offset of the next byte).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Stream offset where the current, not yet terminated line starts; equals `position()` at a
    /// line boundary.
    pub fn block_start(&self) -> u64 {
        self.line_start
    }

    /// Bytes of the partial line carried over (tests check the cap holds).
    #[cfg(test)]
    pub(super) fn carried_len(&self) -> usize {
        self.carry.len()
    }

    /// Scans the next chunk, calling `on_event` for every line this chunk completes, in order.
    pub fn feed<F: FnMut(Event<'_>)>(&mut self, chunk: &[u8], mut on_event: F) {
        let base = self.position;
        self.position += chunk.len() as u64;
        let mut i = 0;
        while i < chunk.len() {
            let rest = &chunk[i..];
            let Some(k) = memchr(b'\n', rest) else {
                self.keep(rest);
                break;
            };
            let next = i + k + 1;
            let end = base + next as u64;
            let tail = &rest[..k];
            if self.skipping {
                // The tail of an oversized line: counted and dropped already.
                self.skipping = false;
            } else if self.carry.len() + tail.len() > self.max_line {
                self.overflows += 1;
                self.carry.clear();
            } else if self.carry.is_empty() {
                emit(tail, self.line_start, end, &mut on_event);
            } else {
                // Take the buffer so the line can be lent out; put it back to reuse its capacity.
                let mut line = std::mem::take(&mut self.carry);
                line.extend_from_slice(tail);
                emit(&line, self.line_start, end, &mut on_event);
                line.clear();
                self.carry = line;
            }
            self.line_start = end;
            i = next;
        }
    }

    /// Ends the stream: an unterminated last line is reported (with `end` = the stream's length)
    /// unless it overflowed. Feeding after `finish` starts a new line.
    pub fn finish<F: FnMut(Event<'_>)>(&mut self, mut on_event: F) {
        if !self.skipping && !self.carry.is_empty() {
            let line = std::mem::take(&mut self.carry);
            emit(&line, self.line_start, self.position, &mut on_event);
            self.carry = line;
        }
        self.carry.clear();
        self.skipping = false;
        self.line_start = self.position;
    }

    /// Keeps the unterminated tail of a frame, or drops the line when it outgrows `max_line`.
    fn keep(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if self.carry.len() + bytes.len() > self.max_line {
            self.overflows += 1;
            self.skipping = true;
            self.carry.clear();
        } else {
            self.carry.extend_from_slice(bytes);
        }
    }
}

/// Reports one line (without its `\n`), minus a `\r` that ends it, unless it is blank.
fn emit<F: FnMut(Event<'_>)>(line: &[u8], start: u64, end: u64, on_event: &mut F) {
    let data = line.strip_suffix(b"\r").unwrap_or(line);
    if data.trim_ascii().is_empty() {
        return;
    }
    on_event(Event {
        event: &[],
        data,
        start,
        end,
    });
}

#[cfg(test)]
mod tests;
