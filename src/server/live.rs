//! The request stack (`admission -> meter -> plan -> [budget ->] dispatch -> [handoff ->]
//! forward`; the budget phase only when a tenant has a limit, the handoff only when a pool has a
//! prefill pool) and the finish hooks
//! that new requests take, swapped whole by a config reload; and where each request's context
//! starts.
//!
//! Why the whole stack: a request is planned and dispatched by one router, metered against one
//! set of SLO targets and timeouts, and ended by the hooks of that same revision (the meter's
//! series, the router's calibration). Each request takes the current revision when its head
//! arrives (the clone hyper made per request before, plus one atomic load) and keeps it to its
//! end: streams in flight finish where they started, whatever a reload does meanwhile.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use http::Request;
use hyper::body::Incoming;
use tower::util::Oneshot;
use tower::{Service, ServiceExt};

use super::admission::{Admission, AdmissionLayer, Limits};
use super::head;
use super::smuggling::ConnectionFraming;
use crate::config::Config;
use crate::context::{FinishHook, FinishHooks};
use crate::meter::finish::MeterHook;
use crate::meter::layer::{Meter, MeterLayer};
use crate::meter::series::MeterSeries;
use crate::proxy::client::UpstreamClient;
use crate::proxy::phase::Then;
use crate::proxy::Forward;
use crate::route::{Dispatch, Handoff, Plan, Router};
use crate::tenant::budget::layer::Budget;
use crate::tenant::certificate::CertificateNames;
use crate::tenant::system::TenantSystem;
use crate::tenant::Gate;
use crate::trace::system::TraceSystem;
use crate::trace::Tracing;

/// The phases below the meter, each a [`Phase`](crate::proxy::phase::Phase) (the budget and the
/// handoff only when configured).
type Phases = Then<Plan, Then<Option<Budget>, Then<Dispatch, Then<Option<Handoff>, Forward>>>>;

/// One revision's tower stack.
pub(crate) type Stack = Admission<Meter<Phases>>;

/// One revision of the request stack: the layers, the hooks that end its requests, and its
/// tracing (`None`: off).
pub struct Revision {
    pub stack: Stack,
    pub hooks: FinishHooks,
    pub tracing: Option<Arc<Tracing>>,
    /// Who is calling (`None`: tenants off).
    pub tenants: Option<Arc<Gate>>,
}

/// What every revision is built from: the subsystems the server built once (a reload resizes
/// the limits in place; each subsystem keeps what its reload leaves meaningful).
pub struct Shared<'a> {
    pub meter: &'a Arc<MeterSeries>,
    pub limits: &'a Arc<Limits>,
    pub router: &'a Arc<Router>,
    pub trace: &'a TraceSystem,
    pub tenants: &'a TenantSystem,
}

/// Builds the revision of `config`; `extra` hooks (an embedder's, a test's) run after the
/// proxy's own: the meter's, the router's (the calibration, the handoffs, the latency models),
/// the trace's, then the tenants' (the settlement, the counters, the usage record).
pub fn build(
    config: &Config,
    shared: Shared<'_>,
    client: UpstreamClient,
    extra: &[Arc<dyn FinishHook>],
) -> Revision {
    let Shared {
        meter,
        limits,
        router,
        trace,
        tenants,
    } = shared;
    let trace = trace.revision(config);
    let tenants = tenants.revision(config);
    let below = Then::new(
        Plan::new(Arc::clone(router)),
        Then::new(
            tenants.budget,
            Then::new(
                Dispatch::new(Arc::clone(router)),
                Then::new(
                    router.hands_off().then(|| Handoff::new(Arc::clone(router))),
                    Forward::new(client, &config.upstream),
                ),
            ),
        ),
    );
    let stack = tower::ServiceBuilder::new()
        .layer(AdmissionLayer::new(Arc::clone(limits)))
        .layer(MeterLayer::new(config, Arc::clone(meter)))
        .service(below);
    let metered = Arc::new(MeterHook::new(Arc::clone(meter), config.slo.defaults()));
    let hooks = FinishHooks::new(
        [metered as Arc<dyn FinishHook>]
            .into_iter()
            .chain(router.hooks())
            .chain([trace.hook])
            .chain(tenants.hooks)
            .chain(extra.iter().cloned()),
    );
    Revision {
        stack,
        hooks,
        tracing: trace.tracing,
        tenants: tenants.gate,
    }
}

/// The current revision; cloned into every connection, swapped by reloads.
#[derive(Clone)]
pub(crate) struct LiveStack {
    current: Arc<ArcSwap<Revision>>,
}

impl LiveStack {
    pub fn new(revision: Revision) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(revision)),
        }
    }

    /// New requests take `revision` from now on.
    pub fn store(&self, revision: Revision) {
        self.current.store(Arc::new(revision));
    }

    /// The current revision, for requests answered outside the stack (refused at
    /// `server.max_connections`): their context starts as the stack's do (`server/head.rs`).
    pub fn current(&self) -> Arc<Revision> {
        self.current.load_full()
    }

    /// The stack as one connection serves it: each request's context starts there.
    /// `client_certificate`: the names of the client certificate its TLS handshake verified.
    pub(crate) fn for_connection(
        &self,
        peer: SocketAddr,
        client_tls: bool,
        client_certificate: Option<Arc<CertificateNames>>,
        framing: Arc<ConnectionFraming>,
    ) -> ConnectionStack {
        ConnectionStack {
            live: self.clone(),
            peer,
            client_tls,
            client_certificate,
            framing,
        }
    }
}

/// One client connection's service: it starts each request's context as hyper dispatches the
/// request (its head is in: this is `t0`), with the hooks of the revision the request takes.
#[derive(Clone)]
pub(crate) struct ConnectionStack {
    live: LiveStack,
    peer: SocketAddr,
    client_tls: bool,
    /// Read once, at the handshake; every request of the connection names its tenant by it.
    client_certificate: Option<Arc<CertificateNames>>,
    framing: Arc<ConnectionFraming>,
}

impl Service<Request<Incoming>> for ConnectionStack {
    type Response = <Stack as Service<Request<Incoming>>>::Response;
    type Error = Infallible;
    type Future = Oneshot<Stack, Request<Incoming>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the revision's own, polled by `oneshot` on the stack the request takes.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Incoming>) -> Self::Future {
        let revision = self.live.current.load();
        let parts = head::Parts {
            hooks: &revision.hooks,
            tenants: revision.tenants.as_deref(),
            tracing: revision.tracing.as_deref(),
        };
        let connection = head::Connection {
            peer: self.peer,
            tls: self.client_tls,
            certificate: self.client_certificate.as_deref(),
            conflicting_framing: self.framing.next_request_conflicts(),
        };
        head::start(parts, &mut req, connection).put(req.extensions_mut());
        revision.stack.clone().oneshot(req)
    }
}
