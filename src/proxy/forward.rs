//! The innermost service: sends a request to the backend its context names, over the shared client.
use std::future::Future;
use std::time::Duration;

use http::uri::{PathAndQuery, Uri};
use http::{Request, Response, Version};
use tokio::time::Instant;

use super::client::UpstreamClient;
use super::h1::Error as ClientError;
use super::phase::{Answer, Next};
use super::{headers, Failure, ProxyError, RequestBody, TimeoutBody};
use crate::config::UpstreamConfig;
use crate::context::RequestContext;
use crate::trace::record as trace;
use crate::upstream::Target;

/// Forwards requests upstream and applies the response, idle and total timeouts.
#[derive(Debug, Clone)]
pub struct Forward {
    client: UpstreamClient,
    response_timeout: Duration,
    idle_timeout: Duration,
    total_timeout: Option<Duration>,
}

impl Forward {
    pub fn new(client: UpstreamClient, config: &UpstreamConfig) -> Self {
        Self {
            client,
            response_timeout: config.response_timeout,
            idle_timeout: config.idle_timeout,
            total_timeout: (!config.total_timeout.is_zero()).then_some(config.total_timeout),
        }
    }
}

/// The innermost phase: the pooled client has no readiness of its own (it opens connections on
/// demand).
impl Next for Forward {
    fn call(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
    ) -> impl Future<Output = Answer> + Send {
        // Boxed: its state (the client's exchange under its timeouts) is about 3 KiB, and every
        // phase above would otherwise hold it inline and copy it as its own future is built
        // (measured: a meter future of 9.4 KiB and ~4 400 more instructions per request than
        // with the box; docs/performance.md, "One phase layer").
        Box::pin(self.forward(context, req))
    }
}

impl Forward {
    /// Sends the request to `context.route.backend`; the context comes back in the response's
    /// extensions (or in the failure), its load guard moved into the response body.
    async fn forward(
        &self,
        mut context: Box<RequestContext>,
        mut req: Request<RequestBody>,
    ) -> Answer {
        let started = Instant::now();
        let Some(target) = context.route.backend.clone() else {
            return Err(Failure::new(ProxyError::NoUpstream, context));
        };
        context.marks.attempt = Some(started);
        context.marks.first_attempt.get_or_insert(started);
        if let Some(tracing) = context.tracing.as_mut() {
            let span = trace::next_span_id();
            tracing.start_attempt(span, started, Some(target.clone()), req.headers_mut());
        }
        // Dropped with this future on an error, else carried by the response body to its end.
        let guard = context.route.in_flight.take();
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let uri = Uri::builder()
            .scheme(target.scheme.clone())
            .authority(target.authority.clone())
            .path_and_query(path)
            .build();
        *req.uri_mut() = match uri {
            Ok(uri) => uri,
            Err(err) => {
                let error = ProxyError::Upstream {
                    backend: target.label.clone(),
                    detail: format!("cannot build the upstream URI: {err}"),
                };
                return Err(failed(error, context));
            }
        };
        // Upstreams are spoken to in HTTP/1.1 whatever the client used (h2c clients included).
        *req.version_mut() = Version::HTTP_11;
        headers::strip_hop_by_hop(req.headers_mut());
        headers::add_forwarded(
            req.headers_mut(),
            context.client.map(|addr| addr.ip()),
            if context.client_tls { "https" } else { "http" },
        );

        let sent = tokio::time::timeout(
            self.response_timeout,
            self.client.request_marked(req, target.tls.as_ref()),
        )
        .await;
        let (response, marks) = match sent {
            Err(_elapsed) => {
                let error = ProxyError::ResponseTimeout {
                    backend: target.label.clone(),
                    timeout: self.response_timeout,
                };
                return Err(failed(error, context));
            }
            Ok(Err(err)) => return Err(failed(classify(&target, &err), context)),
            Ok(Ok(answered)) => answered,
        };
        context.marks.connected = Some(marks.connected);
        context.marks.new_connection = marks.new_connection;
        context.marks.written = marks.written;
        context.marks.head = Some(Instant::now());
        let (mut parts, body) = response.into_parts();
        headers::strip_hop_by_hop(&mut parts.headers);
        context.put(&mut parts.extensions);
        let total = self.total_timeout.map(|limit| (limit, started + limit));
        Ok(Response::from_parts(
            parts,
            TimeoutBody::new(body, self.idle_timeout, total).with_guard(guard),
        ))
    }
}

/// The attempt failed with `error`: its span (when traced) ends now, with the error's type.
fn failed(error: ProxyError, mut context: Box<RequestContext>) -> Failure {
    if let Some(tracing) = context.tracing.as_mut() {
        tracing.fail_attempt(Instant::now(), error.kind(), error.to_string());
    }
    Failure::new(error, context)
}

/// Maps a client error to what the proxy reports: connect failures (and their timeouts) apart from
/// failures after the connection was made. The client's errors carry their causes in their text.
fn classify(target: &Target, err: &ClientError) -> ProxyError {
    let detail = err.to_string();
    if err.is_connect() {
        ProxyError::Connect {
            backend: target.label.clone(),
            detail,
            timed_out: err.is_connect_timeout(),
        }
    } else {
        ProxyError::Upstream {
            backend: target.label.clone(),
            detail,
        }
    }
}
