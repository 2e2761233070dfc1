//! The response body read straight off the upstream connection by whoever polls it.
//!
//! There is no connection task: the task that forwards the response to the client polls this
//! body, which reads the socket, decodes the framing and hands the chunk on, so a token chunk is
//! read and written by one task with no hand-off in between (docs/performance.md, finding 2).
//! The body owns its connection: read to its end on a keep-alive exchange, the connection goes
//! back to the pool; dropped before that (the client went away), the connection is closed, which
//! is how the upstream learns to stop generating.
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

use super::chunked::{self, ChunkedError, Step};
use super::conn::Conn;
use super::head::Delimiter;
use super::idle::IdlePool;

/// Why reading a response body failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the upstream response: {0}")]
    Io(std::io::Error),
    #[error(transparent)]
    Chunked(#[from] ChunkedError),
    #[error("the upstream closed the connection before the end of the response body")]
    ClosedEarly,
}

/// How far the body is decoded.
#[derive(Debug)]
enum Decode {
    Length(u64),
    Chunked(chunked::Decoder),
    UntilClose,
    Done,
}

impl Decode {
    fn step(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkedError> {
        let step = match self {
            Decode::Length(0) | Decode::Done => Step::Done,
            Decode::Length(_) | Decode::UntilClose if buf.is_empty() => Step::NeedMore,
            Decode::Length(remaining) => {
                let take = usize::try_from(*remaining).map_or(buf.len(), |r| r.min(buf.len()));
                *remaining -= take as u64;
                Step::Data(buf.split_to(take).freeze())
            }
            Decode::UntilClose => Step::Data(buf.split().freeze()),
            Decode::Chunked(decoder) => decoder.decode(buf)?,
        };
        if matches!(step, Step::Done) {
            *self = Decode::Done;
        }
        Ok(step)
    }

    /// Whether no byte of the body is left to read.
    fn is_done(&self) -> bool {
        match self {
            Decode::Length(0) | Decode::Done => true,
            Decode::Chunked(decoder) => decoder.is_done(),
            _ => false,
        }
    }
}

/// An upstream response body.
#[derive(Debug)]
pub struct IncomingBody {
    /// `None` once the body ended (the connection was pooled or closed) or failed.
    conn: Option<Conn>,
    decode: Decode,
    keep_alive: bool,
    pool: IdlePool,
}

impl IncomingBody {
    pub(super) fn new(conn: Conn, delimiter: Delimiter, keep_alive: bool, pool: IdlePool) -> Self {
        let decode = match delimiter {
            Delimiter::Empty => Decode::Done,
            Delimiter::Length(n) => Decode::Length(n),
            Delimiter::Chunked => Decode::Chunked(chunked::Decoder::default()),
            Delimiter::UntilClose => Decode::UntilClose,
        };
        let mut body = Self {
            conn: Some(conn),
            decode,
            keep_alive,
            pool,
        };
        if body.decode.is_done() {
            body.finish();
        }
        body
    }

    /// The body was read to its end: the connection goes back to the pool if the exchange
    /// allows it and the upstream sent nothing past the body.
    fn finish(&mut self) {
        self.decode = Decode::Done;
        if let Some(conn) = self.conn.take() {
            if self.keep_alive && conn.buf.is_empty() {
                self.pool.checkin(conn);
            }
        }
    }

    fn fail(&mut self, err: ReadError) -> Poll<Option<Result<Frame<Bytes>, ReadError>>> {
        self.conn = None;
        self.decode = Decode::Done;
        Poll::Ready(Some(Err(err)))
    }
}

impl Body for IncomingBody {
    type Data = Bytes;
    type Error = ReadError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ReadError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decode.step(&mut conn.buf) {
                Ok(Step::Data(data)) => {
                    if this.decode.is_done() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Step::Done) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Step::NeedMore) => {}
                Err(err) => return this.fail(err.into()),
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.decode, Decode::UntilClose) => {
                    this.conn = None;
                    this.decode = Decode::Done;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(ReadError::ClosedEarly),
                Ok(_) => {}
                Err(err) => return this.fail(ReadError::Io(err)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || self.decode.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decode {
            Decode::Length(n) => SizeHint::with_exact(n),
            Decode::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
