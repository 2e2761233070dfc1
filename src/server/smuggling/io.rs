//! The socket wrapper that shows every byte the client sends to a [`FramingScanner`] on its way
//! to hyper. Reads are passed through unchanged; writes are not looked at.
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{ConnectionFraming, FramingScanner};

/// An accepted connection whose request framing is followed (see the module docs).
#[derive(Debug)]
pub struct GuardedStream<T> {
    inner: T,
    scanner: FramingScanner,
    shared: Arc<ConnectionFraming>,
}

impl<T> GuardedStream<T> {
    /// Wraps `inner`; heads over `max_head` bytes are not followed (hyper refuses them anyway).
    pub fn new(inner: T, shared: Arc<ConnectionFraming>, max_head: usize) -> Self {
        Self {
            inner,
            scanner: FramingScanner::new(max_head),
            shared,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedStream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.scanner.active() {
            this.scanner.feed(&buf.filled()[before..]);
            if let Some(index) = this.scanner.conflicting() {
                this.shared.flag(index);
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedStream<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
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
