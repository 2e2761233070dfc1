//! Incremental decoder for `transfer-encoding: chunked` bodies (RFC 9112 §7.1).
//!
//! It works on the connection's read buffer in place: chunk data leaves as `Bytes` split off that
//! buffer (no copy), so an SSE event an upstream sent as one chunk becomes one body frame. Size
//! lines, chunk extensions and trailers are consumed and dropped; what is not yet whole stays in
//! the buffer until the next read ("is a whole line here?" then parse).
use bytes::{Buf, Bytes, BytesMut};

/// A size line or trailer line longer than this is refused (hyper's limit is similar).
const MAX_LINE: usize = 4096;
/// All trailer lines together.
const MAX_TRAILERS: usize = 16 * 1024;

/// Where the decoder is in the chunk grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting `chunk-size [; ext] CRLF`.
    Size,
    /// Inside a chunk's data, this many bytes to go.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty line; the count is bytes seen so far.
    Trailers(usize),
    /// The body is complete.
    Done,
}

/// What one decoding step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Body bytes, split off the buffer.
    Data(Bytes),
    /// The buffer holds no whole element: read more.
    NeedMore,
    /// The terminating chunk and the trailers were consumed.
    Done,
}

/// Why a chunked body is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked body: {0}")]
pub struct ChunkedError(&'static str);

/// The chunked decoder's state between reads.
#[derive(Debug, Clone)]
pub(crate) struct Decoder {
    state: State,
}

impl Default for Decoder {
    fn default() -> Self {
        Self { state: State::Size }
    }
}

impl Decoder {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from the front of `buf` until it has data to give, needs more bytes, or is done.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkedError> {
        loop {
            match self.state {
                State::Size => {
                    let Some((end, next)) = find_line(buf)? else {
                        return Ok(Step::NeedMore);
                    };
                    let size = parse_size(&buf[..end])?;
                    buf.advance(next);
                    self.state = if size == 0 {
                        State::Trailers(0)
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let take = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Step::Data(buf.split_to(take).freeze()));
                }
                State::DataEnd => match buf.first() {
                    None => return Ok(Step::NeedMore),
                    Some(b'\n') => {
                        buf.advance(1);
                        self.state = State::Size;
                    }
                    Some(b'\r') => match buf.get(1) {
                        None => return Ok(Step::NeedMore),
                        Some(b'\n') => {
                            buf.advance(2);
                            self.state = State::Size;
                        }
                        Some(_) => return Err(ChunkedError("chunk data not followed by CRLF")),
                    },
                    Some(_) => return Err(ChunkedError("chunk data longer than its size")),
                },
                State::Trailers(seen) => {
                    let Some((end, next)) = find_line(buf)? else {
                        return Ok(Step::NeedMore);
                    };
                    buf.advance(next);
                    if end == 0 {
                        self.state = State::Done;
                        return Ok(Step::Done);
                    }
                    let seen = seen + end;
                    if seen > MAX_TRAILERS {
                        return Err(ChunkedError("trailers too large"));
                    }
                    self.state = State::Trailers(seen);
                }
                State::Done => return Ok(Step::Done),
            }
        }
    }
}

/// Finds the first line of `buf`, if a whole one is there: `(end, next)` where `buf[..end]` is the
/// line without its LF or CRLF and `next` is where the following one starts. The caller reads the
/// line in place and advances past it: splitting it off would cost two reference-count updates of
/// the shared read buffer per chunk, for a line of a few bytes.
fn find_line(buf: &[u8]) -> Result<Option<(usize, usize)>, ChunkedError> {
    match memchr::memchr(b'\n', buf) {
        Some(lf) if lf > MAX_LINE => Err(ChunkedError("line too long")),
        Some(lf) => {
            let end = if lf > 0 && buf[lf - 1] == b'\r' {
                lf - 1
            } else {
                lf
            };
            Ok(Some((end, lf + 1)))
        }
        None if buf.len() > MAX_LINE => Err(ChunkedError("line too long")),
        None => Ok(None),
    }
}

/// `chunk-size = 1*HEXDIG`, then optional whitespace and `;extensions`, which are ignored.
fn parse_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ChunkedError("chunk size is not hexadecimal"));
    }
    match line[digits..].iter().find(|&&b| b != b' ' && b != b'\t') {
        None | Some(b';') => {}
        Some(_) => return Err(ChunkedError("junk after the chunk size")),
    }
    let mut size: u64 = 0;
    for &digit in &line[..digits] {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => digit - b'A' + 10,
        };
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(value)))
            .ok_or(ChunkedError("chunk size overflows"))?;
    }
    Ok(size)
}

#[cfg(test)]
mod tests;
