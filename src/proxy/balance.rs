//! Round-robin over the configured upstreams: picks a [`Target`] and puts it in the request
//! extensions for [`super::Forward`]. The routing layer (pools, rules, load-aware choice) replaces this
//! layer and nothing else.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower::{Layer, Service};

use super::{Target, Upstreams};

/// Configures [`RoundRobin`].
#[derive(Debug, Clone)]
pub struct RoundRobinLayer {
    upstreams: Upstreams,
    next: Arc<AtomicUsize>,
}

impl RoundRobinLayer {
    pub fn new(upstreams: Upstreams) -> Self {
        Self {
            upstreams,
            next: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl<S> Layer<S> for RoundRobinLayer {
    type Service = RoundRobin<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RoundRobin {
            inner,
            upstreams: self.upstreams.clone(),
            next: Arc::clone(&self.next),
        }
    }
}

/// Tags each request with the next upstream in turn.
#[derive(Debug, Clone)]
pub struct RoundRobin<S> {
    inner: S,
    upstreams: Upstreams,
    next: Arc<AtomicUsize>,
}

impl<S, B> Service<Request<B>> for RoundRobin<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let targets = &self.upstreams.targets;
        if !targets.is_empty() {
            let index = self.next.fetch_add(1, Ordering::Relaxed) % targets.len();
            let target: Target = targets[index].clone();
            req.extensions_mut().insert(target);
        }
        self.inner.call(req)
    }
}
