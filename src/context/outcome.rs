//! How a request ended: the `outcome` label every series and record shares.

/// How a request ended (`outcome` label), named by where it went wrong (client / upstream / proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx and a cleanly ended stream with no error event (or a client that left after its
    /// terminal event: see [`crate::meter::body`]).
    Ok,
    /// The client went away before the end.
    Cancelled,
    /// The upstream refused the request rather than failed (4xx, 501 Not Implemented), any error
    /// answer to a generation body the proxy could not read as JSON, or the proxy rejected the
    /// request (413 ...).
    ClientError,
    /// Upstream unreachable, any other 5xx, an error event in a 200 stream, or the stream broke.
    UpstreamError,
    /// A connect, response, idle or total timeout fired.
    Timeout,
    /// tokenmeter's own limits turned it away (`server.max_streams`, `server.max_connections`):
    /// answered 503 with `retry-after`, never sent upstream.
    Overloaded,
}

impl Outcome {
    /// How many outcomes there are: per-outcome arrays are indexed by `outcome as usize`.
    pub const COUNT: usize = 6;

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Cancelled => "cancelled",
            Outcome::ClientError => "client_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
            Outcome::Overloaded => "overloaded",
        }
    }
}
