//! HTTP/2 abuse guard for client connections: rapid reset (CVE-2023-44487), CONTINUATION floods,
//! SETTINGS / PING / WINDOW_UPDATE floods and oversized HPACK header lists each close the
//! connection once past a per-connection budget, and each is counted in
//! `tokenmeter_http2_abuse_total{kind}`.
//!
//! Why a wrapper around the socket: hyper's h2 bounds some of these itself (pending-accept
//! resets, CONTINUATION frames per block, decoded header list size), but it answers every PING
//! and SETTINGS, applies every WINDOW_UPDATE and starts a request for every stream however fast
//! it is reset, and it tells no one why it closed a connection. [`H2Guard`] sits between the socket
//! and hyper, reads the frame heads of what hyper is about to read ([`frames`], no copy, any split
//! over reads), counts them against [`budget::Budgets`], and past a budget returns a
//! `ConnectionAborted` error naming the abuse instead of the bytes: hyper drops the connection,
//! the offending bytes never reach h2, and other connections never notice. Work per abusive
//! connection is therefore bounded by the budget, memory by a frame head.
//!
//! It is generic over the IO so it wraps every connection that may speak HTTP/2: h2c over TCP, and
//! TLS connections whose ALPN is not `http/1.1`; bytes that are not the HTTP/2 preface turn it
//! into a plain pass-through.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use tokenmeter::server::h2guard::{AbuseCounters, Budgets, H2Guard};
//! # fn f(stream: tokio::net::TcpStream, metrics: &tokenmeter::metrics::Metrics) {
//! let counters = Arc::new(AbuseCounters::new(metrics)); // once per server: every kind at 0
//! let io = H2Guard::new(stream, Budgets::for_server(65_536), Arc::clone(&counters));
//! // serve `io` with hyper's auto or http2 builder
//! # }
//! ```
use std::io;
use std::ops::ControlFlow;
use std::sync::Arc;

use metrics::{Counter, Label};
use tokio::time::Instant;

use super::watched::{Watch, Watched};
use crate::metrics::Metrics;

pub mod budget;
pub mod frames;

pub(crate) use budget::Abuse;
pub use budget::{Budgets, Tally};
pub use frames::FrameScanner;

/// HTTP/2 client connections closed for abusing the protocol, by `kind` (the budgets of
/// [`budget`]).
pub(crate) const HTTP2_ABUSE: &str = "tokenmeter_http2_abuse_total";

/// One counter per [`Abuse`], resolved once per server so every kind is exposed from 0.
#[derive(Debug, Clone)]
pub struct AbuseCounters([Counter; Abuse::ALL.len()]);

impl AbuseCounters {
    pub fn new(metrics: &Metrics) -> Self {
        metrics.describe_counter(
            HTTP2_ABUSE,
            "HTTP/2 client connections closed for abusing the protocol, by kind (rapid_reset, continuation_flood, settings_flood, ping_flood, window_update_flood, header_list_too_large).",
        );
        Self(
            Abuse::ALL.map(|abuse| {
                metrics.counter(HTTP2_ABUSE, vec![Label::new("kind", abuse.as_str())])
            }),
        )
    }

    fn count(&self, abuse: Abuse) {
        self.0[abuse as usize].increment(1);
    }
}

/// A client connection whose HTTP/2 frames are counted against budgets (see the module docs).
pub type H2Guard<T> = Watched<T, FrameBudgets>;

/// The frame heads of one connection, counted against its budgets.
#[derive(Debug)]
pub struct FrameBudgets {
    frames: FrameScanner,
    tally: Tally,
    counters: Arc<AbuseCounters>,
    /// Set once a budget is exceeded: every later read fails the same way.
    tripped: Option<Abuse>,
}

impl<T> H2Guard<T> {
    pub fn new(inner: T, budgets: Budgets, counters: Arc<AbuseCounters>) -> Self {
        let watch = FrameBudgets {
            frames: FrameScanner::new(),
            tally: Tally::new(budgets),
            counters,
            tripped: None,
        };
        Watched::with(inner, watch)
    }
}

impl Watch for FrameBudgets {
    fn refused(&self) -> Option<io::Error> {
        self.tripped.map(|abuse| abuse.error())
    }

    fn read(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Self {
            frames,
            tally,
            counters,
            tripped,
        } = self;
        if !frames.is_http2() {
            return Ok(());
        }
        // One clock read per read, and only when a frame counted per window is in it.
        let mut now = None;
        let mut clock = || *now.get_or_insert_with(Instant::now);
        let verdict = frames.feed(bytes, |head| match tally.frame(head, &mut clock) {
            Ok(()) => ControlFlow::Continue(()),
            Err(abuse) => ControlFlow::Break(abuse),
        });
        if let ControlFlow::Break(abuse) = verdict {
            // None of this read reaches hyper: the abusive frame is never processed.
            *tripped = Some(abuse);
            counters.count(abuse);
            return Err(abuse.error());
        }
        Ok(())
    }

    fn wrote(&mut self, written: usize) {
        self.tally.wrote(written);
    }
}

#[cfg(test)]
mod tests;
