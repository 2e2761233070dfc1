//! A client socket whose bytes are watched on their way to hyper: the request-smuggling guard
//! ([`super::smuggling`]) and the HTTP/2 abuse guard ([`super::h2guard`]) are both this wrapper
//! with a [`Watch`] of their own, so passing reads and writes through is written once.
//!
//! A watch sees the bytes of each read after the socket gave them and before hyper does; it may
//! refuse them (an error instead of the bytes, which then never reach hyper) and, once refused,
//! every later read. Writes pass through, counted.
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What looks at a [`Watched`] socket's bytes.
pub(crate) trait Watch {
    /// The error every read returns from now on without reading, if the watch has refused the
    /// connection.
    fn refused(&self) -> Option<io::Error> {
        None
    }

    /// Sees the bytes one read brought; an error replaces them (they are not passed on).
    fn read(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// Counts the bytes one write took.
    fn wrote(&mut self, _written: usize) {}
}

/// A socket `inner` whose bytes `watch` sees (see the module docs).
#[derive(Debug)]
pub struct Watched<T, W> {
    inner: T,
    watch: W,
}

impl<T, W> Watched<T, W> {
    pub(super) fn with(inner: T, watch: W) -> Self {
        Self { inner, watch }
    }
}

impl<T: AsyncRead + Unpin, W: Watch + Unpin> AsyncRead for Watched<T, W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Self { inner, watch } = self.get_mut();
        if let Some(err) = watch.refused() {
            return Poll::Ready(Err(err));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(inner).poll_read(cx, buf))?;
        if let Err(err) = watch.read(&buf.filled()[before..]) {
            buf.set_filled(before);
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin, W: Watch + Unpin> AsyncWrite for Watched<T, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let Self { inner, watch } = self.get_mut();
        let written = std::task::ready!(Pin::new(inner).poll_write(cx, buf))?;
        watch.wrote(written);
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Self { inner, watch } = self.get_mut();
        let written = std::task::ready!(Pin::new(inner).poll_write_vectored(cx, bufs))?;
        watch.wrote(written);
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
