//! The request stack (`admission -> meter -> route -> forward`) that new requests take, swapped
//! whole by a config reload.
//!
//! Why the whole stack: a request is planned by the meter's router and dispatched by the route
//! layer's; both must be the same generation, and so must the timeouts and SLO targets it is
//! metered against. Each request clones the current stack when it starts (the clone hyper made
//! per request before, plus one atomic load) and keeps it to its end: streams in flight finish
//! where they started, whatever a reload does meanwhile.
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use http::Request;
use hyper::body::Incoming;
use tower::util::Oneshot;
use tower::{Service, ServiceExt};

use super::admission::{Admission, AdmissionLayer, Limits};
use crate::config::Config;
use crate::meter::layer::{Meter, MeterLayer};
use crate::metrics::Metrics;
use crate::proxy::client::UpstreamClient;
use crate::proxy::Forward;
use crate::route::{Route, RouteLayer, Router};

/// One generation of the request stack.
pub type Stack = Admission<Meter<Route<Forward>>>;

/// Builds the stack of `config` over `router`. The limits and metrics are the server's own, shared
/// by every generation (a reload resizes the limits in place).
pub fn build(
    config: &Config,
    metrics: &Arc<Metrics>,
    router: &Arc<Router>,
    limits: &Arc<Limits>,
    client: UpstreamClient,
) -> Stack {
    tower::ServiceBuilder::new()
        .layer(AdmissionLayer::new(Arc::clone(limits)))
        .layer(MeterLayer::new(
            config,
            Arc::clone(metrics),
            Arc::clone(router),
        ))
        .layer(RouteLayer::new(Arc::clone(router)))
        .service(Forward::new(client, &config.upstream))
}

/// The current stack; cloned into every connection, swapped by reloads.
#[derive(Clone)]
pub struct LiveStack {
    current: Arc<ArcSwap<Stack>>,
}

impl LiveStack {
    pub fn new(stack: Stack) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(stack)),
        }
    }

    /// New requests take `stack` from now on.
    pub fn store(&self, stack: Stack) {
        self.current.store(Arc::new(stack));
    }
}

impl Service<Request<Incoming>> for LiveStack {
    type Response = <Stack as Service<Request<Incoming>>>::Response;
    type Error = Infallible;
    type Future = Oneshot<Stack, Request<Incoming>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the generation's own, polled by `oneshot` on the stack the request takes.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let stack: Stack = (**self.current.load()).clone();
        stack.oneshot(req)
    }
}
