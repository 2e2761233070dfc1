//! Tells an HTTP/1 connection from an h2c one by peeking at its first bytes, so that HTTP/1
//! connections are served by an HTTP/1-only builder.
//!
//! Why: hyper-util's auto builder reads the first 24 bytes itself (to compare them with the HTTP/2
//! preface) and hands them back to hyper through a `Rewind` that returns only those 24 bytes on the
//! first read. hyper's 8 KiB read buffer then has to grow for the rest of the request head, and
//! `Vec`'s doubling makes it 16 KiB for the life of the connection. Measured with the overhead
//! harness (`--idle-streams 4000`, release build): 41.0 -> 36.1 KiB of proxy RSS per idle stream.
//! `peek` leaves the bytes in the socket, so hyper's first read gets the whole head.
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::server::smuggling::scan::H2_PREFACE;

/// [`speaks_http1`] for a new connection, bounded: `None` when no byte came within `timeout`
/// (hyper's own head timeout only starts once hyper reads, so the first byte gets the same
/// limit here) or the server began shutting down first; the connection is then dropped.
pub(super) async fn first_bytes(
    stream: &TcpStream,
    timeout: Duration,
    stopping: &mut watch::Receiver<bool>,
) -> Option<bool> {
    tokio::select! {
        sniffed = tokio::time::timeout(timeout, speaks_http1(stream)) => sniffed.ok(),
        _ = stopping.wait_for(|stop| *stop) => None,
    }
}

/// Waits for the connection's first bytes and says whether they rule out HTTP/2: `false` for the
/// preface, a prefix of it (a client that sent only `P` so far), an empty read (the peer closed)
/// or an error, all of which the auto builder then handles as before. Reads nothing.
pub(super) async fn speaks_http1(stream: &TcpStream) -> bool {
    let mut head = [0u8; H2_PREFACE.len()];
    match stream.peek(&mut head).await {
        Ok(n) => n > 0 && head[..n] != H2_PREFACE[..n],
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
