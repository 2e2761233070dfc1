//! The metering service: the outermost layer of the proxy stack.
//!
//! Its phases, on the request's [`RequestContext`]: take `t0` (the context's `received`), name the
//! dialect from the path; for a generation API, buffer the body (bounded), read it in one walk
//! ([`crate::request::read`]) and inject `include_usage` where the client did not ask for usage;
//! ask the router for a plan ([`Router::plan`]); then call the inner stack (dispatch, forward) and
//! wrap the response body in a [`MeteredBody`]. The context comes back with the response (or the
//! failure) and names the pool and backend that answered. Every other request is proxied as a
//! plain stream and only counted. It never fails: upstream errors become OpenAI-style JSON
//! responses here, in one place.
//!
//! ```no_run
//! # use tokenmeter::{config::Config, meter::layer::MeterLayer, metrics::Metrics, proxy};
//! # use std::sync::Arc;
//! let config = Config::default();
//! let metrics = Arc::new(Metrics::new(&config).unwrap());
//! let client = proxy::client::build(&config.upstream);
//! let router = Arc::new(tokenmeter::route::Router::from_config(&config, Arc::clone(&metrics)).unwrap());
//! let stack = tower::ServiceBuilder::new()
//!     .layer(MeterLayer::new(&config, metrics, Arc::clone(&router)))
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
use http::request::Parts;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use metrics::Gauge;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::body::{Calibration, MeteredBody, StreamMeter};
use super::record::{SloTargets, StreamRecord};
use super::strip::UsageStripper;
use super::whole::WholeBody;
use crate::config::Config;
use crate::context::{Generation, RequestContext};
use crate::dialect::Dialect;
use crate::metrics::exemplar::TraceId;
use crate::metrics::{Metrics, Operation, Outcome, RequestLabels};
use crate::proxy::{Failure, ProxyError, RequestBody, UpstreamBody};
use crate::request::{self, Injection};
use crate::route::Router;
use crate::sse::{Framer, StreamFormat};

/// The body of every response the proxy sends: an upstream body (metered or passed through) or a
/// response the proxy wrote itself (errors).
pub type ResponseBody = Either<MeteredBody<UpstreamBody>, Full<Bytes>>;

/// Backend (and pool) label for requests that never reached one.
const NO_BACKEND: &str = "none";

/// Configures [`Meter`].
#[derive(Debug, Clone)]
pub struct MeterLayer {
    metering: Arc<Metering>,
}

/// What every request's metering shares: the metrics, the router it asks for plans, the knobs.
#[derive(Debug)]
struct Metering {
    metrics: Arc<Metrics>,
    router: Arc<Router>,
    inject_usage: bool,
    max_body: usize,
    max_line: usize,
    slo: SloTargets,
    no_backend: Arc<str>,
}

impl MeterLayer {
    pub fn new(config: &Config, metrics: Arc<Metrics>, router: Arc<Router>) -> Self {
        Self {
            metering: Arc::new(Metering {
                metrics,
                router,
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
            metering: Arc::clone(&self.metering),
        }
    }
}

/// Meters every request passing to `S`.
#[derive(Debug, Clone)]
pub struct Meter<S> {
    inner: S,
    metering: Arc<Metering>,
}

impl<S> Service<Request<Incoming>> for Meter<S>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = Failure>
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
        let inner = self.inner.clone();
        let metering = Arc::clone(&self.metering);
        Box::pin(async move { Ok(metering.meter(inner, req).await) })
    }
}

impl Metering {
    async fn meter<S>(&self, inner: S, req: Request<Incoming>) -> Response<ResponseBody>
    where
        S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = Failure>,
    {
        let (mut parts, body) = req.into_parts();
        // The server put the context in when it dispatched the request (its `received` is t0);
        // a stack used without the server starts one here.
        let mut context = parts
            .extensions
            .remove::<RequestContext>()
            .unwrap_or_else(|| RequestContext::new(Instant::now(), None));
        let dialect = Dialect::for_request(&parts.method, parts.uri.path());
        context.dialect = dialect;
        // The request's W3C trace, for exemplars; the header itself goes upstream unchanged.
        let trace = parts
            .headers
            .get("traceparent")
            .and_then(|value| value.to_str().ok())
            .and_then(TraceId::from_traceparent);
        if context.conflicting_framing {
            // Refused before its body is read: counted as a client error of its operation.
            return self.reject(
                dialect.map_or(Operation::PASSTHROUGH, Operation::of),
                self.metrics.model_label(None),
                &context,
                &ProxyError::ConflictingFraming,
            );
        }
        let Some(dialect) = dialect else {
            return self.passthrough(inner, parts, body, context).await;
        };
        let operation = Operation::of(dialect);
        context.model = dialect.model_from_path(parts.uri.path()).map(str::to_owned);
        // Known generation APIs are buffered (bounded) for inspection and routing; an unknown POST
        // streams through untouched, whatever its size: it is only timed, never refused.
        let (body, injected) = if dialect == Dialect::Unknown {
            (RequestBody::Streaming(body), false)
        } else {
            let bytes = match self.read_body(&parts.headers, body).await {
                Ok(bytes) => bytes,
                Err(err) => {
                    let unknown = self.metrics.model_label(None);
                    return self.reject(operation, unknown, &context, &err);
                }
            };
            let read = request::read(&bytes);
            if let Some(model) = read.as_ref().and_then(|read| read.facts.model.clone()) {
                context.model = Some(model);
            }
            let streaming = read.as_ref().is_some_and(|read| read.facts.stream);
            let (bytes, injected) = match &read {
                Some(read) if dialect.injects_usage() => {
                    self.maybe_inject(operation, streaming, read, bytes)
                }
                _ => (bytes, false),
            };
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            context.generation = Some(Generation {
                body: bytes.clone(),
                read,
            });
            (RequestBody::buffered(bytes), injected)
        };
        let model = self.metrics.model_label(context.model.as_deref());
        self.router.plan(parts.uri.path(), &mut context).await;
        let waiting = AwaitingHead::new(self, operation, &model, context.pool.clone());
        parts.extensions.insert(context);
        let response = match call(inner, Request::from_parts(parts, body)).await {
            Ok(response) => response,
            Err(Failure { error, context }) => {
                waiting.disarm().decrement(1.0);
                if injected {
                    self.metrics.usage_injection(operation, "unanswered");
                }
                return self.reject(operation, model, &context, &error);
            }
        };
        let active = waiting.disarm();
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
        let format = if response.status().is_success() {
            dialect.stream_format(
                response
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|value| value.to_str().ok()),
            )
        } else {
            None
        };
        let strip = injected && format == Some(StreamFormat::Sse);
        let (mut parts, body) = response.into_parts();
        let context = parts
            .extensions
            .remove::<RequestContext>()
            .unwrap_or_else(|| RequestContext::new(Instant::now(), None));
        if strip {
            // The stripped body is shorter than the upstream said.
            parts.headers.remove(CONTENT_LENGTH);
        }
        let (pool, backend) = self.labels(&context);
        let meter = StreamMeter {
            record: StreamRecord::new(context.received),
            handles: self.metrics.stream(operation, &model, &backend, &pool),
            metrics: Arc::clone(&self.metrics),
            active,
            status: parts.status,
            slo: self.slo,
            dialect,
            framer: format.map(|format| Framer::new(format, self.max_line)),
            stripper: strip.then(UsageStripper::default),
            // A JSON content type is never a stream format, so this is the non-streaming answer.
            whole: WholeBody::for_response(dialect, parts.status, &parts.headers),
            estimate: context.estimate.map(|estimate| Calibration {
                calibrator: Arc::clone(self.router.calibrator()),
                model: Arc::clone(&model),
                estimate,
            }),
            trace,
        };
        Response::from_parts(parts, Either::Left(MeteredBody::new(body, meter)))
    }

    /// The `pool` and `backend` labels of a request: what its context names, `none` where it
    /// names nothing.
    fn labels(&self, context: &RequestContext) -> (Arc<str>, Arc<str>) {
        let none = || Arc::clone(&self.no_backend);
        (
            context.pool.clone().unwrap_or_else(none),
            context
                .backend
                .as_ref()
                .map_or_else(none, |target| Arc::clone(&target.label)),
        )
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
    fn maybe_inject(
        &self,
        operation: Operation,
        streaming: bool,
        read: &request::Inspection,
        bytes: Bytes,
    ) -> (Bytes, bool) {
        if !self.inject_usage || !streaming {
            return (bytes, false);
        }
        match read.inject(&bytes) {
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

    /// Answers a request that got no upstream response, and counts it.
    fn reject(
        &self,
        operation: Operation,
        model: Arc<str>,
        context: &RequestContext,
        err: &ProxyError,
    ) -> Response<ResponseBody> {
        let (pool, backend) = self.labels(context);
        let labels = RequestLabels {
            operation,
            model,
            pool,
            backend,
        };
        self.metrics.request_finished(&labels, err.outcome());
        tracing::warn!(error = %err, operation = operation.as_str(), "request failed before a response");
        err.to_response().map(Either::Right)
    }

    /// Proxies a request that is not a token stream: streamed both ways, counted by status.
    async fn passthrough<S>(
        &self,
        inner: S,
        mut parts: Parts,
        body: Incoming,
        mut context: RequestContext,
    ) -> Response<ResponseBody>
    where
        S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = Failure>,
    {
        let model = self.metrics.model_label(None);
        self.router.plan(parts.uri.path(), &mut context).await;
        parts.extensions.insert(context);
        let req = Request::from_parts(parts, RequestBody::Streaming(body));
        match call(inner, req).await {
            Ok(mut response) => {
                let context = response
                    .extensions_mut()
                    .remove::<RequestContext>()
                    .unwrap_or_else(|| RequestContext::new(Instant::now(), None));
                let (pool, backend) = self.labels(&context);
                let labels = RequestLabels {
                    operation: Operation::PASSTHROUGH,
                    model,
                    pool,
                    backend,
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
            Err(Failure { error, context }) => {
                self.reject(Operation::PASSTHROUGH, model, &context, &error)
            }
        }
    }
}

/// A request between its head and its response head. If the client leaves in that time, hyper
/// drops the service future and with it this guard, which takes the request off the active gauge
/// and counts it `cancelled` (labelled with its planned pool); once the response head is there
/// the stream meter takes over.
struct AwaitingHead {
    active: Gauge,
    armed: bool,
    metrics: Arc<Metrics>,
    operation: Operation,
    model: Arc<str>,
    pool: Arc<str>,
    no_backend: Arc<str>,
}

impl AwaitingHead {
    fn new(
        metering: &Metering,
        operation: Operation,
        model: &Arc<str>,
        pool: Option<Arc<str>>,
    ) -> Self {
        let active = metering.metrics.streams_active(operation, model);
        active.increment(1.0);
        Self {
            active,
            armed: true,
            metrics: Arc::clone(&metering.metrics),
            operation,
            model: Arc::clone(model),
            pool: pool.unwrap_or_else(|| Arc::clone(&metering.no_backend)),
            no_backend: Arc::clone(&metering.no_backend),
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
            pool: Arc::clone(&self.pool),
            backend: Arc::clone(&self.no_backend),
        };
        self.metrics.request_finished(&labels, Outcome::Cancelled);
    }
}

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

/// Waits for the inner service to be ready, then calls it.
async fn call<S>(mut inner: S, req: Request<RequestBody>) -> Result<Response<UpstreamBody>, Failure>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = Failure>,
{
    inner.ready().await?.call(req).await
}
