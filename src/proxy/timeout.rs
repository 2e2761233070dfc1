//! Idle and total timeouts on an upstream response body.
//!
//! The idle timer is re-armed lazily: a frame only stores its arrival time, and the timer, when it
//! fires, checks whether a frame came since and sleeps again for the remainder. Streams with a frame
//! every 10 ms thus cost no timer operation per frame.
//!
//! The body also carries the router's [`InFlight`] guard, so a backend's load lasts exactly as long
//! as its response: the guard hears of the first frame (a prefill is over) and is dropped when the
//! stream ends, breaks, or the client goes away.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::client::{noop_waker, Conn, ConnPool};

/// Why an upstream body ended in an error.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("upstream body error: {0}")]
    Upstream(#[from] hyper::Error),
    #[error("upstream sent no body frame for {0:?}")]
    IdleTimeout(Duration),
    #[error("request exceeded the total timeout of {0:?}")]
    TotalTimeout(Duration),
}

impl BodyError {
    pub fn is_timeout(&self) -> bool {
        matches!(self, BodyError::IdleTimeout(_) | BodyError::TotalTimeout(_))
    }
}

/// Load accounting that must live as long as a response body (the router's per-backend counts).
/// Dropping the last handle ends the accounting.
pub trait BodyGuard: Send + Sync + std::fmt::Debug {
    /// The first body frame arrived: the backend finished the prompt's prefill.
    fn first_frame(&self);
}

/// A request extension holding a [`BodyGuard`]; [`super::Forward`] moves it into the response body.
#[derive(Debug, Clone)]
pub struct InFlight(pub Arc<dyn BodyGuard>);

/// An upstream body under an idle timeout (between frames) and an optional total deadline.
#[derive(Debug)]
pub struct TimeoutBody<B> {
    inner: B,
    idle: Duration,
    last_frame: Instant,
    idle_timer: Pin<Box<Sleep>>,
    total: Option<(Duration, Pin<Box<Sleep>>)>,
    done: bool,
    /// Told of the first frame, dropped at the end of the stream.
    guard: Option<InFlight>,
    first_seen: bool,
    /// The connection the body is read from, driven here (see [`ConnPool`]); back to the pool
    /// after a clean end, closed on an error or when the body is dropped early.
    upstream: Option<Upstream>,
    /// An upstream error held back for one poll (see `poll_frame`).
    failed: Option<BodyError>,
}

/// The upstream connection of a response, and the pool it returns to.
#[derive(Debug)]
pub struct Upstream {
    conn: Conn,
    pool: ConnPool,
    /// The connection future completed (closed or failed): never poll it again, never reuse it.
    closed: bool,
}

impl Upstream {
    pub fn new(conn: Conn, pool: ConnPool) -> Self {
        Self {
            conn,
            pool,
            closed: false,
        }
    }

    /// Moves the connection on: reads, decodes, and hands the next body frame to the body.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if !self.closed && Pin::new(&mut self.conn.driver).poll(cx).is_ready() {
            self.closed = true;
        }
    }

    /// After the body's clean end: one more turn lets the connection go idle, then it is pooled.
    fn release(mut self, cx: &mut Context<'_>) {
        self.drive(cx);
        if !self.closed {
            let Upstream { conn, pool, .. } = self;
            pool.checkin(conn);
        }
    }
}

impl<B> TimeoutBody<B> {
    /// `deadline` is the instant the whole request must end by (`None`: no bound).
    pub fn new(inner: B, idle: Duration, total: Option<(Duration, Instant)>) -> Self {
        let now = Instant::now();
        Self {
            inner,
            idle,
            last_frame: now,
            idle_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            total: total
                .map(|(limit, deadline)| (limit, Box::pin(tokio::time::sleep_until(deadline)))),
            done: false,
            guard: None,
            first_seen: false,
            upstream: None,
            failed: None,
        }
    }

    /// Drives `upstream` from this body (it is polled whenever the body is).
    pub fn with_upstream(mut self, upstream: Upstream) -> Self {
        self.upstream = Some(upstream);
        self
    }

    /// Keeps `guard` alive until the body ends (or is dropped).
    pub fn with_guard(mut self, guard: Option<InFlight>) -> Self {
        self.guard = guard;
        self
    }

    fn end(&mut self) {
        self.done = true;
        self.guard = None;
        // Not released to the pool: after an error or a timeout the connection is closed.
        self.upstream = None;
    }
}

/// Polls a body whose connection is driven here, without waking this task for what it does itself.
///
/// hyper's body channel wakes the reader when the connection hands it a frame and wakes the
/// connection when the reader takes one; with both in this task each chunk would cost two
/// spurious re-polls of the whole server connection. The body only ever gets data from
/// `upstream.drive`, called right here, so the body is always polled with a no-op waker, and the
/// connection is turned quietly first: only when nothing is ready is it turned with the real
/// waker (registering for the socket and the channel) before returning `Pending`. A `Ready` needs
/// no registration: the caller polls again.
fn poll_driven<B>(
    inner: &mut B,
    upstream: &mut Upstream,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    let mut quiet = Context::from_waker(noop_waker());
    if let Poll::Ready(frame) = Pin::new(&mut *inner).poll_frame(&mut quiet) {
        return Poll::Ready(frame);
    }
    upstream.drive(&mut quiet);
    if let Poll::Ready(frame) = Pin::new(&mut *inner).poll_frame(&mut quiet) {
        return Poll::Ready(frame);
    }
    upstream.drive(cx);
    Pin::new(inner).poll_frame(&mut quiet)
}

impl<B> Body for TimeoutBody<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(err) = this.failed.take() {
            this.end();
            return Poll::Ready(Some(Err(err)));
        }
        let polled = match &mut this.upstream {
            Some(upstream) => poll_driven(&mut this.inner, upstream, cx),
            None => Pin::new(&mut this.inner).poll_frame(cx),
        };
        if let Poll::Ready(frame) = polled {
            return match frame {
                None => {
                    if let Some(upstream) = this.upstream.take() {
                        upstream.release(cx);
                    }
                    this.end();
                    Poll::Ready(None)
                }
                Some(Ok(frame)) => {
                    this.last_frame = Instant::now();
                    if !this.first_seen {
                        this.first_seen = true;
                        if let Some(InFlight(guard)) = &this.guard {
                            guard.first_frame();
                        }
                    }
                    // A body of known length ends with its last frame: the server may never
                    // poll for the end, so the connection is handed back now.
                    if this.inner.is_end_stream() {
                        if let Some(upstream) = this.upstream.take() {
                            upstream.release(cx);
                        }
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Some(Err(err)) => {
                    // The frames returned before this error may still sit in the server's write
                    // buffer (frames that arrive together are written together, and hyper drops
                    // its buffer when a body fails): yield once so it flushes them, then fail.
                    this.failed = Some(BodyError::from(err));
                    this.upstream = None;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            };
        }
        if let Some((limit, deadline)) = &mut this.total {
            if deadline.as_mut().poll(cx).is_ready() {
                let limit = *limit;
                this.end();
                return Poll::Ready(Some(Err(BodyError::TotalTimeout(limit))));
            }
        }
        while this.idle_timer.as_mut().poll(cx).is_ready() {
            let due = this.last_frame + this.idle;
            if Instant::now() >= due {
                this.end();
                return Poll::Ready(Some(Err(BodyError::IdleTimeout(this.idle))));
            }
            // A frame arrived since the timer was armed: sleep for the rest of the idle window.
            this.idle_timer.as_mut().reset(due);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
