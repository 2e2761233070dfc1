//! One request, timed from the client side: build the body, send it over the shared pooled
//! client, stamp every SSE event with the arrival time of the frame that completed it, and
//! turn the stamps into TTFT / ITL / TPOT / E2E (REFERENCE.md §1, with `t0` = just before
//! the request is handed to the client, so connection set-up counts as the user feels it).
//!
//! The prompt is either generated words ([`Prompt::Words`], the single-turn workload) or a
//! conversation so far ([`Prompt::Messages`], a session's turn); [`BenchClient::send_keeping_reply`]
//! also returns the text the server streamed, which the next turn sends back.
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::events::EventSplitter;
pub use super::record::{Ending, RequestRecord};
use super::record::{Planned, StreamState};
use super::spec::join_url;
use super::Endpoint;

/// Who speaks a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat message, serialized as the API takes it: `{"role": "user", "content": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

/// What a request sends as its prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// [`prompt_text`]`(seed, index, prompt_words)`: the single-turn workload of a run of
    /// `seed`.
    Words { seed: u64 },
    /// A conversation so far: chat `messages` as given; for completions, the messages' texts
    /// joined by `"\n"`, so the prompt grows the way the conversation does.
    Messages(Vec<Message>),
}

/// One request to send: which workload draw, how long the prompt and output are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRequest {
    pub index: u64,
    pub class: usize,
    /// The prompt's length in words (with [`Prompt::Words`], exactly the words sent).
    pub prompt_words: u32,
    pub max_tokens: u32,
    pub prompt: Prompt,
    /// One extra request header, e.g. a session id for header-keyed affinity.
    pub header: Option<(HeaderName, HeaderValue)>,
}

/// A request's measurements and the reply text it received.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub record: RequestRecord,
    /// The streamed `delta.content`s (completions: `text`s) concatenated, as far as the stream
    /// got.
    pub text: String,
}

/// Where requests go: the resolved endpoint URI, dialect and model.
#[derive(Debug, Clone)]
pub struct Destination {
    pub uri: Uri,
    pub endpoint: Endpoint,
    pub model: String,
}

/// How a run sends its requests: where to, under which class, against which clock and
/// deadline. The same for many requests, so one value carries it to each send.
#[derive(Debug, Clone, Copy)]
pub struct Dispatch<'a> {
    pub target: &'a Destination,
    /// The class name the record carries.
    pub class: &'a str,
    /// The start of the point, which records' `start_s` count from.
    pub point_start: Instant,
    /// Upper bound on the request, head to end of stream; past it the request is a `timeout`.
    pub timeout: Duration,
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

    /// The model to name: `given`, else the first of `GET {base}/v1/models`, else `"default"`.
    pub async fn model_or_first(&self, given: Option<&str>, base: &str) -> String {
        match given {
            Some(model) => model.to_owned(),
            None => self
                .first_model(base)
                .await
                .unwrap_or_else(|| "default".to_string()),
        }
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
    pub async fn send(&self, dispatch: &Dispatch<'_>, plan: &PlannedRequest) -> RequestRecord {
        self.send_from(dispatch, plan, Instant::now()).await
    }

    /// [`send`](Self::send) with the request's clock started at `t0`: the instant its sender
    /// decided to send it (a closed-loop worker checks its deadline against that same instant,
    /// so no request it starts can carry a start past the deadline).
    pub async fn send_from(
        &self,
        dispatch: &Dispatch<'_>,
        plan: &PlannedRequest,
        t0: Instant,
    ) -> RequestRecord {
        let st = StreamState::default();
        self.measure(st, dispatch, plan, t0).await.record
    }

    /// [`send`](Self::send), keeping the reply's text as well (a session's next turn sends
    /// it back).
    pub async fn send_keeping_reply(
        &self,
        dispatch: &Dispatch<'_>,
        plan: &PlannedRequest,
    ) -> Reply {
        let st = StreamState::keeping_reply();
        self.measure(st, dispatch, plan, Instant::now()).await
    }

    async fn measure(
        &self,
        mut st: StreamState,
        dispatch: &Dispatch<'_>,
        plan: &PlannedRequest,
        t0: Instant,
    ) -> Reply {
        let Dispatch {
            target,
            class,
            point_start,
            timeout,
        } = *dispatch;
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
        let planned = Planned {
            index: plan.index,
            class,
            prompt_words: plan.prompt_words,
            max_tokens: plan.max_tokens,
        };
        let (record, text) = st.into_record(planned, t0, point_start, end);
        Reply {
            record,
            text: text.unwrap_or_default(),
        }
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

/// The request: `ignore_eos` makes the output exactly `max_tokens` long on vLLM-like servers,
/// and `include_usage` gives the true token count (chunks are not tokens).
pub(crate) fn build_request(
    target: &Destination,
    plan: &PlannedRequest,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(target.uri.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream");
    if let Some((name, value)) = &plan.header {
        request = request.header(name, value);
    }
    request.body(Full::new(Bytes::from(
        request_body(target, plan).to_string(),
    )))
}

/// The JSON body of a planned request.
pub(crate) fn request_body(target: &Destination, plan: &PlannedRequest) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": target.model,
        "stream": true,
        "max_tokens": plan.max_tokens,
        "ignore_eos": true,
        "stream_options": { "include_usage": true },
    });
    let (messages, prompt) = match (&plan.prompt, target.endpoint) {
        (&Prompt::Words { seed }, endpoint) => {
            let text = prompt_text(seed, plan.index, plan.prompt_words);
            match endpoint {
                Endpoint::Chat => (
                    serde_json::json!([{ "role": "user", "content": text }]),
                    None,
                ),
                Endpoint::Completions => (serde_json::Value::Null, Some(text)),
            }
        }
        (Prompt::Messages(messages), Endpoint::Chat) => (serde_json::json!(messages), None),
        (Prompt::Messages(messages), Endpoint::Completions) => {
            let texts: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
            (serde_json::Value::Null, Some(texts.join("\n")))
        }
    };
    match prompt {
        Some(text) => body["prompt"] = serde_json::Value::String(text),
        None => body["messages"] = messages,
    }
    body
}

/// `words` words: a per-request word first (so no two prompts share a cached prefix), then
/// `w`s. The simulated replica counts each run of alphanumerics as one token.
///
/// The first word names the run's `seed` as well as the request's `index`: clients of one run
/// with seeds of their own (`scripts/bench-fleet.sh`'s four) would otherwise send the same
/// `r5 w w ...` as each other's fifth request, and whichever came second found the first one's
/// prompt cached (a prompt cache hit the proxy of another gateway could not know of).
pub fn prompt_text(seed: u64, index: u64, words: u32) -> String {
    let mut s = format!("r{seed}x{index}");
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

#[cfg(test)]
mod tests;
