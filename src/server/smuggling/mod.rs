//! Request-smuggling guard for HTTP/1.1 traffic connections: a request carrying both
//! `transfer-encoding` and `content-length` is refused (400, `connection: close`) instead of being
//! read as chunked, which is all hyper does with it.
//!
//! Two halves meet per connection: [`GuardedStream`] wraps the accepted socket and runs a
//! [`FramingScanner`] over the bytes hyper reads, noting which request (0-based, in the
//! connection's order) had both headers; the service side takes a number per request as hyper
//! dispatches it ([`ConnectionFraming::next_request_conflicts`]) and marks the flagged one in its
//! context as a refusal ([`ConflictingFraming`]), which the meter answers. hyper reads a
//! request's head (through the scanner) before it dispatches that request, so the mark is always
//! in time.
//!
//! ```no_run
//! # use tokenmeter::server::smuggling::{ConnectionFraming, GuardedStream};
//! # async fn f(stream: tokio::net::TcpStream) {
//! let framing = ConnectionFraming::new();
//! let io = GuardedStream::new(stream, std::sync::Arc::clone(&framing), 65_536);
//! // serve `io`; per request: if framing.next_request_conflicts() { mark it }
//! # }
//! ```
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::StatusCode;

use crate::context::{Refusal, RefusedBy};

mod io;
pub mod scan;

pub use io::GuardedStream;
pub(crate) use scan::FramingScanner;

/// What a connection's reader and its service share.
#[derive(Debug)]
pub struct ConnectionFraming {
    /// Index of the first conflicting request, `u64::MAX` while there is none.
    conflicting: AtomicU64,
    /// Requests dispatched so far.
    dispatched: AtomicU64,
}

impl ConnectionFraming {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            conflicting: AtomicU64::new(u64::MAX),
            dispatched: AtomicU64::new(0),
        })
    }

    /// Called once per request as it is dispatched, in order: whether this one must be refused.
    pub fn next_request_conflicts(&self) -> bool {
        let index = self.dispatched.fetch_add(1, Ordering::Relaxed);
        self.conflicting.load(Ordering::Acquire) == index
    }

    fn flag(&self, index: u64) {
        self.conflicting.store(index, Ordering::Release);
    }
}

/// The guard's refusal: a request with both `transfer-encoding` and `content-length`.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request has both transfer-encoding and content-length (RFC 9112 section 6.3); refused as possible request smuggling")]
pub struct ConflictingFraming;

/// Answered 400 before its body is read, a client error; the connection closes after it, since
/// where the next request starts is in doubt too.
impl From<ConflictingFraming> for Refusal {
    fn from(refused: ConflictingFraming) -> Self {
        Refusal::new(
            RefusedBy::Client,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            refused.to_string(),
        )
        .closing()
    }
}
