//! The request-smuggling guard: arbitrary client bytes through the framing follower, whole and
//! cut at a fuzzer-chosen point. Must never panic, never hold more than its head limit, and give
//! the same verdict however the bytes are cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenmeter::server::smuggling::FramingScanner;

const LIMIT: usize = 4096;

fuzz_target!(|input: &[u8]| {
    let Some((&cut, bytes)) = input.split_first() else {
        return;
    };
    let mut whole = FramingScanner::new(LIMIT);
    whole.feed(bytes);
    let mut split = FramingScanner::new(LIMIT);
    let at = usize::from(cut).min(bytes.len());
    split.feed(&bytes[..at]);
    split.feed(&bytes[at..]);
    assert_eq!(whole.conflicting(), split.conflicting(), "same verdict");
    assert_eq!(whole.heads(), split.heads(), "same heads");
    assert_eq!(whole.active(), split.active(), "same state");
});
