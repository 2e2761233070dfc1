//! Idle and total timeouts on an upstream response body.
//!
//! The idle timer is re-armed lazily: a frame only stores its arrival time, and the timer, when it
//! fires, checks whether a frame came since and sleeps again for the remainder. Streams with a frame
//! every 10 ms thus cost no timer operation per frame.
//!
//! The body also carries the request's [`InFlight`] guard (see [`crate::upstream`]), so a backend's
//! load lasts exactly as long as its response: the guard hears of the first frame (a prefill is
//! over) and is dropped when the stream ends, breaks, or the client goes away.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::upstream::InFlight;

/// Why an upstream body ended in an error.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("upstream body error: {0}")]
    Upstream(#[from] super::h1::ReadError),
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
        }
    }

    /// Keeps `guard` alive until the body ends (or is dropped).
    pub(crate) fn with_guard(mut self, guard: Option<InFlight>) -> Self {
        self.guard = guard;
        self
    }

    fn end(&mut self) {
        self.done = true;
        self.guard = None;
    }
}

impl<B> Body for TimeoutBody<B>
where
    B: Body<Data = Bytes, Error = super::h1::ReadError> + Unpin,
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
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            match &frame {
                Some(Ok(_)) => {
                    this.last_frame = Instant::now();
                    if !this.first_seen {
                        this.first_seen = true;
                        if let Some(InFlight(guard)) = &this.guard {
                            guard.first_frame();
                        }
                    }
                }
                _ => this.end(),
            }
            return Poll::Ready(frame.map(|result| result.map_err(BodyError::from)));
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
