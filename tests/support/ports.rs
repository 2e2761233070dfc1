//! Ports for servers a test starts as child processes (nginx, llama-server, Prometheus, the
//! tokenmeter binary), which bind a port the test chose and told them.
//!
//! The usual "bind port 0, read the port, release it" loses a race when tests run in parallel: the
//! released port is back in the kernel's ephemeral range (32768-60999 on Linux), so another test's
//! `bind(0)` — or its next free-port probe — can get the same number before the child binds it.
//! Two nginxes then share one port: one fails to bind, its test's wait-for-listen succeeds on the
//! other's socket, and its requests are refused once the other test ends (CI saw exactly that).
//! Ports here come from below the ephemeral range, so no `bind(0)` can take them, and each is handed
//! out once per test process.
//!
//! The rule every test keeps: a port is either held from the moment the kernel gives it (a
//! listener bound to port 0 and kept by the in-process server that serves on it), or comes from
//! [`free_port`] for a child process or a server that restarts on the same port; never released
//! and used later. An address that must refuse connections is a [`Refusing`] socket, held bound
//! and not listening, not a port some listener let go.
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU16, Ordering};

/// The range handed out: below Linux's default ephemeral range, above the well-known ports.
const FIRST: u16 = 20_000;
const END: u16 = 32_000;

/// The next candidate; starts at a place that depends on the process id, so two test processes
/// running at once (cargo runs test binaries one by one, but people run two `cargo test`s) seldom
/// probe the same ports.
static NEXT: AtomicU16 = AtomicU16::new(0);

/// A loopback port that was free when probed and that no other caller in this process gets.
pub fn free_port() -> u16 {
    let span = END - FIRST;
    let _ = NEXT.compare_exchange(
        0,
        (std::process::id() % u32::from(span)) as u16 + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = FIRST + offset;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{END}");
}

/// [`free_port`] on 127.0.0.1.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// An address that refuses every connection for as long as this value lives: a loopback socket
/// bound and never listening, so a connect gets a reset (`ECONNREFUSED`) at once.
///
/// Unlike a port a listener released, it cannot be taken meanwhile: the socket keeps the port
/// bound (without `SO_REUSEADDR`, so no other socket binds it, listening or not), and a kernel
/// that picks a port for another test's `bind(0)` or outgoing connection skips it.
pub struct Refusing {
    _socket: tokio::net::TcpSocket,
    addr: SocketAddr,
}

impl Refusing {
    /// A fresh refusing address on 127.0.0.1.
    pub fn new() -> Refusing {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind a loopback port");
        let addr = socket.local_addr().expect("the bound address");
        Refusing {
            _socket: socket,
            addr,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
