//! One upstream connection (TCP, or TLS over TCP) and the bytes read from it that nobody
//! consumed yet.
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The read buffer's first size. A response head and a token chunk are a few hundred bytes each;
/// 1 KiB holds both, and is what an idle stream keeps (measured: 4 KiB cost 3.3 KiB more RSS per
/// idle stream at 9 500 streams). Reads that fill the buffer double the next size.
const FIRST_READ: usize = 1024;
/// The largest single read, reached by doubling while reads fill the buffer (a large JSON answer).
const MAX_READ: usize = 64 * 1024;
/// Below this much free space the buffer is renewed (reclaimed in place once every frame split
/// off it was written and dropped, which in the steady state is always: no allocation per chunk).
const MIN_SPARE: usize = 512;

/// An upstream connection.
#[derive(Debug)]
pub struct Conn {
    pub io: Io,
    /// Bytes read and not yet consumed: the rest of a head, chunk framing, body data.
    pub buf: BytesMut,
    /// The pool key (the authority) it returns to.
    pub key: Arc<str>,
    /// Whether it came from the pool (an exchange on it may fail because the upstream closed it
    /// while it was idle, and is then retried on a new connection).
    pub reused: bool,
    next_read: usize,
}

impl Conn {
    pub fn new(io: Io, key: Arc<str>) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            key,
            reused: false,
            next_read: FIRST_READ,
        }
    }

    /// Reads what the socket has into `buf`; `Ok(0)` is the upstream's end of stream.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        poll_fill(&mut self.io, &mut self.buf, &mut self.next_read, cx)
    }

    /// The connection as a reader (with its buffer) and a writer that can be used at once: the
    /// response head is read while the request body is still being written.
    pub fn split(&mut self) -> (Reader<'_>, Writer<'_>) {
        let (read, write) = match &mut self.io {
            Io::Plain(tcp) => {
                let (read, write) = tcp.split();
                (PlainOrTls::Plain(read), PlainOrTls::Plain(write))
            }
            // TLS state is one object for both directions: tokio's split shares it behind a
            // lock (one allocation per exchange, none per chunk: the body reads `Conn::io`).
            Io::Tls(tls) => {
                let (read, write) = tokio::io::split(&mut **tls);
                (PlainOrTls::Tls(read), PlainOrTls::Tls(write))
            }
        };
        let reader = Reader {
            io: read,
            buf: &mut self.buf,
            next_read: &mut self.next_read,
        };
        (reader, write)
    }

    /// Whether an idle connection is still usable: nothing arrived on it (no FIN, no stray
    /// byte). It is one non-blocking read attempt.
    pub(crate) fn is_reusable(&mut self) -> bool {
        let mut cx = Context::from_waker(noop_waker());
        self.buf.is_empty() && self.poll_fill(&mut cx).is_pending()
    }
}

/// The transport of a [`Conn`].
pub type Io = PlainOrTls<TcpStream, Box<TlsStream<TcpStream>>>;

/// The reading side of a [`Conn::split`].
pub(crate) struct Reader<'a> {
    io: ReadSide<'a>,
    pub buf: &'a mut BytesMut,
    next_read: &'a mut usize,
}

impl Reader<'_> {
    /// [`Conn::poll_fill`] as a future.
    pub async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| poll_fill(&mut self.io, self.buf, self.next_read, cx)).await
    }
}

type ReadSide<'a> =
    PlainOrTls<tcp::ReadHalf<'a>, tokio::io::ReadHalf<&'a mut TlsStream<TcpStream>>>;

/// The writing side of a [`Conn::split`].
pub type Writer<'a> =
    PlainOrTls<tcp::WriteHalf<'a>, tokio::io::WriteHalf<&'a mut TlsStream<TcpStream>>>;

/// A connection's bytes, or one side of them, over plain TCP or over TLS (the TLS session boxed
/// in [`Io`]: it is kilobytes, and most connections are plain). [`Io`], the reading side and
/// [`Writer`] are this one enum, so that the reads and writes are passed on in one place;
/// statically, with no box per call.
#[derive(Debug)]
pub(crate) enum PlainOrTls<P, T> {
    Plain(P),
    Tls(T),
}

impl<P: AsyncRead + Unpin, T: AsyncRead + Unpin> AsyncRead for PlainOrTls<P, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(io) => Pin::new(io).poll_read(cx, buf),
            PlainOrTls::Tls(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl<P: AsyncWrite + Unpin, T: AsyncWrite + Unpin> AsyncWrite for PlainOrTls<P, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PlainOrTls::Plain(io) => Pin::new(io).poll_write(cx, buf),
            PlainOrTls::Tls(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(io) => Pin::new(io).poll_flush(cx),
            PlainOrTls::Tls(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(io) => Pin::new(io).poll_shutdown(cx),
            PlainOrTls::Tls(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

/// Reads what `io` has into `buf`, renewing the buffer when it is nearly full; `Ok(0)` is the end
/// of stream.
fn poll_fill<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    next_read: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    let spare = buf.capacity() - buf.len();
    if spare < MIN_SPARE {
        // Asks for `next_read` in all, what is unconsumed included: a buffer whose frames were
        // all dropped then fits in its own allocation (bytes moves the rest to the front)
        // instead of growing by a whole `next_read` each time.
        let want = (*next_read).max(buf.len() + MIN_SPARE);
        buf.reserve(want - buf.len());
    }
    let spare = buf.capacity() - buf.len();
    // tokio's `poll_read` (under this) clears the socket's readiness after a short read, so the
    // next poll of a paced stream waits for the reactor instead of trying a read syscall.
    let read = tokio_util::io::poll_read_buf(Pin::new(io), cx, buf);
    if let Poll::Ready(Ok(n)) = read {
        if n == spare {
            *next_read = (*next_read * 2).min(MAX_READ);
        }
    }
    read
}

/// A waker for a look nobody waits on (the read interest it registers is replaced by the next
/// real poll). `Waker::noop` needs Rust 1.85; the crate's minimum is older.
fn noop_waker() -> &'static std::task::Waker {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static WAKER: std::sync::OnceLock<std::task::Waker> = std::sync::OnceLock::new();
    WAKER.get_or_init(|| std::task::Waker::from(Arc::new(Noop)))
}
