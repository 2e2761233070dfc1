//! The streaming response body: one HTTP body frame per SSE event, produced as the engine
//! makes progress, in the shapes of the API the request came in on ([`Formatter`]).
//!
//! Dropping this body (hyper does when the client goes away) drops the receiver, which the
//! engine sees as a closed channel and aborts the request.
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use super::engine::EngineGone;
use super::messages::MessagesFormatter;
use super::responses::ResponsesFormatter;
use super::scheduler::Progress;
use super::stream::StreamFormatter;

/// The event shapes of one streaming API.
#[derive(Debug)]
pub enum Formatter {
    /// OpenAI chat / completions chunks, vLLM's layout.
    OpenAi(StreamFormatter),
    /// OpenAI Responses events.
    Responses(ResponsesFormatter),
    /// Anthropic Messages events.
    Messages(MessagesFormatter),
}

impl Formatter {
    /// Events sent when the request is accepted, before any output (none for OpenAI chunks,
    /// which vLLM only starts with the first token).
    fn start(&mut self, out: &mut VecDeque<Bytes>) {
        match self {
            Formatter::OpenAi(_) => {}
            Formatter::Responses(f) => f.start(out),
            Formatter::Messages(f) => f.start(out),
        }
    }

    fn push(&mut self, progress: &Progress, out: &mut VecDeque<Bytes>) {
        match self {
            Formatter::OpenAi(f) => f.push(progress, out),
            Formatter::Responses(f) => f.push(progress, out),
            Formatter::Messages(f) => f.push(progress, out),
        }
    }
}

impl From<StreamFormatter> for Formatter {
    fn from(f: StreamFormatter) -> Self {
        Formatter::OpenAi(f)
    }
}

impl From<ResponsesFormatter> for Formatter {
    fn from(f: ResponsesFormatter) -> Self {
        Formatter::Responses(f)
    }
}

impl From<MessagesFormatter> for Formatter {
    fn from(f: MessagesFormatter) -> Self {
        Formatter::Messages(f)
    }
}

/// An SSE response body fed by the engine.
#[derive(Debug)]
pub struct SseBody {
    events: mpsc::UnboundedReceiver<Progress>,
    formatter: Formatter,
    /// Chunks formatted but not yet handed to hyper (a step can yield several: role + first
    /// content chunk, or the last content chunk + usage + `[DONE]`).
    pending: VecDeque<Bytes>,
    finished: bool,
}

impl SseBody {
    /// A body that first sends the formatter's opening events, then one frame per event as
    /// the engine reports progress.
    pub fn new(events: mpsc::UnboundedReceiver<Progress>, formatter: impl Into<Formatter>) -> Self {
        let mut formatter = formatter.into();
        let mut pending = VecDeque::new();
        formatter.start(&mut pending);
        SseBody {
            events,
            formatter,
            pending,
            finished: false,
        }
    }
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = EngineGone;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, EngineGone>>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match ready!(this.events.poll_recv(cx)) {
                Some(progress) => {
                    this.finished = progress.finished;
                    this.formatter.push(&progress, &mut this.pending);
                }
                // The engine stopped mid-stream: fail the body so the client sees a cut
                // stream, not a clean end without `[DONE]`.
                None => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(EngineGone)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.pending.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests;
