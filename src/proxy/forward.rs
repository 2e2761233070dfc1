//! The innermost service: sends a request to the [`Target`] in its extensions over the shared client.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::Arc;

use http::header::HOST;
use http::uri::{PathAndQuery, Uri};
use http::{HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::Service;

use super::client::{error_chain, Conn, ConnPool, ConnectError, UpstreamClient};
use super::timeout::{InFlight, Upstream};
use super::{headers, ClientAddr, ProxyError, RequestBody, Target, TimeoutBody, UpstreamBody};
use crate::config::UpstreamConfig;

/// Forwards requests upstream and applies the response, idle and total timeouts.
#[derive(Debug, Clone)]
pub struct Forward {
    pool: ConnPool,
    response_timeout: Duration,
    idle_timeout: Duration,
    total_timeout: Option<Duration>,
}

impl Forward {
    /// `_client` is the shared pooled client the health probes use; the token path has its own
    /// [`ConnPool`], whose connections are driven by the response body (see there for why).
    pub fn new(_client: UpstreamClient, config: &UpstreamConfig) -> Self {
        Self {
            pool: ConnPool::new(config),
            response_timeout: config.response_timeout,
            idle_timeout: config.idle_timeout,
            total_timeout: (!config.total_timeout.is_zero()).then_some(config.total_timeout),
        }
    }
}

/// The backend that answered, put in the response extensions for the meter's `backend` label.
#[derive(Debug, Clone)]
pub struct AnsweredBy(pub Target);

impl Service<Request<RequestBody>> for Forward {
    type Response = Response<UpstreamBody>;
    type Error = ProxyError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, ProxyError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        // The pooled client has no readiness of its own: it opens connections on demand.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.forward(req).await })
    }
}

impl Forward {
    async fn forward(
        self,
        mut req: Request<RequestBody>,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        let started = Instant::now();
        let target = req
            .extensions_mut()
            .remove::<Target>()
            .ok_or(ProxyError::NoUpstream)?;
        // Dropped with this future on an error, else carried by the response body to its end.
        let guard = req.extensions_mut().remove::<InFlight>();
        let client_ip = req.extensions().get::<ClientAddr>().map(|addr| addr.0.ip());
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        // HTTP/1.1 to an origin: origin-form request target, Host from the target when the
        // client sent none (as hyper-util's client does).
        *req.uri_mut() = Uri::from(path);
        if !req.headers().contains_key(HOST) {
            if let Ok(host) = HeaderValue::from_str(target.authority.as_str()) {
                req.headers_mut().insert(HOST, host);
            }
        }
        // Upstreams are spoken to in HTTP/1.1 whatever the client used (h2c clients included).
        *req.version_mut() = Version::HTTP_11;
        headers::strip_hop_by_hop(req.headers_mut());
        headers::add_forwarded(req.headers_mut(), client_ip, "http");

        let sent = tokio::time::timeout(self.response_timeout, self.send(&target, req)).await;
        let (response, conn) = match sent {
            Err(_elapsed) => {
                return Err(ProxyError::ResponseTimeout {
                    backend: target.label.clone(),
                    timeout: self.response_timeout,
                })
            }
            Ok(Err(err)) => return Err(err),
            Ok(Ok(answered)) => answered,
        };
        let (mut parts, body) = response.into_parts();
        headers::strip_hop_by_hop(&mut parts.headers);
        parts.extensions.insert(AnsweredBy(target));
        let total = self.total_timeout.map(|limit| (limit, started + limit));
        let body = TimeoutBody::new(body, self.idle_timeout, total)
            .with_guard(guard)
            .with_upstream(Upstream::new(conn, self.pool.clone()));
        Ok(Response::from_parts(parts, body))
    }

    /// Sends `req` on a pooled connection (or a new one), driving the connection until the
    /// response head is in. A pooled connection that turns out closed before the request went
    /// out is replaced by a new one, once per pooled connection tried (the request comes back
    /// unsent, so nothing is sent twice).
    async fn send(
        &self,
        target: &Target,
        req: Request<RequestBody>,
    ) -> Result<(Response<Incoming>, Conn), ProxyError> {
        let key = Arc::clone(&target.label);
        let mut req = req;
        loop {
            let pooled = self.pool.checkout(&key);
            let reused = pooled.is_some();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => {
                    let uri = Uri::builder()
                        .scheme(target.scheme.clone())
                        .authority(target.authority.clone())
                        .path_and_query("/")
                        .build()
                        .map_err(|err| ProxyError::Upstream {
                            backend: target.label.clone(),
                            detail: format!("cannot build the upstream URI: {err}"),
                        })?;
                    self.pool
                        .connect(&uri, Arc::clone(&key))
                        .await
                        .map_err(|err| connect_error(target, err))?
                }
            };
            let mut send = std::pin::pin!(conn.sender.try_send_request(req));
            let mut closed = false;
            let answer = std::future::poll_fn(|cx| {
                if !closed && Pin::new(&mut conn.driver).poll(cx).is_ready() {
                    closed = true;
                }
                send.as_mut().poll(cx)
            })
            .await;
            match answer {
                Ok(response) => return Ok((response, conn)),
                Err(mut err) => match err.take_message() {
                    // A stale pooled connection: try the next one (or a new one).
                    Some(unsent) if reused => req = unsent,
                    _ => {
                        return Err(ProxyError::Upstream {
                            backend: target.label.clone(),
                            detail: error_chain(err.error()),
                        })
                    }
                },
            }
        }
    }
}

fn connect_error(target: &Target, err: ConnectError) -> ProxyError {
    match err {
        ConnectError::Connect(detail) => {
            let timed_out = detail.contains("timed out") || detail.contains("timeout");
            ProxyError::Connect {
                backend: target.label.clone(),
                detail,
                timed_out,
            }
        }
        ConnectError::Handshake(err) => ProxyError::Connect {
            backend: target.label.clone(),
            detail: error_chain(&err),
            timed_out: false,
        },
    }
}
