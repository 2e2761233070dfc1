//! The replica's HTTP/1.1 front: vLLM's OpenAI routes over hyper.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/chat/completions`, `POST /v1/completions` | a simulated generation (SSE or JSON) |
//! | `POST /v1/responses` | the same, as OpenAI Responses events / object |
//! | `POST /v1/messages` | the same, as Anthropic Messages events / message |
//! | `GET /v1/models` | the served model |
//! | `GET /health` | 200, empty (as vLLM) |
//! | `GET /metrics` | vLLM's Prometheus metrics |
//!
//! Invalid requests get 400 with vLLM's error body
//! `{"object":"error","message":...,"type":"BadRequestError","code":400}`, or the API's own on
//! `/v1/responses` (`{"error":{...}}`) and `/v1/messages` (`{"type":"error","error":{...}}`).
//!
//! Chat and completions requests may carry `kv_transfer_params` ([`super::kv_transfer`]): a
//! decode request waits out its KV pull here, before the engine sees it (TTFT and queue time
//! include the pull, as in vLLM), and with the `decode` fault gets a 500
//! (`"type":"InternalServerError"`) instead; a prefill request's JSON answer gains the params.
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::api::{self, Endpoint, SimRequest};
use super::body::{Formatter, SseBody};
use super::engine::{self, EngineHandle, Submission};
use super::kv_transfer::{Connector, KvTransferFault, RemotePrefill};
use super::messages::{self, MessagesFormatter};
use super::metrics::SimMetrics;
use super::request;
use super::responses::{self, ResponsesFormatter};
use super::stream::{self, StreamFormatter};
use super::SimConfig;

/// The response body of every route.
pub type SimBody = Either<Full<Bytes>, SseBody>;

/// Largest request body read (prompts of a few hundred thousand tokens fit).
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// How long shutdown waits for open connections once the engine is gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// What every connection shares.
#[derive(Debug)]
pub struct State {
    pub config: SimConfig,
    pub engine: EngineHandle,
    pub metrics: Arc<SimMetrics>,
    /// This replica's end of the KV link (what a prefill answer offers).
    pub connector: Connector,
}

/// Accepts connections until `shutdown` turns true, then stops the engine (ending open
/// streams) and drains.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
    engine_task: JoinHandle<()>,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            () = engine::stopped(&mut shutdown) => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(err) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%err, "sim: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Chunks are small and latency is the product: never let Nagle hold one back.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%err, "sim: set_nodelay failed");
        }
        let state = Arc::clone(&state);
        let service = service_fn(move |req| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(handle(&state, req).await) }
        });
        let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(%err, "sim: connection ended with an error");
            }
        });
    }
    drop(listener);
    if let Err(err) = engine_task.await {
        tracing::warn!(%err, "sim: engine task failed");
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("sim: connections still open after the drain timeout");
    }
}

/// Routes one request.
pub async fn handle(state: &State, req: Request<Incoming>) -> Response<SimBody> {
    let endpoint = match req.uri().path() {
        "/v1/chat/completions" => Some(Endpoint::Chat),
        "/v1/completions" => Some(Endpoint::Completions),
        "/v1/responses" => Some(Endpoint::Responses),
        "/v1/messages" => Some(Endpoint::Messages),
        _ => None,
    };
    match (req.method(), req.uri().path(), endpoint) {
        (&Method::POST, _, Some(endpoint)) => generate(state, endpoint, req).await,
        (&Method::POST, "/tokenize", _) => tokenize(state, req).await,
        (&Method::GET, "/health", _) => full(StatusCode::OK, "text/plain", Bytes::new()),
        (&Method::GET, "/metrics", _) => full(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            state.metrics.render().into(),
        ),
        (&Method::GET, "/v1/models", _) => full(
            StatusCode::OK,
            "application/json",
            models_json(&state.config).into(),
        ),
        (_, "/health" | "/metrics" | "/v1/models" | "/tokenize", _) | (_, _, Some(_)) => full(
            StatusCode::METHOD_NOT_ALLOWED,
            "application/json",
            Bytes::from_static(br#"{"detail":"Method Not Allowed"}"#),
        ),
        _ => full(
            StatusCode::NOT_FOUND,
            "application/json",
            Bytes::from_static(br#"{"detail":"Not Found"}"#),
        ),
    }
}

/// vLLM's `POST /tokenize`: `{"prompt": text}` (or `{"messages": [...]}`, with the chat template)
/// answered with the count under the simulator's tokenizer.
async fn tokenize(state: &State, req: Request<Incoming>) -> Response<SimBody> {
    let bad = |message: &str| {
        let body = serde_json::json!({"object": "error", "message": message, "type": "BadRequestError", "code": 400});
        full(
            StatusCode::BAD_REQUEST,
            "application/json",
            body.to_string().into(),
        )
    };
    let Ok(body) = Limited::new(req.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    else {
        return bad("could not read the request body");
    };
    match super::tokenize::count(&body.to_bytes()) {
        Ok(count) => {
            let answer = super::tokenize::answer(count, state.config.kv_capacity_tokens);
            full(StatusCode::OK, "application/json", answer.into())
        }
        Err(message) => bad(&message),
    }
}

async fn generate(state: &State, endpoint: Endpoint, req: Request<Incoming>) -> Response<SimBody> {
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(err) => {
            return api_error(
                endpoint,
                StatusCode::BAD_REQUEST,
                &format!("could not read the request body: {err}"),
            )
        }
    };
    let arrival = Instant::now();
    let request = match request::parse(endpoint, &body) {
        Ok(request) => request,
        Err(err) => return api_error(endpoint, StatusCode::BAD_REQUEST, &err.0),
    };
    let SimRequest {
        model,
        prompt_tokens,
        prompt_ids,
        max_tokens,
        stream,
        usage,
        kv_transfer,
        ..
    } = request;
    let details = state.config.enable_prompt_tokens_details;
    let limit = state.config.kv_capacity_tokens;
    if prompt_tokens + max_tokens > limit {
        let message = format!(
            "This model's maximum context length is {limit} tokens. However, you requested {} tokens \
             ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length \
             of the messages or completion.",
            prompt_tokens + max_tokens
        );
        return api_error(endpoint, StatusCode::BAD_REQUEST, &message);
    }
    if let Some(remote) = &kv_transfer.remote_prefill {
        if let Err(response) = pull_kv(state, remote, prompt_tokens).await {
            return response;
        }
    }
    let model = model.unwrap_or_else(|| state.config.model.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let submission = Submission {
        prompt: Arc::from(prompt_ids),
        max_tokens,
        arrival,
        events: tx,
        kv_pulled: kv_transfer.remote_prefill.is_some(),
    };
    if state.engine.submit(submission).is_err() {
        return engine_gone();
    }
    let id = api::response_id(endpoint);
    let created = api::unix_now();
    if stream {
        let formatter: Formatter = match endpoint {
            Endpoint::Chat | Endpoint::Completions => {
                StreamFormatter::new(endpoint, &id, created, &model, prompt_tokens, usage)
                    .with_prompt_tokens_details(details)
                    .into()
            }
            Endpoint::Responses => {
                ResponsesFormatter::new(&id, created, &model, prompt_tokens, max_tokens).into()
            }
            Endpoint::Messages => MessagesFormatter::new(&id, &model, prompt_tokens).into(),
        };
        let mut response = Response::new(Either::Right(SseBody::new(rx, formatter)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        return response;
    }
    let (mut generated, mut cached) = (0, 0);
    loop {
        match rx.recv().await {
            Some(progress) => {
                generated += progress.new_tokens;
                cached += progress.cached_tokens;
                if progress.finished {
                    break;
                }
            }
            None => return engine_gone(),
        }
    }
    let cached = details.then_some(cached);
    let mut body = stream::full_response(
        endpoint,
        &id,
        created,
        &model,
        prompt_tokens,
        generated,
        cached,
    );
    if kv_transfer.remote_decode {
        body = stream::with_kv_transfer_params(body, &offer_kv(state, prompt_tokens));
    }
    full(StatusCode::OK, "application/json", body.into())
}

/// The decode side's KV pull: the transfer time of the whole prompt, then, with the `decode`
/// fault, the 500 a failed read surfaces as (before any byte of the answer).
async fn pull_kv(
    state: &State,
    remote: &RemotePrefill,
    prompt_tokens: u64,
) -> Result<(), Response<SimBody>> {
    let config = &state.config;
    tokio::time::sleep(config.scaled(config.kv_transfer_time(prompt_tokens))).await;
    if config.kv_transfer_fault == KvTransferFault::Decode {
        let RemotePrefill {
            engine_id,
            host,
            port,
            blocks,
        } = remote;
        let message = format!(
            "KV transfer failed: could not pull {blocks} KV blocks from engine {engine_id} at \
             {host}:{port}"
        );
        return Err(error(StatusCode::INTERNAL_SERVER_ERROR, &message));
    }
    state
        .metrics
        .update(|m| m.kv_transfer_received += prompt_tokens);
    Ok(())
}

/// The prefill side's offer: the params naming the prompt's blocks, or `null` with the `prefill`
/// fault (no blocks to hand over).
fn offer_kv(state: &State, prompt_tokens: u64) -> String {
    if state.config.kv_transfer_fault == KvTransferFault::Prefill {
        return "null".to_owned();
    }
    state
        .metrics
        .update(|m| m.kv_transfer_sent += prompt_tokens);
    state.connector.offer(prompt_tokens)
}

fn models_json(config: &SimConfig) -> String {
    let model = serde_json::to_string(&config.model).unwrap_or_else(|_| "\"\"".to_owned());
    format!(
        r#"{{"object":"list","data":[{{"id":{model},"object":"model","created":{},"owned_by":"vllm","root":{model},"parent":null,"max_model_len":{},"permission":[]}}]}}"#,
        api::unix_now(),
        config.kv_capacity_tokens
    )
}

fn full(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<SimBody> {
    let mut response = Response::new(Either::Left(Full::new(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// The error body of the API `endpoint` speaks.
fn api_error(endpoint: Endpoint, status: StatusCode, message: &str) -> Response<SimBody> {
    match endpoint {
        Endpoint::Chat | Endpoint::Completions => error(status, message),
        Endpoint::Responses => full(
            status,
            "application/json",
            responses::error_body(message).into(),
        ),
        Endpoint::Messages => full(
            status,
            "application/json",
            messages::error_body(message).into(),
        ),
    }
}

/// vLLM's error body for `status` (400: `BadRequestError`).
fn error(status: StatusCode, message: &str) -> Response<SimBody> {
    let kind = match status {
        StatusCode::BAD_REQUEST => "BadRequestError",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
        _ => "InternalServerError",
    };
    let body = format!(
        r#"{{"object":"error","message":{},"type":"{kind}","code":{}}}"#,
        serde_json::to_string(message).unwrap_or_else(|_| "\"\"".to_owned()),
        status.as_u16()
    );
    full(status, "application/json", body.into())
}

fn engine_gone() -> Response<SimBody> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the simulated engine is shutting down",
    )
}
