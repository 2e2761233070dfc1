//! Bounds on what the proxy can have measured, from what the two ends of a test saw.
//!
//! A test that scripts "first token after 300 ms, then one every 80 ms" cannot expect the proxy to
//! report 300 ms within a few milliseconds on a loaded 2-core machine: the backend's timer fires
//! late, the proxy's task waits for a core, and both delays land in the figure. What always holds
//! is causal. The proxy read a chunk no earlier than the backend began writing it and no later
//! than the client received it (the proxy stamps a frame before forwarding it); it started a
//! request no earlier than the client sent it and no later than the backend had read it. So every
//! duration the proxy reports lies in a [`Window`] built from the backend's and the client's
//! stamps, taken on the same process's clock. On an idle machine a window is a fraction of a
//! millisecond wide; under load it widens by exactly the delays that happened, and the assertion
//! still says "the proxy measured what took place", never "the machine was idle".
//!
//! Its lower bound also carries the script: a chunk written after a 300 ms sleep was written at
//! least 300 ms after the request was read (a sleep never fires early).
use tokio::time::Instant;

use super::backend::{Seen, Wrote};
use super::client::Streamed;

/// When something happened at the proxy: after `earliest`, before `latest`.
#[derive(Debug, Clone, Copy)]
pub struct Moment {
    pub earliest: Instant,
    pub latest: Instant,
}

/// The range a duration measured at the proxy lies in, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub low: f64,
    pub high: f64,
}

/// The proxy's stamps are taken on the same clock a few instructions from ours; a float sum of
/// several durations may round. One microsecond covers both and hides no real error.
const SLACK: f64 = 1e-6;

impl Window {
    /// The duration from `from` to `to`.
    pub fn between(from: Moment, to: Moment) -> Window {
        Window {
            low: to
                .earliest
                .saturating_duration_since(from.latest)
                .as_secs_f64(),
            high: (to.latest - from.earliest).as_secs_f64(),
        }
    }

    /// This window divided by `n` (a per-token average).
    pub fn per(self, n: f64) -> Window {
        Window {
            low: self.low / n,
            high: self.high / n,
        }
    }

    pub fn contains(&self, seconds: f64) -> bool {
        seconds >= self.low - SLACK && seconds <= self.high + SLACK
    }

    /// Panics, naming `what`, unless `seconds` lies in the window.
    #[track_caller]
    pub fn assert_contains(&self, what: &str, seconds: f64) {
        assert!(
            self.contains(seconds),
            "{what}: the proxy measured {seconds:.6} s, outside [{:.6}, {:.6}] s, the window \
             the backend's writes and the client's reads allow",
            self.low,
            self.high
        );
    }

    /// Whether a value in this window is certainly at most `bound` (a histogram bucket's `le`).
    pub fn surely_at_most(&self, bound: f64) -> bool {
        self.high <= bound
    }

    /// Whether a value in this window may be at most `bound`.
    pub fn maybe_at_most(&self, bound: f64) -> bool {
        self.low <= bound
    }
}

/// When the proxy started the request: after the client sent it, before the backend had read it.
pub fn request_start(client: &Streamed, seen: &Seen) -> Moment {
    Moment {
        earliest: client.sent_at,
        latest: seen.at,
    }
}

/// When the proxy read each body write of one response (`writes`: the backend's log of that
/// response, its end included): after the backend began the write, before the client received
/// its last byte. A write whose bytes the client never saw (the proxy stripped them) is bounded
/// by the client's next later byte, or by the end of the body.
pub fn arrivals(writes: &[Wrote], client: &Streamed) -> Vec<Moment> {
    // Where each client frame ends in the client's bytes.
    let mut frame_ends = Vec::with_capacity(client.frames.len());
    let mut total = 0;
    for (at, bytes) in &client.frames {
        total += bytes.len();
        frame_ends.push((total, *at));
    }
    let received = client.bytes();
    let received_by = |end: usize| {
        frame_ends
            .iter()
            .find(|(frame_end, _)| *frame_end >= end)
            .map_or(client.ended_at, |(_, at)| *at)
    };
    let mut from = 0;
    writes
        .iter()
        .map(|write| {
            let latest = if write.bytes.is_empty() {
                client.ended_at
            } else {
                match find(&received[from..], &write.bytes) {
                    Some(at) => {
                        from += at + write.bytes.len();
                        received_by(from)
                    }
                    None => received_by(from + 1),
                }
            };
            Moment {
                earliest: write.at,
                latest,
            }
        })
        .collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The index of the first write whose bytes contain `needle` (e.g. the first token's text).
pub fn write_with(writes: &[Wrote], needle: &[u8]) -> usize {
    writes
        .iter()
        .position(|w| find(&w.bytes, needle).is_some())
        .unwrap_or_else(|| panic!("no write contains {:?}", String::from_utf8_lossy(needle)))
}
