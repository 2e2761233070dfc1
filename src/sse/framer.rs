//! One framer over both body framings, so the metering body has a single code path: it feeds
//! every upstream frame to a [`Framer`] and classifies what comes out, whatever the dialect.

use super::ndjson::NdJsonScanner;
use super::Scanner;

/// One event of the stream: an SSE event, or one NDJSON line (with an empty `event`). Its slices
/// live only for the callback (see [`super::Event`]).
pub type FramedEvent<'a> = super::Event<'a>;

/// How a response body is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// `text/event-stream` (WHATWG Server-Sent Events).
    Sse,
    /// Newline-delimited JSON (`application/x-ndjson`): one event per line.
    NdJson,
}

/// The scanner of one stream.
#[derive(Debug)]
pub enum Framer {
    Sse(Scanner),
    NdJson(NdJsonScanner),
}

impl Framer {
    /// A framer for `format`; `max_line` caps one line (and, for SSE, one event's data).
    pub fn new(format: StreamFormat, max_line: usize) -> Self {
        match format {
            StreamFormat::Sse => Framer::Sse(Scanner::new(max_line)),
            StreamFormat::NdJson => Framer::NdJson(NdJsonScanner::new(max_line)),
        }
    }

    /// Scans the next frame, calling `f` for every event it completes, in order.
    pub fn feed<F: FnMut(FramedEvent<'_>)>(&mut self, chunk: &[u8], f: F) {
        match self {
            Framer::Sse(scanner) => scanner.feed(chunk, f),
            Framer::NdJson(scanner) => scanner.feed(chunk, f),
        }
    }

    /// Ends the stream. SSE discards an unterminated event (WHATWG); NDJSON reports an
    /// unterminated last line, which is how some servers end their final (usage) object.
    pub fn finish<F: FnMut(FramedEvent<'_>)>(&mut self, f: F) {
        match self {
            Framer::Sse(_) => {}
            Framer::NdJson(scanner) => scanner.finish(f),
        }
    }

    /// Total bytes fed (the stream offset of the next byte).
    pub fn position(&self) -> u64 {
        match self {
            Framer::Sse(scanner) => scanner.position(),
            Framer::NdJson(scanner) => scanner.position(),
        }
    }

    /// Stream offset where the open (not yet dispatched) event or line starts.
    pub fn block_start(&self) -> u64 {
        match self {
            Framer::Sse(scanner) => scanner.block_start(),
            Framer::NdJson(scanner) => scanner.block_start(),
        }
    }

    /// How many lines or events exceeded `max_line` and were dropped.
    pub fn overflows(&self) -> u64 {
        match self {
            Framer::Sse(scanner) => scanner.overflows(),
            Framer::NdJson(scanner) => scanner.overflows(),
        }
    }
}
