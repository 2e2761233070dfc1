//! Admission limits on the traffic port: open connections and requests in flight; and the loop
//! guard, which refuses a request that has come back to this tokenmeter.
//!
//! Long on purpose: the two limits and the loop guard share one future and one body wrapper (a
//! stream's permit must outlive its response body).
//!
//! A sidecar must never be the reason a pod falls over, so past a limit it answers at once — 503
//! with `retry-after` and an OpenAI-style JSON error (SDKs retry on exactly that) — instead of
//! queueing without bound. Both limits are semaphores whose permits live as long as what they
//! count: a connection permit moves into the connection task, a stream permit into the response
//! body ([`Admitted`]), so it is released when the last byte went out or the client left.
//!
//! A refused request ends at once (outcome `overloaded` at the finish point, like every other
//! ending); rejections are also counted by limit in `tokenmeter_rejected_total{reason}`
//! (`max_streams`, `max_connections`), and the open counts are exposed as gauges; [`Limits::counts`] reads them at
//! scrape time and [`series`] writes them beside every other series.
//!
//! **Loops.** An upstream that points back at tokenmeter (its own port in `upstream.urls`, or a
//! pool of a gateway that reaches the gateway again) used to send each request round until
//! `max_streams` was spent, seconds later, and then answer "at its limit of concurrent
//! requests", which points at the wrong knob. Here every request this tokenmeter sends
//! upstream carries its id, appended to the hop header ([`crate::proxy::headers::VIA`]) by the
//! upstream client as it writes the head ([`crate::proxy::h1::Client::naming`]), and one that
//! arrives with that id already there is answered at once, before it takes a stream permit:
//! `508 Loop Detected`, an OpenAI-style error that names the loop and the keys to check,
//! counted in `tokenmeter_rejected_total{reason="loop"}` (on which `TokenmeterRejectingRequests`
//! pages, with the loop's runbook: it is a config error, every such request fails, and no limit
//! helps) and ended as a `client_error`, not `overloaded`: the request it received is one it
//! must not serve, and nothing was at a limit. The tokenmeter that sent it counts the 508 as its
//! backend's `upstream_error`. Exactly one copy of a looped request is forwarded.
//!
//! ```no_run
//! # use tokenmeter::{config::Config, server::admission::{AdmissionLayer, Limits}};
//! # use std::sync::Arc;
//! let limits = Arc::new(Limits::new(&Config::default().server));
//! let layer = AdmissionLayer::new(Arc::clone(&limits)); // outermost layer of the traffic stack
//! ```
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use crate::config::ServerConfig;
use crate::context::{Refusal, RefusedBy, RequestContext};
use crate::meter::layer::ResponseBody;
use crate::proxy::error::json_error;
use crate::proxy::headers::InstanceId;
use crate::proxy::ProxyError;
use series::AdmissionCounts;

pub mod series;

/// Seconds a rejected client is told to wait (`retry-after`).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Which limit turned a client away (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Streams,
    Connections,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Streams => "max_streams",
            Limit::Connections => "max_connections",
        }
    }
}

/// The `reason` of a request refused because it came back to this tokenmeter.
pub(crate) const LOOP: &str = "loop";

/// The admission state shared by the accept loop and every connection.
#[derive(Debug)]
pub struct Limits {
    streams: Arc<Semaphore>,
    connections: Arc<Semaphore>,
    /// The permits each semaphore holds in all: the limit, plus permits a lowered limit has not
    /// taken back yet (they are taken as streams finish; see [`Limits::resize`]).
    max_streams: Arc<AtomicUsize>,
    max_connections: Arc<AtomicUsize>,
    rejected_streams: AtomicU64,
    rejected_connections: AtomicU64,
    /// This tokenmeter's id in the hop header, drawn once per server (kept across reloads).
    instance: InstanceId,
    rejected_loops: AtomicU64,
}

/// Held by a connection task for the connection's life.
#[derive(Debug)]
pub(crate) struct ConnectionPermit(#[allow(dead_code)] OwnedSemaphorePermit);

impl Limits {
    pub fn new(config: &ServerConfig) -> Self {
        Self {
            streams: Arc::new(Semaphore::new(config.max_streams)),
            connections: Arc::new(Semaphore::new(config.max_connections)),
            max_streams: Arc::new(AtomicUsize::new(config.max_streams)),
            max_connections: Arc::new(AtomicUsize::new(config.max_connections)),
            rejected_streams: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            instance: InstanceId::random(),
            rejected_loops: AtomicU64::new(0),
        }
    }

    /// This tokenmeter's id in the hop header.
    pub fn instance(&self) -> &InstanceId {
        &self.instance
    }

    /// How many requests came back to this tokenmeter and were refused.
    pub fn loops(&self) -> u64 {
        self.rejected_loops.load(Ordering::Relaxed)
    }

    /// A permit for a newly accepted connection; `None` (and counted) when at the limit.
    pub(crate) fn try_connection(&self) -> Option<ConnectionPermit> {
        match Arc::clone(&self.connections).try_acquire_owned() {
            Ok(permit) => Some(ConnectionPermit(permit)),
            Err(_) => {
                self.rejected(Limit::Connections);
                None
            }
        }
    }

    fn try_stream(&self) -> Option<OwnedSemaphorePermit> {
        let permit = Arc::clone(&self.streams).try_acquire_owned().ok();
        if permit.is_none() {
            self.rejected(Limit::Streams);
        }
        permit
    }

    fn rejected(&self, limit: Limit) {
        let counter = match limit {
            Limit::Streams => &self.rejected_streams,
            Limit::Connections => &self.rejected_connections,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// How many clients this limit has turned away.
    pub fn rejections(&self, limit: Limit) -> u64 {
        match limit {
            Limit::Streams => self.rejected_streams.load(Ordering::Relaxed),
            Limit::Connections => self.rejected_connections.load(Ordering::Relaxed),
        }
    }

    /// Open traffic connections now.
    pub fn connections_open(&self) -> usize {
        in_use(&self.max_connections, &self.connections)
    }

    /// Admitted requests whose response has not finished.
    pub fn streams_admitted(&self) -> usize {
        in_use(&self.max_streams, &self.streams)
    }

    /// Applies a reloaded `server.max_streams` / `server.max_connections`. A raised limit admits
    /// at once. A lowered one takes back the free permits at once and the rest as streams and
    /// connections finish (nothing in flight is cut); until then new ones are refused.
    pub(crate) fn resize(&self, config: &ServerConfig) {
        resize(&self.streams, &self.max_streams, config.max_streams);
        resize(
            &self.connections,
            &self.max_connections,
            config.max_connections,
        );
    }

    /// The counts at this instant.
    pub fn counts(&self) -> AdmissionCounts {
        AdmissionCounts {
            rejected: [
                (Limit::Streams.as_str(), self.rejections(Limit::Streams)),
                (
                    Limit::Connections.as_str(),
                    self.rejections(Limit::Connections),
                ),
                (LOOP, self.loops()),
            ],
            connections_open: self.connections_open(),
            streams_admitted: self.streams_admitted(),
        }
    }

    /// The series of this module in the Prometheus text format (see [`series`]).
    pub fn render(&self) -> String {
        series::render(&self.counts())
    }
}

fn in_use(total: &AtomicUsize, semaphore: &Semaphore) -> usize {
    total
        .load(Ordering::Relaxed)
        .saturating_sub(semaphore.available_permits())
}

/// Moves `semaphore` to `limit` permits (see [`Limits::resize`]). `total` counts the permits the
/// semaphore holds, so it comes down only as permits are actually taken back.
fn resize(semaphore: &Arc<Semaphore>, total: &Arc<AtomicUsize>, limit: usize) {
    let current = total.load(Ordering::Relaxed);
    if limit >= current {
        semaphore.add_permits(limit - current);
        total.fetch_add(limit - current, Ordering::Relaxed);
        return;
    }
    let excess = current - limit;
    let taken = semaphore.forget_permits(excess);
    total.fetch_sub(taken, Ordering::Relaxed);
    let owed = excess - taken;
    if owed == 0 {
        return;
    }
    // The semaphore is fair: permits released from now on go to this waiter first.
    let (semaphore, total) = (Arc::clone(semaphore), Arc::clone(total));
    let Ok(owed_u32) = u32::try_from(owed) else {
        return;
    };
    tokio::spawn(async move {
        if let Ok(permits) = semaphore.acquire_many_owned(owed_u32).await {
            permits.forget();
            total.fetch_sub(owed, Ordering::Relaxed);
        }
    });
}

/// Why a limit turned a request away, as the client reads it: 503, `retry-after`, an
/// OpenAI-style JSON error naming the key.
pub(crate) fn over_limit(limit: Limit) -> Refusal {
    let message = match limit {
        Limit::Streams => {
            "tokenmeter is at its limit of concurrent requests (server.max_streams); retry shortly"
        }
        Limit::Connections => {
            "tokenmeter is at its limit of open connections (server.max_connections); retry shortly"
        }
    };
    Refusal::new(
        RefusedBy::Limit,
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        message,
    )
    .retry_after(RETRY_AFTER)
}

/// The answer past a limit ([`over_limit`]).
pub fn overloaded(limit: Limit) -> Response<Full<Bytes>> {
    ProxyError::from(over_limit(limit)).to_response()
}

/// Why a request that came back to this tokenmeter is turned away: 508, an OpenAI-style JSON
/// error naming the loop (no `retry-after`: retrying cannot help).
fn looped(instance: &InstanceId) -> Refusal {
    let message = format!(
        "this request already passed through this tokenmeter (instance {instance}): its upstream \
         points back at it; check upstream.urls / pools (TOKENMETER_UPSTREAM)"
    );
    Refusal::new(
        RefusedBy::Loop,
        StatusCode::LOOP_DETECTED,
        "loop_detected",
        message,
    )
}

/// Ends a request refused here with `refusal` (where its context is found) and gives its answer.
/// It ends with no error of its own: its outcome (`overloaded`, or the loop's `client_error`)
/// is the whole story, and a span's status reads just that.
pub fn refuse(context: Option<Box<RequestContext>>, refusal: Refusal) -> Response<Full<Bytes>> {
    let outcome = refusal.outcome();
    let response = ProxyError::from(refusal).to_response();
    if let Some(mut context) = context {
        context.status = Some(response.status());
        context.finish(outcome, None);
    }
    response
}

/// Puts the stream limit in front of a service (see the module docs).
#[derive(Debug, Clone)]
pub struct AdmissionLayer {
    limits: Arc<Limits>,
}

impl AdmissionLayer {
    pub fn new(limits: Arc<Limits>) -> Self {
        Self { limits }
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Admission<S> {
        Admission {
            inner,
            limits: Arc::clone(&self.limits),
        }
    }
}

/// Admits a request when a stream permit is free, else answers 503 without calling `S`.
#[derive(Debug, Clone)]
pub struct Admission<S> {
    inner: S,
    limits: Arc<Limits>,
}

impl<S, B> Service<Request<B>> for Admission<S>
where
    S: Service<Request<B>, Response = Response<ResponseBody>, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response<Admitted<ResponseBody>>;
    type Error = Infallible;
    type Future = AdmissionFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let instance = &self.limits.instance;
        if instance.seen_in(req.headers()) {
            // Back from our own upstream: refused before it takes a permit or goes round again.
            self.limits.rejected_loops.fetch_add(1, Ordering::Relaxed);
            let context = RequestContext::take(req.extensions_mut(), "admission");
            return AdmissionFuture::Answered(Some(refuse(context, looped(instance))));
        }
        match self.limits.try_stream() {
            Some(permit) => AdmissionFuture::Admitted {
                inner: self.inner.call(req),
                permit: Some(permit),
            },
            None => {
                // Refused here, before anything read its body: it ends now.
                let context = RequestContext::take(req.extensions_mut(), "admission");
                AdmissionFuture::Answered(Some(refuse(context, over_limit(Limit::Streams))))
            }
        }
    }
}

/// The response of [`Admission`]: the inner one, or its own refusal (a limit's 503, a loop's
/// 508), answered at once and taken once.
pub enum AdmissionFuture<F> {
    Admitted {
        /// The meter's future, boxed there (the request's one box): `Unpin`.
        inner: F,
        permit: Option<OwnedSemaphorePermit>,
    },
    Answered(Option<Response<Full<Bytes>>>),
}

impl<F> Future for AdmissionFuture<F>
where
    F: Future<Output = Result<Response<ResponseBody>, Infallible>> + Unpin,
{
    type Output = Result<Response<Admitted<ResponseBody>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every field is Unpin (the inner future is, by its bound).
        match self.get_mut() {
            AdmissionFuture::Admitted { inner, permit } => {
                let Ok(response) = std::task::ready!(Pin::new(inner).poll(cx));
                let permit = permit.take();
                Poll::Ready(Ok(response.map(|body| Admitted {
                    inner: body,
                    permit,
                })))
            }
            AdmissionFuture::Answered(answer) => {
                // Polled again after its answer (a bug of the caller): a 500 then, never a panic.
                let response = answer.take().unwrap_or_else(|| {
                    json_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal_error",
                        "polled after its answer",
                    )
                });
                Poll::Ready(Ok(response.map(|body| Admitted {
                    inner: Either::Right(body),
                    permit: None,
                })))
            }
        }
    }
}

/// A response body holding its stream permit until the end of the stream (or its drop).
#[derive(Debug)]
pub struct Admitted<B> {
    inner: B,
    permit: Option<OwnedSemaphorePermit>,
}

impl<B> Body for Admitted<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if polled.is_none() {
            // Released at the end, not only on drop: hyper may keep the body a while after.
            this.permit = None;
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
