//! A byte-level follower of HTTP/1.1 request framing, run alongside hyper on the bytes a client
//! sends, to spot the one smuggling shape hyper accepts silently.
//!
//! hyper rejects two different `content-length`s, but a request with both `transfer-encoding:
//! chunked` and `content-length` it reads as chunked and drops the length (RFC 9112 §6.3 allows
//! that). Such a request "ought to be handled as an error" (same section): a front proxy that
//! trusted the length would see a different request boundary than we do. hyper gives no way to
//! see a header it dropped, so this follower reads the request heads itself and says which request
//! of the connection (0-based) had both.
//!
//! To know where the next head starts it must follow each body: `content-length` bytes, or the
//! chunked coding (size line, data, CRLF, ..., last chunk, trailers). It never buffers a body and
//! copies a head only when it arrives split over reads. Whatever it does not follow exactly — an
//! HTTP/2 preface, `CONNECT` or `upgrade`, a malformed head, a head over `max_head` bytes — turns
//! it off for the rest of the connection: hyper rejects the malformed ones itself, and being off
//! can only miss, never flag a request that is well framed.
use memchr::memchr;

/// The HTTP/2 connection preface (RFC 9113 §3.4) an h2c prior-knowledge client sends first;
/// the server's protocol sniffing uses it too.
pub(crate) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Its request line, `PRI * HTTP/2.0`: enough to tell, and no HTTP/1 request starts with it.
const H2_REQUEST_LINE: &[u8] = H2_PREFACE.split_at(14).0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The first bytes of the connection: HTTP/2 preface or HTTP/1 request line?
    Start,
    /// Between requests or inside a head.
    Head,
    /// Body bytes left of a `content-length` body.
    Fixed(u64),
    /// Reading a chunk-size line: the size so far, and whether an extension (`;...`) began.
    ChunkSize { size: u64, digits: u8, ext: bool },
    /// Data bytes left of the current chunk.
    ChunkData(u64),
    /// The CRLF after a chunk's data; `true` once the CR was seen.
    ChunkEnd { cr: bool },
    /// Trailer lines after the last chunk, up to an empty line.
    Trailers(Line),
    /// Not following this connection any more.
    Off,
}

/// Where a trailer line is: at its start, after a lone CR, or inside text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Start,
    Cr,
    Text,
}

/// Follows one connection's request stream; see the module docs.
#[derive(Debug)]
pub(crate) struct FramingScanner {
    state: State,
    /// The part of a head that arrived in earlier reads (empty, and unallocated, between heads).
    carry: Vec<u8>,
    max_head: usize,
    /// Heads read so far: the index the next head will have.
    heads: u64,
    /// The first request that carried both `transfer-encoding` and `content-length`.
    conflicting: Option<u64>,
}

/// What one head says about framing.
#[derive(Debug, Default, PartialEq, Eq)]
struct HeadFacts {
    /// Any `content-length` line, valid or not (hyper skips them once it saw `transfer-encoding`).
    has_content_length: bool,
    content_length: Option<u64>,
    /// A `content-length` that is not one number (hyper rejects it when it reads it).
    bad_content_length: bool,
    transfer_encoding: bool,
    chunked: bool,
    /// The connection may switch protocols after this request (`CONNECT`, `upgrade`).
    switches: bool,
}

impl FramingScanner {
    /// A follower for a new connection; heads longer than `max_head` bytes turn it off.
    pub fn new(max_head: usize) -> Self {
        Self {
            state: State::Start,
            carry: Vec::new(),
            max_head,
            heads: 0,
            conflicting: None,
        }
    }

    /// The 0-based index of the first request with conflicting framing, once seen.
    pub fn conflicting(&self) -> Option<u64> {
        self.conflicting
    }

    /// Whether it still follows the connection.
    pub fn active(&self) -> bool {
        self.state != State::Off
    }

    #[cfg(test)]
    /// Heads read so far.
    pub fn heads(&self) -> u64 {
        self.heads
    }

    /// Feeds the next bytes the client sent.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.state != State::Off {
            let used = match self.state {
                State::Start => self.start(bytes),
                State::Head => self.head(bytes),
                State::Fixed(left) => {
                    let (used, rest) = skip(left, bytes.len());
                    self.state = if rest == 0 {
                        State::Head
                    } else {
                        State::Fixed(rest)
                    };
                    used
                }
                State::ChunkSize { size, digits, ext } => self.chunk_size(bytes, size, digits, ext),
                State::ChunkData(left) => {
                    let (used, rest) = skip(left, bytes.len());
                    self.state = if rest == 0 {
                        State::ChunkEnd { cr: false }
                    } else {
                        State::ChunkData(rest)
                    };
                    used
                }
                State::ChunkEnd { cr } => {
                    self.state = match (cr, bytes[0]) {
                        (false, b'\r') => State::ChunkEnd { cr: true },
                        (_, b'\n') => State::ChunkSize {
                            size: 0,
                            digits: 0,
                            ext: false,
                        },
                        _ => State::Off,
                    };
                    1
                }
                State::Trailers(line) => self.trailers(bytes, line),
                State::Off => bytes.len(),
            };
            bytes = &bytes[used..];
        }
    }

    fn start(&mut self, bytes: &[u8]) -> usize {
        let seen = self.carry.len();
        let want = H2_REQUEST_LINE.len() - seen;
        let take = want.min(bytes.len());
        let is_prefix = H2_REQUEST_LINE[seen..seen + take] == bytes[..take];
        if !is_prefix {
            // An HTTP/1 request: what was held back is the start of its head.
            self.state = State::Head;
            return 0;
        }
        if take == want {
            self.state = State::Off;
            self.carry = Vec::new();
            return take;
        }
        // Too short to tell yet: keep it as a (possible) head start.
        self.carry.extend_from_slice(&bytes[..take]);
        take
    }

    /// Consumes head bytes; at the head's end, reads its facts and moves to its body.
    fn head(&mut self, bytes: &[u8]) -> usize {
        if self.carry.is_empty() {
            // Empty lines before a request line are ignored (RFC 9112 §2.2), as hyper does.
            let skipped = bytes
                .iter()
                .position(|&b| b != b'\r' && b != b'\n')
                .unwrap_or(bytes.len());
            let rest = &bytes[skipped..];
            if let Some(end) = head_end(rest, 0) {
                // The whole head in one read: read in place, no copy.
                self.finish_head(head_facts(&rest[..end]));
                return skipped + end;
            }
            self.hold(rest);
            return bytes.len();
        }
        // A terminator can straddle reads: search from just before the new bytes.
        let held = self.carry.len();
        let window = bytes.len().min(self.max_head.saturating_sub(held) + 1);
        self.carry.extend_from_slice(&bytes[..window]);
        match head_end(&self.carry, held.saturating_sub(3)) {
            Some(end) => {
                // The terminator ends in the new bytes (the held ones had none).
                let carry = std::mem::take(&mut self.carry);
                self.finish_head(head_facts(&carry[..end]));
                end - held
            }
            None => {
                self.carry.truncate(held);
                self.hold(&bytes[..window]);
                bytes.len()
            }
        }
    }

    /// Keeps the start of a head for the next read; past `max_head` bytes, stops following.
    fn hold(&mut self, bytes: &[u8]) {
        if self.carry.len() + bytes.len() > self.max_head {
            self.state = State::Off;
            self.carry = Vec::new();
        } else {
            self.carry.extend_from_slice(bytes);
        }
    }

    fn finish_head(&mut self, facts: Option<HeadFacts>) {
        let index = self.heads;
        self.heads += 1;
        let Some(facts) = facts else {
            self.state = State::Off;
            return;
        };
        if facts.transfer_encoding && facts.has_content_length {
            self.conflicting.get_or_insert(index);
            // The client is answered 400 and the connection closed: nothing after it matters.
            self.state = State::Off;
            return;
        }
        self.state = if facts.switches
            || facts.bad_content_length
            || (facts.transfer_encoding && !facts.chunked)
        {
            State::Off
        } else if facts.chunked {
            State::ChunkSize {
                size: 0,
                digits: 0,
                ext: false,
            }
        } else {
            match facts.content_length {
                Some(0) | None => State::Head,
                Some(length) => State::Fixed(length),
            }
        };
    }

    fn chunk_size(&mut self, bytes: &[u8], mut size: u64, mut digits: u8, mut ext: bool) -> usize {
        for (i, &byte) in bytes.iter().enumerate() {
            if byte == b'\n' {
                self.state = match (digits, size) {
                    (0, _) => State::Off,
                    (_, 0) => State::Trailers(Line::Start),
                    (_, size) => State::ChunkData(size),
                };
                return i + 1;
            }
            if ext {
                // Skip the extension up to the line end.
                let end = memchr(b'\n', &bytes[i..]).map_or(bytes.len(), |at| i + at);
                self.state = State::ChunkSize { size, digits, ext };
                return end;
            }
            match byte {
                b';' | b' ' | b'\t' if digits > 0 => ext = true,
                b'\r' if digits > 0 => ext = true,
                _ => match (byte as char).to_digit(16) {
                    Some(value) if digits < 16 => {
                        size = size * 16 + u64::from(value);
                        digits += 1;
                    }
                    _ => {
                        self.state = State::Off;
                        return bytes.len();
                    }
                },
            }
        }
        self.state = State::ChunkSize { size, digits, ext };
        bytes.len()
    }

    fn trailers(&mut self, bytes: &[u8], mut line: Line) -> usize {
        for (i, &byte) in bytes.iter().enumerate() {
            line = match (line, byte) {
                (Line::Start | Line::Cr, b'\n') => {
                    self.state = State::Head;
                    return i + 1;
                }
                (Line::Text, b'\n') => Line::Start,
                (Line::Start, b'\r') => Line::Cr,
                _ => Line::Text,
            };
        }
        self.state = State::Trailers(line);
        bytes.len()
    }
}

/// Of `left` body bytes still to come, how many of the `available` ones are used, and how many are
/// still to come after them.
fn skip(left: u64, available: usize) -> (usize, u64) {
    let used = usize::try_from(left).map_or(available, |left| left.min(available));
    (used, left - used as u64)
}

/// The length of the head in `bytes` (through its empty line), searching for line ends from
/// `from`.
fn head_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(found) = memchr(b'\n', &bytes[at..]) {
        let lf = at + found;
        match bytes.get(lf + 1) {
            Some(b'\n') => return Some(lf + 2),
            Some(b'\r') if bytes.get(lf + 2) == Some(&b'\n') => return Some(lf + 3),
            _ => at = lf + 1,
        }
    }
    None
}

/// Reads the framing facts of one head; `None` when it is not a well-formed HTTP/1.1 head.
fn head_facts(head: &[u8]) -> Option<HeadFacts> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let request_line = lines.next()?;
    let method = request_line.split(|&b| b == b' ').next()?;
    if !request_line.ends_with(b" HTTP/1.1") {
        // HTTP/1.0 (no chunked coding) or garbage: hyper judges it; we stop following.
        return None;
    }
    let mut facts = HeadFacts {
        switches: method == b"CONNECT",
        ..HeadFacts::default()
    };
    for line in lines.filter(|line| !line.is_empty()) {
        let colon = memchr(b':', line)?;
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            facts.has_content_length = true;
            let length = (!value.is_empty() && value.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(value).ok()?.parse::<u64>().ok())
                .flatten();
            match (facts.content_length, length) {
                (_, None) => facts.bad_content_length = true,
                (Some(seen), Some(length)) if seen != length => facts.bad_content_length = true,
                (_, length) => facts.content_length = length,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            facts.transfer_encoding = true;
            // As hyper: the last line decides, and chunked must be the last coding.
            let last = value.rsplit(|&b| b == b',').next().map(trim);
            facts.chunked = last.is_some_and(|coding| coding.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            facts.switches = true;
        }
    }
    Some(facts)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |at| at + 1);
    &bytes[start..end]
}

#[cfg(test)]
mod tests;
