//! The upstream client's response parsing: arbitrary upstream bytes through the head parser and
//! the chunked decoder, whole and cut at a fuzzer-chosen point. Must never panic, never buffer
//! without bound, and decode the same body bytes however the bytes are cut.
#![no_main]

use bytes::BytesMut;
use http::Method;
use libfuzzer_sys::fuzz_target;
use tokenmeter::proxy::h1::chunked::{Decoder, Step};
use tokenmeter::proxy::h1::head::{self, Delimiter};

/// Feeds `pieces` in turn; returns the body bytes of a chunked response (or `None` on an error).
fn run(pieces: &[&[u8]]) -> Option<(Vec<u8>, bool)> {
    let mut buf = BytesMut::new();
    let mut head_done = false;
    let mut chunked = false;
    let mut decoder = Decoder::default();
    let mut body = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        if !head_done {
            match head::parse(&mut buf, &Method::POST).ok()? {
                None => continue,
                Some(parsed) => {
                    head_done = true;
                    chunked = parsed.delimiter == Delimiter::Chunked;
                }
            }
        }
        if !chunked {
            continue;
        }
        loop {
            match decoder.decode(&mut buf).ok()? {
                Step::Data(data) => body.extend_from_slice(&data),
                Step::NeedMore => break,
                Step::Done => return Some((body, true)),
            }
        }
        assert!(buf.len() <= 64 * 1024 + 8192, "bounded carry: {}", buf.len());
    }
    Some((body, false))
}

fuzz_target!(|input: &[u8]| {
    let Some((&cut, bytes)) = input.split_first() else {
        return;
    };
    let at = usize::from(cut).min(bytes.len());
    let whole = run(&[bytes]);
    let split = run(&[&bytes[..at], &bytes[at..]]);
    if let (Some(whole), Some(split)) = (&whole, &split) {
        assert_eq!(whole, split, "same body however the bytes are cut");
    }
});
