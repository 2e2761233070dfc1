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
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use metrics::{Counter, Label};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::metrics::Metrics;

pub mod budget;
pub mod frames;

pub use budget::{Abuse, Budgets, Tally};
pub use frames::FrameScanner;

/// HTTP/2 client connections closed for abusing the protocol, by `kind` (the budgets of
/// [`budget`]).
pub const HTTP2_ABUSE: &str = "tokenmeter_http2_abuse_total";

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
#[derive(Debug)]
pub struct H2Guard<T> {
    inner: T,
    frames: FrameScanner,
    tally: Tally,
    counters: Arc<AbuseCounters>,
    /// Set once a budget is exceeded: every later read fails the same way.
    tripped: Option<Abuse>,
}

impl<T> H2Guard<T> {
    pub fn new(inner: T, budgets: Budgets, counters: Arc<AbuseCounters>) -> Self {
        Self {
            inner,
            frames: FrameScanner::new(),
            tally: Tally::new(budgets),
            counters,
            tripped: None,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for H2Guard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Self {
            inner,
            frames,
            tally,
            counters,
            tripped,
        } = self.get_mut();
        if let Some(abuse) = tripped {
            return Poll::Ready(Err(abuse.error()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(inner).poll_read(cx, buf))?;
        if !frames.is_http2() {
            return Poll::Ready(Ok(()));
        }
        // One clock read per read, and only when a frame counted per window is in it.
        let mut now = None;
        let mut clock = || *now.get_or_insert_with(Instant::now);
        let verdict = frames.feed(&buf.filled()[before..], |head| {
            match tally.frame(head, &mut clock) {
                Ok(()) => ControlFlow::Continue(()),
                Err(abuse) => ControlFlow::Break(abuse),
            }
        });
        if let ControlFlow::Break(abuse) = verdict {
            // None of this read reaches hyper: the abusive frame is never processed.
            buf.set_filled(before);
            *tripped = Some(abuse);
            counters.count(abuse);
            return Poll::Ready(Err(abuse.error()));
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for H2Guard<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = std::task::ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.tally.wrote(written);
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = std::task::ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        this.tally.wrote(written);
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
