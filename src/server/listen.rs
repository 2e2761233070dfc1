//! Binding a listening socket with an accept queue sized for a burst of clients.
//!
//! Why not `TcpListener::bind`: tokio (through mio) listens with a backlog of 128, as Rust's
//! standard library does. When more clients than that connect at once (a load balancer
//! reconnecting, a batch job starting 256 streams), the kernel's accept queue fills before the
//! accept loop runs, the surplus SYNs are dropped (`TcpExtListenOverflows` in `nstat`), and each of
//! those clients retries after the SYN timeout: one second added to its time to first token.
//! nginx listens with 511 and HAProxy with its `maxconn`; tokenmeter takes `server.listen_backlog`
//! (default 4096, Linux's default `net.core.somaxconn`, which caps it anyway).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// A listener on `addr` with an accept queue of `backlog` connections (capped by the kernel at
/// `net.core.somaxconn`). `SO_REUSEADDR` is set, as `TcpListener::bind` sets it, so a restarted
/// proxy can bind while old connections linger in `TIME_WAIT`.
pub fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

#[cfg(test)]
mod tests;
