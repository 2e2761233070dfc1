//! The metering service: the meter's head phase, between admission and the plan.
//!
//! Its phases, on the request's [`RequestContext`] (whose `received` is `t0`): for a generation
//! API, buffer the body (bounded), read it in one walk ([`crate::request::read`]), name its model
//! and inject `include_usage` where the client did not ask for usage; then call the inner stack
//! (plan, dispatch, forward) and wrap the response body in a [`MeteredBody`], which meters it and
//! ends the request at its end. Every other request is proxied as a plain stream and ends with its
//! body too. It never fails: a request refused here or failed below is answered with an
//! OpenAI-style JSON error, in one place (`Metering::reject`), and ended with it.
//!
//! ```no_run
//! # use tokenmeter::{config::Config, meter::{layer::MeterLayer, series::MeterSeries}, metrics::Metrics, proxy, route};
//! # use tokenmeter::proxy::phase::Then;
//! # use std::sync::Arc;
//! let config = Config::default();
//! let metrics = Arc::new(Metrics::new(&config).unwrap());
//! let client = proxy::client::build(&config.upstream);
//! let router = Arc::new(route::Router::from_config(&config, Arc::clone(&metrics)).unwrap());
//! let series = Arc::new(MeterSeries::new(metrics, &config));
//! let phases = Then::new(
//!     route::Plan::new(Arc::clone(&router)),
//!     Then::new(route::Dispatch::new(router), proxy::Forward::new(client, &config.upstream)),
//! );
//! let stack = tower::ServiceBuilder::new()
//!     .layer(MeterLayer::new(&config, series))
//!     .service(phases);
//! ```
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::{Layer, Service};

/// The W3C Server Timing header (not among `http`'s constants).
const SERVER_TIMING: http::HeaderName = http::HeaderName::from_static("server-timing");

use super::body::{MeteredBody, StreamMeter};
use super::finish::labels_of;
use super::read;
use super::series::MeterSeries;
use super::strip::UsageStripper;
use super::whole::WholeBody;
use crate::config::{Affinity, Config, SloConfig, SloTargets};
use crate::context::phases::Phases;
use crate::context::RequestContext;
use crate::dialect::{Dialect, Operation};
use crate::meter::record::Generation;
use crate::proxy::phase::Next;
use crate::proxy::{Failure, ProxyError, RequestBody, UpstreamBody};
use crate::request::{self, Injection};
use crate::sse::{Framer, StreamFormat};

/// The body of every response the proxy sends: an upstream body (metered or passed through) or a
/// response the proxy wrote itself (errors).
pub type ResponseBody = Either<MeteredBody<UpstreamBody>, Full<Bytes>>;

/// Configures [`Meter`].
#[derive(Debug, Clone)]
pub struct MeterLayer {
    metering: Arc<Metering>,
}

/// What every request's metering shares: the meter's series and the knobs.
#[derive(Debug)]
struct Metering {
    series: Arc<MeterSeries>,
    inject_usage: bool,
    max_body: usize,
    max_line: usize,
    /// What the one walk of a body reads: with a pool that names prompts (prefix affinity), also
    /// where the prompt members lie.
    read: request::Read,
    none: Arc<str>,
    /// Answer generation responses with a `server-timing` header (`tracing.server_timing`).
    server_timing: bool,
    /// Whose targets a request gets (`[slo]`).
    slo: SloConfig,
}

impl MeterLayer {
    pub fn new(config: &Config, series: Arc<MeterSeries>) -> Self {
        Self {
            metering: Arc::new(Metering {
                series,
                inject_usage: config.metering.inject_usage,
                max_body: config.server.max_request_body_bytes,
                max_line: config.metering.max_sse_line_bytes,
                read: if names_prompts(config) {
                    request::Read::default().with_prompt_spans()
                } else {
                    request::Read::default()
                },
                none: Arc::from(super::finish::NO_BACKEND),
                server_timing: config.tracing.server_timing,
                slo: config.slo.clone(),
            }),
        }
    }
}

impl<N> Layer<N> for MeterLayer {
    type Service = Meter<N>;

    fn layer(&self, phases: N) -> Meter<N> {
        Meter {
            phases: Arc::new(phases),
            metering: Arc::clone(&self.metering),
        }
    }
}

/// Meters every request passing to the phases below it, `N`.
#[derive(Debug)]
pub struct Meter<N> {
    phases: Arc<N>,
    metering: Arc<Metering>,
}

impl<N> Clone for Meter<N> {
    fn clone(&self) -> Self {
        Self {
            phases: Arc::clone(&self.phases),
            metering: Arc::clone(&self.metering),
        }
    }
}

impl<N: Next> Service<Request<Incoming>> for Meter<N> {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    // The request's one allocation for its future (not per frame, nor per phase): the phases'
    // futures nest inside it unboxed, and it spans body buffering and forwarding.
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The phases have no readiness of their own.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let phases = Arc::clone(&self.phases);
        let metering = Arc::clone(&self.metering);
        Box::pin(async move { Ok(metering.meter(&*phases, req).await) })
    }
}

impl Metering {
    /// The SLO targets of a request for `model` with `headers`: its class's (by the class
    /// header), its model's, or the defaults.
    fn targets(&self, model: Option<&str>, headers: &HeaderMap) -> SloTargets {
        if !self.slo.varies() {
            return self.slo.defaults();
        }
        let class = headers
            .get(&self.slo.class_header)
            .and_then(|value| value.to_str().ok())
            .map(str::trim);
        self.slo.targets(model, class)
    }

    async fn meter<N: Next>(&self, phases: &N, req: Request<Incoming>) -> Response<ResponseBody> {
        let (mut parts, body) = req.into_parts();
        let Some(mut context) = RequestContext::take(&mut parts.extensions, "meter") else {
            return ProxyError::ContextLost.to_response().map(Either::Right);
        };
        context.marks.admitted = Some(Instant::now());
        if let Some(refused) = context.refused.take() {
            // Refused at its head (by the smuggling guard, the tenant gate): answered before its
            // body is read, counted as its operation.
            return self.reject(context, ProxyError::Refused(refused));
        }
        let Some(dialect) = context.dialect else {
            return self
                .forward(phases, parts, RequestBody::Streaming(body), context)
                .await;
        };
        context.request.model = dialect.model_from_path(parts.uri.path()).map(str::to_owned);
        // Known generation APIs are buffered (bounded) for inspection and routing; an unknown POST
        // streams through untouched, whatever its size: it is only timed, never refused.
        let body = if dialect == Dialect::Unknown {
            RequestBody::Streaming(body)
        } else {
            let bytes = match read::body(&parts.headers, body, self.max_body).await {
                Ok(bytes) => bytes,
                Err(err) => return self.reject(context, err),
            };
            let mut read = request::read_with(&bytes, self.read);
            if let Some(model) = read.as_ref().and_then(|read| read.facts.model.clone()) {
                context.request.model = Some(model);
            }
            let streaming = read.as_ref().is_some_and(|read| read.facts.stream);
            let operation = Operation::of(dialect);
            let (bytes, injected) = match read.as_mut() {
                Some(read) if dialect.injects_usage() => {
                    self.maybe_inject(operation, streaming, read, bytes)
                }
                _ => (bytes, false),
            };
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            context.request.usage_injected = injected;
            context.marks.body_read = Some(Instant::now());
            context.request.generation = Some(Generation {
                body: bytes.clone(),
                read,
            });
            RequestBody::buffered(bytes)
        };
        let model = self
            .series
            .metrics()
            .model_label(context.request.model.as_deref());
        self.series
            .streams_active(Operation::of(dialect), &model)
            .increment(1.0);
        context.request.model_label = Some(model);
        context.request.slo = Some(self.targets(context.request.model.as_deref(), &parts.headers));
        context.request.active = true;
        self.forward(phases, parts, body, context).await
    }

    /// Sends the request down the stack and wraps what comes back: a metered body for a
    /// generation response, a passthrough body for any other, an error answer for a failure.
    async fn forward<N: Next>(
        &self,
        phases: &N,
        parts: Parts,
        body: RequestBody,
        context: Box<RequestContext>,
    ) -> Response<ResponseBody> {
        let dialect = context.dialect;
        let response = match phases.call(context, Request::from_parts(parts, body)).await {
            Ok(response) => response,
            Err(Failure { error, context }) => {
                let Some(context) = context else {
                    // Lost below (counted there): answer, there is nothing to end.
                    return error.to_response().map(Either::Right);
                };
                if context.request.usage_injected {
                    let operation = Operation::of(dialect.unwrap_or(Dialect::Unknown));
                    self.series.usage_injection(operation, "unanswered");
                }
                return self.reject(context, error);
            }
        };
        let (mut parts, body) = response.into_parts();
        let Some(mut context) = RequestContext::take(&mut parts.extensions, "meter (response)")
        else {
            return Response::from_parts(parts, Either::Left(MeteredBody::unwatched(body)));
        };
        context.upstream_status = Some(parts.status);
        context.status = Some(parts.status);
        context.release_body();
        let Some(dialect) = dialect else {
            let body = MeteredBody::passthrough(body, context);
            return Response::from_parts(parts, Either::Left(body));
        };
        let operation = Operation::of(dialect);
        let success = parts.status.is_success();
        if context.request.usage_injected {
            // What became of the injection: the backend took the request, or refused it (an
            // invalid request, a prompt over the context); a refusal has no usage chunk to strip.
            let result = if success { "injected" } else { "rejected" };
            self.series.usage_injection(operation, result);
        }
        let format = if success {
            dialect.stream_format(
                parts
                    .headers
                    .get(CONTENT_TYPE)
                    .and_then(|value| value.to_str().ok()),
            )
        } else {
            None
        };
        let strip = context.request.usage_injected && format == Some(StreamFormat::Sse);
        if strip {
            // The stripped body is shorter than the upstream said.
            parts.headers.remove(CONTENT_LENGTH);
        }
        if self.server_timing {
            let timing = Phases::of(&context).server_timing(context.trace.as_ref());
            parts.headers.append(SERVER_TIMING, timing);
        }
        let labels = labels_of(&context, &self.series, &self.none);
        let mut handles = self.series.stream(&labels);
        if let Some(tenant) = context.tenant.as_ref().filter(|tenant| tenant.tracked) {
            handles.tenant_itl = Some(self.series.tenant_itl(&tenant.label));
        }
        let meter = StreamMeter {
            handles,
            dialect,
            framer: format.map(|format| Framer::new(format, self.max_line)),
            stripper: strip.then(UsageStripper::default),
            // A JSON content type is never a stream format, so this is the non-streaming answer.
            whole: WholeBody::for_response(dialect, parts.status, &parts.headers),
        };
        let body = MeteredBody::new(body, context, meter);
        Response::from_parts(parts, Either::Left(body))
    }

    /// Adds `include_usage` to a streaming request when configured; returns the body to send and
    /// whether the usage chunk must be stripped from the response. An injection is counted once
    /// its answer is known (`injected`, `rejected`, `unanswered`), the other outcomes here.
    fn maybe_inject(
        &self,
        operation: Operation,
        streaming: bool,
        read: &mut request::Inspection,
        bytes: Bytes,
    ) -> (Bytes, bool) {
        if !self.inject_usage || !streaming {
            return (bytes, false);
        }
        match read.inject(&bytes) {
            Injection::Injected(rewritten) => (rewritten, true),
            Injection::NotNeeded => {
                self.series.usage_injection(operation, "not_needed");
                (bytes, false)
            }
            Injection::Declined(reason) => {
                tracing::debug!(reason, "usage injection declined");
                self.series.usage_injection(operation, "declined");
                (bytes, false)
            }
        }
    }

    /// Answers a request that got no upstream response, and ends it with the error.
    fn reject(&self, mut context: Box<RequestContext>, err: ProxyError) -> Response<ResponseBody> {
        let operation = context
            .dialect
            .map_or(Operation::PASSTHROUGH, Operation::of);
        let refused_by = match &err {
            ProxyError::Refused(refusal) => refusal.by.as_str(),
            _ => "-",
        };
        tracing::warn!(error = %err, refused_by, operation = operation.as_str(), "request failed before a response");
        let response = err.to_response();
        context.status = Some(response.status());
        context.finish(err.outcome(), Some(&err));
        response.map(Either::Right)
    }
}

/// Whether a pool of `config` names prompts by their prefix (`affinity = "prefix"`): the walk then
/// locates the prompt members for it.
fn names_prompts(config: &Config) -> bool {
    config
        .effective_pools()
        .iter()
        .any(|pool| pool.affinity == Affinity::Prefix)
}
