//! Shared helpers of the `sim_*` end-to-end tests: a raw hyper client over 127.0.0.1 that
//! timestamps every SSE event as it arrives.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokenmeter::testbed::sim::{spawn, SimConfig, SimHandle};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How late a loopback stamp may come after the sim's modelled deadline on a loaded 2-core CI
/// machine: the request's way in, the engine's timer wake-up, the server's write and the client's
/// read each wait for a core, a few to a few tens of milliseconds while another process hogs
/// one. The engine's deadlines are absolute, so lateness does not add up along a stream: this
/// bounds each stamp, not each step. A second is generous; the exact timing is tested on paused
/// time (`src/testbed/sim/engine/tests.rs`), and timing tests stretch the model so that what they
/// tell apart differs by more than this.
pub const LATE: Duration = Duration::from_secs(1);

/// Starts a replica on an ephemeral loopback port.
pub async fn start(config: SimConfig) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    spawn(listener, config).await.expect("sim starts")
}

/// A profile by name, with `edit` applied.
pub fn config(profile: &str, edit: impl FnOnce(&mut SimConfig)) -> SimConfig {
    let mut config = SimConfig::profile(profile).expect("known profile");
    edit(&mut config);
    config
}

/// One HTTP/1.1 connection; dropping (or [`Conn::close`]) closes the socket.
pub struct Conn {
    pub sender: SendRequest<Full<Bytes>>,
    pub task: JoinHandle<()>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect to sim");
        stream.set_nodelay(true).expect("nodelay");
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Conn { sender, task }
    }

    /// Sends a request; returns the response head (body still streaming) and when it was sent.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
    ) -> (hyper::Response<Incoming>, Instant) {
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "sim")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        let sent = Instant::now();
        let response = self
            .sender
            .send_request(request)
            .await
            .expect("response head");
        (response, sent)
    }

    /// Closes the socket now (the client "goes away").
    pub fn close(self) {
        self.task.abort();
    }
}

/// A request and its whole response body as text.
pub async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut conn = Conn::open(addr).await;
    let (response, _) = conn.send(method, path, body).await;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        String::from_utf8(bytes.to_vec()).expect("utf-8 body"),
    )
}

/// One SSE event and when its last byte arrived.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    pub text: String,
}

impl Event {
    /// The generated text of a content chunk (chat `delta.content` or completions `text`),
    /// `None` for role / usage / `[DONE]` events.
    pub fn content(&self) -> Option<String> {
        let json: serde_json::Value =
            serde_json::from_str(self.text.strip_prefix("data: ")?.trim_end()).ok()?;
        let choice = json.get("choices")?.get(0)?;
        let text = choice
            .get("text")
            .or_else(|| choice.get("delta")?.get("content"))?
            .as_str()?;
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// Reads a streaming body to its end, cutting it into SSE events (timestamped on arrival).
/// `on_event` sees each event as it comes (e.g. to signal the test).
pub async fn read_events(mut body: Incoming, mut on_event: impl FnMut(&Event)) -> Vec<Event> {
    let mut events = Vec::new();
    let mut buffer = String::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("body frame");
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let at = Instant::now();
        buffer.push_str(std::str::from_utf8(&data).expect("utf-8 stream"));
        while let Some(end) = buffer.find("\n\n") {
            let text: String = buffer.drain(..end + 2).collect();
            let event = Event { at, text };
            on_event(&event);
            events.push(event);
        }
    }
    assert!(buffer.is_empty(), "stream ended mid-event: {buffer:?}");
    events
}

/// Content events only.
pub fn content_events(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.content().is_some())
        .cloned()
        .collect()
}

/// Gaps between consecutive content events.
pub fn gaps(events: &[Event]) -> Vec<Duration> {
    let content = content_events(events);
    content.windows(2).map(|w| w[1].at - w[0].at).collect()
}

/// The value of the sample line `name{labels}` in the replica's `/metrics`.
pub async fn metric(addr: SocketAddr, series: &str) -> f64 {
    let (status, text) = call(addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200, "/metrics answers 200");
    let line = text
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("series {series} missing from\n{text}"));
    line[series.len()..].trim().parse().expect("numeric sample")
}

/// Polls `series` until it equals `want` (for what the engine does at its next step boundary,
/// after the client has gone); returns the last value seen. Gives up after 10 s, which no step
/// of a loaded machine comes near: the caller's assertion then reports the value.
pub async fn wait_for_metric(addr: SocketAddr, series: &str, want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = metric(addr, series).await;
        if value == want || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `n` words: exactly `n` prompt tokens.
pub fn words(n: usize) -> String {
    vec!["w"; n].join(" ")
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
