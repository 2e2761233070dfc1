//! The frame heads of a client's HTTP/2 byte stream, found incrementally as hyper reads it.
//!
//! The stream is the 24-byte client preface (RFC 9113 §3.4), then frames, each a 9-byte head —
//! length (24 bits), type (8), flags (8), a reserved bit and the stream id (31) — and `length`
//! bytes of payload (§4.1). Only heads are parsed: a payload is skipped by counting, never copied,
//! and a head split over reads is kept in a 9-byte array. Bytes that are not the preface turn the
//! scanner off: the connection is HTTP/1 after all (a client that sent `P` first), which hyper's
//! auto builder serves itself, and there is nothing to scan.
use std::ops::ControlFlow;

use crate::server::smuggling::scan::H2_PREFACE;

/// Length of a frame head.
pub(crate) const HEAD_LEN: usize = 9;

/// Frame types (RFC 9113 §6) the guard counts.
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

/// `ACK` on SETTINGS and PING.
pub(crate) const FLAG_ACK: u8 = 0x1;
/// `END_HEADERS` on HEADERS and CONTINUATION: the header block is complete.
pub(crate) const FLAG_END_HEADERS: u8 = 0x4;

/// One frame head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    /// Payload length in bytes.
    pub length: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl FrameHead {
    fn parse(head: &[u8; HEAD_LEN]) -> Self {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *head;
        Self {
            length: u32::from_be_bytes([0, l0, l1, l2]),
            kind,
            flags,
            stream: u32::from_be_bytes([s0 & 0x7f, s1, s2, s3]),
        }
    }

    /// The head's bytes (tests build streams with it).
    pub fn encode(self) -> [u8; HEAD_LEN] {
        let [_, l0, l1, l2] = self.length.to_be_bytes();
        let [s0, s1, s2, s3] = (self.stream & 0x7fff_ffff).to_be_bytes();
        [l0, l1, l2, self.kind, self.flags, s0, s1, s2, s3]
    }

    pub fn has(self, flag: u8) -> bool {
        self.flags & flag == flag
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes of the preface seen so far.
    Preface(usize),
    /// A frame head being read: its bytes so far and how many.
    Head([u8; HEAD_LEN], usize),
    /// Payload bytes left to skip.
    Payload(u32),
    /// Not HTTP/2: nothing more to scan.
    Off,
}

/// Finds frame heads in the bytes fed to it, however they are split (see the module docs).
#[derive(Debug, Clone)]
pub struct FrameScanner {
    state: State,
}

impl Default for FrameScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameScanner {
    pub fn new() -> Self {
        Self {
            state: State::Preface(0),
        }
    }

    /// False once the bytes turned out not to be HTTP/2.
    pub(crate) fn is_http2(&self) -> bool {
        self.state != State::Off
    }

    /// Scans `bytes`, calling `on_head` with each frame head as soon as its 9 bytes are in (before
    /// its payload); stops at the first `Break`, which it returns.
    pub fn feed<B>(
        &mut self,
        mut bytes: &[u8],
        mut on_head: impl FnMut(FrameHead) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Preface(seen) => {
                    let expected = &H2_PREFACE[*seen..];
                    let n = expected.len().min(bytes.len());
                    if bytes[..n] != expected[..n] {
                        self.state = State::Off;
                        return ControlFlow::Continue(());
                    }
                    *seen += n;
                    bytes = &bytes[n..];
                    if *seen == H2_PREFACE.len() {
                        self.state = State::Head([0; HEAD_LEN], 0);
                    }
                }
                State::Head(head, filled) => {
                    let n = (HEAD_LEN - *filled).min(bytes.len());
                    head[*filled..*filled + n].copy_from_slice(&bytes[..n]);
                    *filled += n;
                    bytes = &bytes[n..];
                    if *filled == HEAD_LEN {
                        let head = FrameHead::parse(head);
                        self.state = match head.length {
                            0 => State::Head([0; HEAD_LEN], 0),
                            length => State::Payload(length),
                        };
                        on_head(head)?;
                    }
                }
                State::Payload(left) => {
                    let n = (*left).min(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
                    *left -= n;
                    bytes = &bytes[n as usize..];
                    if *left == 0 {
                        self.state = State::Head([0; HEAD_LEN], 0);
                    }
                }
                State::Off => return ControlFlow::Continue(()),
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests;
