//! The metering service: the outermost layer of the proxy stack.
//!
//! It stamps `t0` when the request head arrives, buffers and inspects chat / completions request bodies
//! (model, `stream`, usage injection), calls the inner stack (routing, then forwarding), and wraps
//! the response body in a [`MeteredBody`]. The router needs the request too: the buffered body
//! ([`BufferedBody`]) and its [`request::RequestFacts`] travel in the request extensions, and a
//! [`PoolSlot`] comes back with the pool chosen. Every other path is proxied as a plain stream and only
//! counted. It never fails: upstream errors become OpenAI-style JSON responses here, in one place.
//!
//! ```no_run
//! # use tokenmeter::{config::Config, meter::layer::MeterLayer, metrics::Metrics, proxy};
//! # use std::sync::Arc;
//! let config = Config::default();
//! let metrics = Arc::new(Metrics::new(&config).unwrap());
//! let client = proxy::client::build(&config.upstream);
//! let router = Arc::new(tokenmeter::route::Router::from_config(&config, Arc::clone(&metrics)).unwrap());
//! let stack = tower::ServiceBuilder::new()
//!     .layer(MeterLayer::new(&config, metrics))
//!     .layer(tokenmeter::route::RouteLayer::new(router))
//!     .service(proxy::Forward::new(client, &config.upstream));
//! ```
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use metrics::Gauge;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::body::{MeteredBody, StreamMeter};
use super::dialect::{Dialect, Framer, Framing};
use super::record::{SloTargets, StreamRecord};
use super::request::{self, Injection};
use super::strip::UsageStripper;
use super::whole::WholeBody;
use crate::config::Config;
use crate::framing::ConflictingFraming;
use crate::metrics::{Metrics, Operation, Outcome, RequestLabels};
use crate::proxy::forward::AnsweredBy;
use crate::proxy::{ProxyError, RequestBody, UpstreamBody};
use crate::route::{PoolSlot, PromptEstimate};

/// The body of every response the proxy sends: an upstream body (metered or passed through) or a
/// response the proxy wrote itself (errors).
pub type ResponseBody = Either<MeteredBody<UpstreamBody>, Full<Bytes>>;

/// Backend (and pool) label for requests that never reached one.
const NO_BACKEND: &str = "none";

/// A request extension: the chat / completions body as it is forwarded (a cheap `Bytes` clone), for
/// the router's prompt estimate and for a retry on another backend.
#[derive(Debug, Clone)]
pub struct BufferedBody(pub Bytes);

/// Configures [`Meter`].
#[derive(Debug, Clone)]
pub struct MeterLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    metrics: Arc<Metrics>,
    inject_usage: bool,
    max_body: usize,
    max_line: usize,
    slo: SloTargets,
    no_backend: Arc<str>,
}

impl MeterLayer {
    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Self {
        Self {
            shared: Arc::new(Shared {
                metrics,
                inject_usage: config.metering.inject_usage,
                max_body: config.server.max_request_body_bytes,
                max_line: config.metering.max_sse_line_bytes,
                slo: SloTargets {
                    ttft: config.slo.ttft,
                    tpot: config.slo.tpot,
                },
                no_backend: Arc::from(NO_BACKEND),
            }),
        }
    }
}

impl<S> Layer<S> for MeterLayer {
    type Service = Meter<S>;

    fn layer(&self, inner: S) -> Meter<S> {
        Meter {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Meters every request passing to `S`.
#[derive(Debug, Clone)]
pub struct Meter<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Service<Request<Incoming>> for Meter<S>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = ProxyError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    // One allocation per request (not per frame): the future spans body buffering and forwarding.
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness of the inner stack is awaited per request inside the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let t0 = Instant::now();
        let inner = self.inner.clone();
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { Ok(shared.handle(inner, req, t0).await) })
    }
}

impl Shared {
    async fn handle<S>(
        &self,
        inner: S,
        req: Request<Incoming>,
        t0: Instant,
    ) -> Response<ResponseBody>
    where
        S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = ProxyError>,
    {
        let dialect = Dialect::for_request(req.method(), req.uri().path());
        if req.extensions().get::<ConflictingFraming>().is_some() {
            // Refused before its body is read: counted as a client error of its operation.
            return self.reject(
                dialect.map_or(Operation::PASSTHROUGH, Operation::of),
                self.metrics.model_label(None),
                Arc::clone(&self.no_backend),
                &ProxyError::ConflictingFraming,
            );
        }
        let Some(dialect) = dialect else {
            return self.passthrough(inner, req).await;
        };
        let operation = Operation::of(dialect);
        let path_model = dialect.model_from_path(req.uri().path()).map(str::to_owned);
        let (mut parts, body) = req.into_parts();
        let slot = PoolSlot::default();
        parts.extensions.insert(slot.clone());
        // Known generation APIs are buffered (bounded) for inspection and routing; an unknown POST
        // streams through untouched, whatever its size: it is only timed, never refused.
        let (body, model_name, injected) = if dialect == Dialect::Unknown {
            (RequestBody::Streaming(body), path_model, false)
        } else {
            let bytes = match self.read_body(&parts.headers, body).await {
                Ok(bytes) => bytes,
                Err(err) => {
                    let unknown = self.metrics.model_label(None);
                    let none = Arc::clone(&self.no_backend);
                    return self.reject(operation, unknown, none, &err);
                }
            };
            let facts = request::inspect(&bytes);
            let model_name = facts
                .as_ref()
                .and_then(|facts| facts.model.clone())
                .or(path_model);
            let streaming = facts.as_ref().is_some_and(|facts| facts.stream);
            let (bytes, injected) = if dialect.injects_usage() {
                self.maybe_inject(operation, streaming, bytes)
            } else {
                (bytes, false)
            };
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            parts.extensions.insert(BufferedBody(bytes.clone()));
            if let Some(facts) = facts {
                parts.extensions.insert(facts);
            }
            (RequestBody::buffered(bytes), model_name, injected)
        };
        let model = self.metrics.model_label(model_name.as_deref());
        let waiting = AwaitingHead::new(self, operation, &model, &slot);
        let req = Request::from_parts(parts, body);
        let response = match call(inner, req).await {
            Ok(response) => response,
            Err(err) => {
                waiting.disarm().decrement(1.0);
                if injected {
                    self.metrics.usage_injection(operation, "unanswered");
                }
                return self.reject(operation, model, self.pool_of(&slot), &err);
            }
        };
        if injected {
            // What became of the injection: the backend took the request, or refused it (an
            // invalid request, a prompt over the context); a refusal has no usage chunk to strip.
            let result = if response.status().is_success() {
                "injected"
            } else {
                "rejected"
            };
            self.metrics.usage_injection(operation, result);
        }
        let active = waiting.disarm();
        let pool = self.pool_of(&slot);
        let backend = response.extensions().get::<AnsweredBy>().map_or_else(
            || Arc::clone(&self.no_backend),
            |by| Arc::clone(&by.0.label),
        );
        let framing = if response.status().is_success() {
            dialect.framing(
                response
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|value| value.to_str().ok()),
            )
        } else {
            None
        };
        let strip = injected && framing == Some(Framing::Sse);
        let (mut parts, body) = response.into_parts();
        let estimate = parts.extensions.remove::<PromptEstimate>();
        if strip {
            // The stripped body is shorter than the upstream said.
            parts.headers.remove(CONTENT_LENGTH);
        }
        let meter = StreamMeter {
            record: StreamRecord::new(t0),
            handles: self.metrics.stream(operation, &model, &backend, &pool),
            metrics: Arc::clone(&self.metrics),
            active,
            status: parts.status,
            slo: self.slo,
            dialect,
            framer: framing.map(|framing| Framer::new(framing, self.max_line)),
            stripper: strip.then(UsageStripper::default),
            // A JSON content type is never a stream framing, so this is the non-streaming answer.
            whole: WholeBody::for_response(dialect, parts.status, &parts.headers),
            estimate,
        };
        Response::from_parts(parts, Either::Left(MeteredBody::new(body, meter)))
    }

    /// Buffers a request body up to the configured limit.
    async fn read_body(
        &self,
        headers: &http::HeaderMap,
        body: Incoming,
    ) -> Result<Bytes, ProxyError> {
        let too_large = ProxyError::BodyTooLarge {
            limit: self.max_body,
        };
        let declared = headers
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.max_body as u64) {
            return Err(too_large);
        }
        match Limited::new(body, self.max_body).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(err) if err.is::<http_body_util::LengthLimitError>() => Err(too_large),
            Err(err) => Err(ProxyError::ClientBody {
                detail: err.to_string(),
                client_gone: connection_ended(&*err),
            }),
        }
    }

    /// Adds `include_usage` to a streaming request when configured; returns the body to send and
    /// whether the usage chunk must be stripped from the response. An injection is counted once
    /// its answer is known (`injected`, `rejected`, `unanswered`), the other outcomes here.
    fn maybe_inject(&self, operation: Operation, streaming: bool, bytes: Bytes) -> (Bytes, bool) {
        if !self.inject_usage || !streaming {
            return (bytes, false);
        }
        match request::inject_include_usage(&bytes) {
            Injection::Injected(rewritten) => (rewritten, true),
            Injection::NotNeeded => {
                self.metrics.usage_injection(operation, "not_needed");
                (bytes, false)
            }
            Injection::Declined(reason) => {
                tracing::debug!(reason, "usage injection declined");
                self.metrics.usage_injection(operation, "declined");
                (bytes, false)
            }
        }
    }

    /// The pool the router chose, `none` when it chose none.
    fn pool_of(&self, slot: &PoolSlot) -> Arc<str> {
        slot.get().unwrap_or_else(|| Arc::clone(&self.no_backend))
    }

    /// Answers a request that got no upstream response, and counts it.
    fn reject(
        &self,
        operation: Operation,
        model: Arc<str>,
        pool: Arc<str>,
        err: &ProxyError,
    ) -> Response<ResponseBody> {
        let labels = RequestLabels {
            operation,
            model,
            pool,
            backend: err
                .backend()
                .map_or_else(|| Arc::clone(&self.no_backend), Arc::clone),
        };
        self.metrics.request_finished(&labels, err.outcome());
        tracing::warn!(error = %err, operation = operation.as_str(), "request failed before a response");
        err.to_response().map(Either::Right)
    }

    /// Proxies a request that is not a token stream: streamed both ways, counted by status.
    async fn passthrough<S>(&self, inner: S, req: Request<Incoming>) -> Response<ResponseBody>
    where
        S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = ProxyError>,
    {
        let model = self.metrics.model_label(None);
        let slot = PoolSlot::default();
        let mut req = req.map(RequestBody::Streaming);
        req.extensions_mut().insert(slot.clone());
        match call(inner, req).await {
            Ok(response) => {
                let labels = RequestLabels {
                    operation: Operation::PASSTHROUGH,
                    model,
                    pool: self.pool_of(&slot),
                    backend: response.extensions().get::<AnsweredBy>().map_or_else(
                        || Arc::clone(&self.no_backend),
                        |by| Arc::clone(&by.0.label),
                    ),
                };
                let status = response.status();
                let outcome = if status.is_success() || status.is_redirection() {
                    Outcome::Ok
                } else if status.is_client_error() {
                    Outcome::ClientError
                } else {
                    Outcome::UpstreamError
                };
                self.metrics.request_finished(&labels, outcome);
                response.map(|body| Either::Left(MeteredBody::passthrough(body)))
            }
            Err(err) => self.reject(Operation::PASSTHROUGH, model, self.pool_of(&slot), &err),
        }
    }
}

/// A request between its head and its response head. If the client leaves in that time, hyper
/// drops the service future and with it this guard, which takes the request off the active gauge
/// and counts it `cancelled`; once the response head is there the stream meter takes over.
struct AwaitingHead {
    active: Gauge,
    armed: bool,
    metrics: Arc<Metrics>,
    operation: Operation,
    model: Arc<str>,
    slot: PoolSlot,
    no_backend: Arc<str>,
}

impl AwaitingHead {
    fn new(shared: &Shared, operation: Operation, model: &Arc<str>, slot: &PoolSlot) -> Self {
        let active = shared.metrics.streams_active(operation, model);
        active.increment(1.0);
        Self {
            active,
            armed: true,
            metrics: Arc::clone(&shared.metrics),
            operation,
            model: Arc::clone(model),
            slot: slot.clone(),
            no_backend: Arc::clone(&shared.no_backend),
        }
    }

    /// The response head arrived (or an error answer is being written): hand over the gauge.
    fn disarm(mut self) -> Gauge {
        self.armed = false;
        self.active.clone()
    }
}

impl Drop for AwaitingHead {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.active.decrement(1.0);
        let labels = RequestLabels {
            operation: self.operation,
            model: Arc::clone(&self.model),
            pool: self
                .slot
                .get()
                .unwrap_or_else(|| Arc::clone(&self.no_backend)),
            backend: Arc::clone(&self.no_backend),
        };
        self.metrics.request_finished(&labels, Outcome::Cancelled);
    }
}

/// Waits for the inner service to be ready, then calls it.
/// Whether a request-body error is the client's connection ending or being reset (hyper reports
/// an early end of a body as an `UnexpectedEof` I/O error), rather than a malformed body.
fn connection_ended(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        source = err.source();
    }
    false
}

async fn call<S>(
    mut inner: S,
    req: Request<RequestBody>,
) -> Result<Response<UpstreamBody>, ProxyError>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = ProxyError>,
{
    inner.ready().await?.call(req).await
}
