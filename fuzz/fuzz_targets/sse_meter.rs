//! The stream side: arbitrary upstream bytes, cut into arbitrary frames, through the framer (SSE
//! or NDJSON) and every dialect's classifier. Must never panic, and every event must lie inside
//! the bytes fed so far.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenmeter::dialect::Dialect;
use tokenmeter::sse::{Framer, StreamFormat};


fuzz_target!(|data: &[u8]| {
    // First byte: dialect and framing; second: the frame length pattern; the rest is the stream.
    let [selector, cut, stream @ ..] = data else {
        return;
    };
    let dialect = Dialect::ALL[usize::from(*selector) % Dialect::ALL.len()];
    let framing = if selector & 0x80 == 0 { StreamFormat::Sse } else { StreamFormat::NdJson };
    let mut framer = Framer::new(framing, 1024);
    let step = usize::from(*cut).max(1);
    let mut fed: u64 = 0;
    for frame in stream.chunks(step) {
        fed += frame.len() as u64;
        framer.feed(frame, |event| {
            assert!(event.end <= fed, "an event ends inside the bytes fed");
            assert!(event.start <= event.end, "an event's span is ordered");
            let _ = dialect.classify(event.event, event.data);
        });
    }
    framer.finish(|event| {
        let _ = dialect.classify(event.event, event.data);
    });
    assert_eq!(framer.position(), fed, "the framer saw every byte");
});
