use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{MeteredBody, StreamMeter};
use crate::config::Config;
use crate::context::{FinishHook, FinishHooks, Finished, Outcome, RequestContext};
use crate::dialect::{Dialect, Operation};
use crate::meter::cut::tests::capture;
use crate::meter::cut::CutLog;
use crate::meter::series::{MeterSeries, RequestLabels};
use crate::metrics::Metrics;
use crate::proxy::h1::ReadError;
use crate::proxy::BodyError;
use crate::sse::{Framer, StreamFormat, DEFAULT_MAX_LINE};
use crate::upstream::Target;

/// An upstream body the test feeds (frames or an error); open until the sender is dropped.
struct Fed(mpsc::UnboundedReceiver<Result<Bytes, BodyError>>);

impl Body for Fed {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|result| result.map(Frame::data)))
    }
}

/// Every outcome the finish point saw.
#[derive(Debug, Default)]
struct Outcomes(Mutex<Vec<Outcome>>);

impl FinishHook for Outcomes {
    fn finished(&self, request: &Finished<'_>) {
        self.0.lock().expect("lock").push(request.outcome);
    }
}

impl Outcomes {
    fn all(&self) -> Vec<Outcome> {
        self.0.lock().expect("lock").clone()
    }
}

/// A metered 200 stream of `dialect` framed as `format`, ended by `outcomes`, logging cuts
/// through a limit of its own; and the sender that feeds its upstream body.
fn metered(
    dialect: Dialect,
    format: StreamFormat,
    outcomes: &Arc<Outcomes>,
) -> (
    MeteredBody<Fed>,
    mpsc::UnboundedSender<Result<Bytes, BodyError>>,
) {
    let config = Config::default();
    let metrics = Arc::new(Metrics::new(&config).expect("default buckets"));
    let series = MeterSeries::new(metrics, &config);
    let hook: Arc<dyn FinishHook> = outcomes.clone();
    let mut context =
        Box::new(RequestContext::new(Instant::now(), None).with_hooks(FinishHooks::new([hook])));
    context.dialect = Some(dialect);
    context.route.pool = Some(Arc::from("default"));
    context.route.backend = Some(Target::from_url("http://127.0.0.1:8001").expect("a target"));
    context.upstream_status = Some(StatusCode::OK);
    context.status = Some(StatusCode::OK);
    let handles = series.stream(&RequestLabels {
        operation: Operation::of(dialect),
        model: series.metrics().model_label(Some("m")),
        backend: Arc::from("127.0.0.1:8001"),
        pool: Arc::from("default"),
    });
    let meter = StreamMeter {
        handles,
        dialect,
        framer: Some(Framer::new(format, DEFAULT_MAX_LINE)),
        stripper: None,
        whole: None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let cuts: &'static CutLog = Box::leak(Box::new(CutLog::new(100, super::super::cut::WINDOW)));
    let body = MeteredBody::new(Fed(rx), context, meter).with_cut_log(cuts);
    (body, tx)
}

fn fixture(path: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// A stream's events (SSE: up to each blank line; NDJSON: each line), each with its separator.
fn events(format: StreamFormat, stream: &[u8]) -> Vec<Vec<u8>> {
    let separator: &[u8] = match format {
        StreamFormat::Sse => b"\n\n",
        StreamFormat::NdJson => b"\n",
    };
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + separator.len() <= stream.len() {
        if &stream[i..i + separator.len()] == separator {
            out.push(stream[start..i + separator.len()].to_vec());
            i += separator.len();
            start = i;
        } else {
            i += 1;
        }
    }
    if stream[start..].iter().any(|b| !b.is_ascii_whitespace()) {
        out.push(stream[start..].to_vec());
    }
    out
}

/// Feeds `events` (one frame each) and reads every byte of them back through the body, which
/// stays open: the upstream has not ended it.
async fn pass(
    body: &mut MeteredBody<Fed>,
    tx: &mpsc::UnboundedSender<Result<Bytes, BodyError>>,
    events: &[Vec<u8>],
) {
    let sent: usize = events.iter().map(Vec::len).sum();
    for event in events {
        tx.send(Ok(Bytes::from(event.clone())))
            .expect("the body reads");
    }
    let mut read = 0;
    while read < sent {
        let frame = body
            .frame()
            .await
            .expect("a frame")
            .expect("no error")
            .into_data()
            .expect("data");
        read += frame.len();
    }
    assert_eq!(read, sent, "every byte forwarded");
}

/// The terminal event of each dialect that has one, from the fixtures (the last event of each).
const TERMINAL: [(Dialect, StreamFormat, &str); 8] = [
    (
        Dialect::OpenAiChat,
        StreamFormat::Sse,
        "openai/vllm-chat-usage.sse",
    ),
    (
        Dialect::OpenAiCompletions,
        StreamFormat::Sse,
        "openai/vllm-completions.sse",
    ),
    (
        Dialect::OpenAiResponses,
        StreamFormat::Sse,
        "dialects/openai-responses.sse",
    ),
    (
        Dialect::AnthropicMessages,
        StreamFormat::Sse,
        "dialects/anthropic-messages.sse",
    ),
    (Dialect::Tgi, StreamFormat::Sse, "dialects/tgi.sse"),
    (
        Dialect::OllamaChat,
        StreamFormat::NdJson,
        "dialects/ollama-chat.ndjson",
    ),
    (
        Dialect::OllamaGenerate,
        StreamFormat::NdJson,
        "dialects/ollama-generate.ndjson",
    ),
    (
        Dialect::LlamaCpp,
        StreamFormat::Sse,
        "dialects/llamacpp-completion.sse",
    ),
];

#[tokio::test]
async fn a_client_that_leaves_after_the_terminal_event_had_the_whole_stream() {
    for (dialect, format, path) in TERMINAL {
        let events = events(format, &fixture(path));
        // The client read the terminal event and closed; the upstream's end never came.
        assert_eq!(
            left_after(dialect, format, &events).await,
            vec![Outcome::Ok],
            "{path}: complete from the client's side"
        );
    }
}

#[tokio::test]
async fn a_client_that_leaves_before_the_terminal_event_cancelled() {
    for (dialect, format, path) in TERMINAL {
        let mut events = events(format, &fixture(path));
        events.pop();
        assert_eq!(
            left_after(dialect, format, &events).await,
            vec![Outcome::Cancelled],
            "{path}: every event but the terminal one"
        );
    }
    // Triton's stream has no terminal event: leaving is always cancelling it.
    let events = events(StreamFormat::Sse, &fixture("dialects/triton.sse"));
    assert_eq!(
        left_after(Dialect::Triton, StreamFormat::Sse, &events).await,
        vec![Outcome::Cancelled],
        "triton"
    );
}

/// How a stream of `dialect` ended when its client left after `events` passed.
async fn left_after(dialect: Dialect, format: StreamFormat, events: &[Vec<u8>]) -> Vec<Outcome> {
    let outcomes = Arc::new(Outcomes::default());
    let (mut body, tx) = metered(dialect, format, &outcomes);
    pass(&mut body, &tx, events).await;
    drop(body);
    outcomes.all()
}

#[tokio::test]
async fn a_terminal_event_after_an_error_is_still_the_upstreams_error() {
    let events = events(
        StreamFormat::Sse,
        &fixture("dialects/openai-responses-failed.sse"),
    );
    assert_eq!(
        left_after(Dialect::OpenAiResponses, StreamFormat::Sse, &events).await,
        vec![Outcome::UpstreamError],
        "response.failed ends the stream with the backend's failure"
    );
}

/// Reads `body` to its error (after the one poll it holds it back).
async fn read_to_error(body: &mut MeteredBody<Fed>) -> BodyError {
    loop {
        match body.frame().await {
            Some(Ok(_)) => {}
            Some(Err(err)) => return err,
            None => panic!("ended cleanly; expected the upstream's error"),
        }
    }
}

#[tokio::test]
async fn each_stream_the_upstream_cuts_writes_one_line() {
    let (captured, _guard) = capture();
    let chat = events(StreamFormat::Sse, &fixture("openai/vllm-chat-usage.sse"));
    // Mid-stream: the role chunk and two tokens, then the connection closes early.
    let outcomes = Arc::new(Outcomes::default());
    let (mut body, tx) = metered(Dialect::OpenAiChat, StreamFormat::Sse, &outcomes);
    let sent = &chat[..3];
    let bytes: usize = sent.iter().map(Vec::len).sum();
    for event in sent {
        tx.send(Ok(Bytes::from(event.clone()))).expect("send");
    }
    tx.send(Err(BodyError::Upstream(ReadError::ClosedEarly)))
        .expect("send");
    read_to_error(&mut body).await;
    drop(body);
    // Before the first token: only the role chunk.
    let (mut early, tx) = metered(Dialect::OpenAiChat, StreamFormat::Sse, &outcomes);
    tx.send(Ok(Bytes::from(chat[0].clone()))).expect("send");
    tx.send(Err(BodyError::Upstream(ReadError::ClosedEarly)))
        .expect("send");
    read_to_error(&mut early).await;
    drop(early);
    // Neither a clean end nor a client leaving writes one.
    let (mut clean, tx) = metered(Dialect::OpenAiChat, StreamFormat::Sse, &outcomes);
    for event in &chat {
        tx.send(Ok(Bytes::from(event.clone()))).expect("send");
    }
    drop(tx);
    while let Some(frame) = clean.frame().await {
        frame.expect("clean");
    }
    drop(clean);
    let (mut left, tx) = metered(Dialect::OpenAiChat, StreamFormat::Sse, &outcomes);
    pass(&mut left, &tx, &chat[..3]).await;
    drop(left);
    assert_eq!(
        outcomes.all(),
        vec![
            Outcome::UpstreamError,
            Outcome::UpstreamError,
            Outcome::Ok,
            Outcome::Cancelled
        ]
    );
    let lines = captured.lines();
    assert_eq!(lines.len(), 2, "one line per cut stream: {lines:#?}");
    for field in [
        "WARN",
        "stream cut by its upstream",
        "backend=\"127.0.0.1:8001\"",
        "pool=\"default\"",
        "operation=\"chat\"",
        "model=\"m\"",
        "phase=\"mid_stream\"",
        &format!("bytes={bytes}"),
        "tokens=2",
        "outcome=\"upstream_error\"",
        "the upstream closed the connection before the end of the response body",
    ] {
        assert!(lines[0].contains(field), "{field} in {}", lines[0]);
    }
    for field in [
        "phase=\"before_first_token\"",
        &format!("bytes={}", chat[0].len()),
        "tokens=0",
    ] {
        assert!(lines[1].contains(field), "{field} in {}", lines[1]);
    }
}

#[tokio::test]
async fn a_stream_cut_by_a_timeout_writes_its_line_with_the_timeout() {
    let (captured, _guard) = capture();
    let outcomes = Arc::new(Outcomes::default());
    let (mut body, tx) = metered(Dialect::OpenAiChat, StreamFormat::Sse, &outcomes);
    tx.send(Err(BodyError::IdleTimeout(std::time::Duration::from_secs(
        30,
    ))))
    .expect("send");
    read_to_error(&mut body).await;
    drop(body);
    assert_eq!(outcomes.all(), vec![Outcome::Timeout]);
    let lines = captured.lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("outcome=\"timeout\"")
            && lines[0].contains("upstream sent no body frame for 30s")
            && lines[0].contains("bytes=0"),
        "{}",
        lines[0]
    );
}
