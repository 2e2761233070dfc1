//! One request, timed from the client side: build the body, send it over the shared pooled
//! client, stamp every SSE event with the arrival time of the frame that completed it, and
//! turn the stamps into TTFT / ITL / TPOT / E2E (REFERENCE.md §1, with `t0` = just before
//! the request is handed to the client, so connection set-up counts as the user feels it).
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::events::{classify, EventKind, EventSplitter};
use super::spec::join_url;
use super::Endpoint;

/// How a request ended. Everything but `ok` is an error kind in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// A 2xx stream that ended with `[DONE]` and no error event.
    Ok,
    /// A non-2xx status.
    Http,
    /// Connecting, sending or reading failed.
    Transport,
    /// A `data: {"error": ...}` event in the stream.
    ErrorEvent,
    /// The stream ended without `[DONE]`.
    Incomplete,
    /// An event that is neither `[DONE]` nor JSON.
    InvalidEvent,
    /// The request outlived [`LoadSpec::request_timeout`](super::LoadSpec::request_timeout).
    Timeout,
}

impl Ending {
    pub fn is_ok(self) -> bool {
        self == Ending::Ok
    }

    /// The snake_case name used in tables and JSON maps.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Ok => "ok",
            Ending::Http => "http",
            Ending::Transport => "transport",
            Ending::ErrorEvent => "error_event",
            Ending::Incomplete => "incomplete",
            Ending::InvalidEvent => "invalid_event",
            Ending::Timeout => "timeout",
        }
    }
}

/// What one request measured. Times are seconds; `ttft_s`, `itl_s`, `tpot_s` are filled as
/// far as the stream got, even for failed requests (statistics only use `ok` ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Request number within the point (also the seed of its workload draw).
    pub index: u64,
    /// Workload class name.
    pub class: String,
    /// Prompt length sent, in words.
    pub prompt_words: u32,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// When the request was sent, relative to the start of the point.
    pub start_s: f64,
    pub outcome: Ending,
    /// HTTP status, when a response head arrived.
    pub status: Option<u16>,
    /// What went wrong, for errors.
    pub error: Option<String>,
    pub ttft_s: Option<f64>,
    /// Every gap between consecutive token events.
    pub itl_s: Vec<f64>,
    /// `(last - first) / (N_out - 1)`, for N_out >= 2.
    pub tpot_s: Option<f64>,
    /// Request sent to end of stream (or to the failure).
    pub e2e_s: f64,
    pub token_events: u64,
    /// N_out: `usage.completion_tokens` when present, else `token_events`.
    pub output_tokens: u64,
    pub usage_prompt_tokens: Option<u64>,
    pub usage_completion_tokens: Option<u64>,
}

/// One request to send: which workload draw, how long the prompt and output are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedRequest {
    pub index: u64,
    pub class: usize,
    pub prompt_words: u32,
    pub max_tokens: u32,
}

/// Where requests go: the resolved endpoint URI, dialect and model.
#[derive(Debug, Clone)]
pub struct Destination {
    pub uri: Uri,
    pub endpoint: Endpoint,
    pub model: String,
}

/// The shared HTTP/1.1 client: pooled keep-alive connections with TCP_NODELAY, so a token
/// chunk is not held back by Nagle and a closed loop reuses its connections.
#[derive(Clone, Debug)]
pub struct BenchClient {
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Default for BenchClient {
    fn default() -> Self {
        Self::new()
    }
}

/// How much of an error body to keep as the message.
const ERROR_BODY_LIMIT: usize = 512;

impl BenchClient {
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        BenchClient { http }
    }

    /// The first model of `GET {base}/v1/models`, or `None` if the server does not say.
    pub async fn first_model(&self, base: &str) -> Option<String> {
        #[derive(Deserialize)]
        struct Models {
            data: Vec<Model>,
        }
        #[derive(Deserialize)]
        struct Model {
            id: String,
        }
        let uri = join_url(base, "/v1/models").ok()?;
        let req = Request::get(uri).body(Full::new(Bytes::new())).ok()?;
        let fetch = async {
            let resp = self.http.request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            let models: Models = serde_json::from_slice(&body).ok()?;
            models.data.into_iter().next().map(|m| m.id)
        };
        tokio::time::timeout(Duration::from_secs(10), fetch)
            .await
            .ok()
            .flatten()
    }

    /// Sends one planned request and measures it. Never fails: failures are outcomes.
    pub async fn send(
        &self,
        target: &Destination,
        plan: &PlannedRequest,
        class: &str,
        point_start: Instant,
        timeout: Duration,
    ) -> RequestRecord {
        let mut st = StreamState::default();
        let t0 = Instant::now();
        let exchange = self.exchange(target, plan, &mut st);
        let end = match tokio::time::timeout(timeout, exchange).await {
            Ok(end) => end,
            Err(_) => {
                st.fail(
                    Ending::Timeout,
                    format!("no end of stream after {timeout:?}"),
                );
                Instant::now()
            }
        };
        st.into_record(plan, class, t0, point_start, end)
    }

    /// Sends and reads to the end of the stream; returns when the stream ended.
    async fn exchange(
        &self,
        target: &Destination,
        plan: &PlannedRequest,
        st: &mut StreamState,
    ) -> Instant {
        let req = match build_request(target, plan) {
            Ok(r) => r,
            Err(e) => {
                st.fail(Ending::Transport, format!("building the request: {e}"));
                return Instant::now();
            }
        };
        let resp = match self.http.request(req).await {
            Ok(r) => r,
            Err(e) => {
                st.fail(Ending::Transport, error_chain(&e));
                return Instant::now();
            }
        };
        let status = resp.status();
        st.status = Some(status.as_u16());
        let mut body = resp.into_body();
        if !status.is_success() {
            let mut text = Vec::new();
            // Bounded by the request timeout and by the size cap.
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    let room = ERROR_BODY_LIMIT.saturating_sub(text.len());
                    text.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            let msg = format!("HTTP {status}: {}", String::from_utf8_lossy(&text).trim());
            st.fail(Ending::Http, msg);
            return Instant::now();
        }
        let mut splitter = EventSplitter::default();
        // Bounded by the request timeout: the loop ends with the body.
        loop {
            match body.frame().await {
                None => break,
                Some(Err(e)) => {
                    st.fail(
                        Ending::Transport,
                        format!("reading the stream: {}", error_chain(&e)),
                    );
                    break;
                }
                Some(Ok(frame)) => {
                    let now = Instant::now();
                    if let Ok(data) = frame.into_data() {
                        splitter.push(&data, |ev| st.on_event(ev, now));
                    }
                }
            }
        }
        let end = Instant::now();
        if !st.done {
            st.fail(Ending::Incomplete, "stream ended without [DONE]".into());
        }
        end
    }
}

/// The request body: `ignore_eos` makes the output exactly `max_tokens` long on vLLM-like
/// servers, and `include_usage` gives the true token count (chunks are not tokens).
fn build_request(
    target: &Destination,
    plan: &PlannedRequest,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let prompt = prompt_text(plan.index, plan.prompt_words);
    let mut body = serde_json::json!({
        "model": target.model,
        "stream": true,
        "max_tokens": plan.max_tokens,
        "ignore_eos": true,
        "stream_options": { "include_usage": true },
    });
    match target.endpoint {
        Endpoint::Chat => {
            body["messages"] = serde_json::json!([{ "role": "user", "content": prompt }]);
        }
        Endpoint::Completions => body["prompt"] = serde_json::Value::String(prompt),
    }
    Request::builder()
        .method(Method::POST)
        .uri(target.uri.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::from(body.to_string())))
}

/// `words` words: a per-request word first (so no two prompts share a cached prefix), then
/// `w`s. The simulated replica counts each run of alphanumerics as one token.
pub fn prompt_text(index: u64, words: u32) -> String {
    let mut s = format!("r{index}");
    s.reserve(2 * words as usize);
    for _ in 1..words {
        s.push_str(" w");
    }
    s
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    // Bounded: error source chains are finite and short.
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// What the stream has shown so far.
#[derive(Debug, Default)]
struct StreamState {
    status: Option<u16>,
    token_times: Vec<Instant>,
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    done: bool,
    failure: Option<(Ending, String)>,
}

impl StreamState {
    /// Keeps the first failure: later ones are consequences.
    fn fail(&mut self, outcome: Ending, msg: String) {
        if self.failure.is_none() {
            self.failure = Some((outcome, msg));
        }
    }

    fn on_event(&mut self, data: &[u8], at: Instant) {
        if self.done {
            return;
        }
        let info = classify(data);
        if info.completion_tokens.is_some() {
            self.completion_tokens = info.completion_tokens;
        }
        if info.prompt_tokens.is_some() {
            self.prompt_tokens = info.prompt_tokens;
        }
        match info.kind {
            EventKind::Token => self.token_times.push(at),
            EventKind::Other => {}
            EventKind::Done => self.done = true,
            EventKind::Error(msg) => self.fail(Ending::ErrorEvent, msg),
            EventKind::Invalid(msg) => self.fail(Ending::InvalidEvent, msg),
        }
    }

    fn into_record(
        self,
        plan: &PlannedRequest,
        class: &str,
        t0: Instant,
        point_start: Instant,
        end: Instant,
    ) -> RequestRecord {
        let Self {
            status,
            token_times,
            completion_tokens,
            prompt_tokens,
            done: _,
            failure,
        } = self;
        let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
        let token_events = token_times.len() as u64;
        let output_tokens = completion_tokens.unwrap_or(token_events);
        let ttft_s = token_times.first().map(|&t| secs(t0, t));
        let itl_s = token_times.windows(2).map(|w| secs(w[0], w[1])).collect();
        let tpot_s = match (token_times.first(), token_times.last()) {
            (Some(&first), Some(&last)) if output_tokens >= 2 => {
                Some(secs(first, last) / (output_tokens - 1) as f64)
            }
            _ => None,
        };
        let (outcome, error) = match failure {
            Some((o, m)) => (o, Some(m)),
            None => (Ending::Ok, None),
        };
        RequestRecord {
            index: plan.index,
            class: class.to_string(),
            prompt_words: plan.prompt_words,
            max_tokens: plan.max_tokens,
            start_s: secs(point_start, t0),
            outcome,
            status,
            error,
            ttft_s,
            itl_s,
            tpot_s,
            e2e_s: secs(t0, end),
            token_events,
            output_tokens,
            usage_prompt_tokens: prompt_tokens,
            usage_completion_tokens: completion_tokens,
        }
    }
}
