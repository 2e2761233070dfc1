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
use crate::tenant::budget::series::BudgetSeries;
use crate::tenant::budget::settle::BudgetHook;
use crate::tenant::budget::{Budgets, Store};
use crate::tenant::certificate::CertificateNames;
use crate::tenant::finish::TenantHook;
use crate::tenant::usage::{UsageHook, UsageLog};
use crate::tenant::{Gate, Tenants};
use crate::trace::export::Exporter;
use crate::trace::series::PhaseSeries;
use crate::trace::{TraceHook, Tracing};

/// The phases below the meter, each a [`Phase`](crate::proxy::phase::Phase) (the budget and the
/// handoff only when configured).
type Phases = Then<Plan, Then<Option<Budget>, Then<Dispatch, Then<Option<Handoff>, Forward>>>>;

/// One revision's tower stack.
pub type Stack = Admission<Meter<Phases>>;

/// One revision of the request stack: the layers, the hooks that end its requests, and its
/// tracing (`None`: off).
pub struct Revision {
    pub stack: Stack,
    pub hooks: FinishHooks,
    pub tracing: Option<Arc<Tracing>>,
    /// Who is calling (`None`: tenants off).
    pub tenants: Option<Arc<Gate>>,
}

/// What every revision shares: the server's own subsystems, built once (a reload resizes the
/// limits in place and keeps an exporter whose settings did not change).
pub struct Shared<'a> {
    pub meter: &'a Arc<MeterSeries>,
    pub phases: &'a Arc<PhaseSeries>,
    pub limits: &'a Arc<Limits>,
    /// The span exporter of `[tracing]`, when it names an endpoint.
    pub exporter: Option<&'a Arc<Exporter>>,
    /// The tenant labels, and this revision's identity sources (`None`: tenants off).
    pub tenants: (&'a Arc<Tenants>, Option<Arc<Gate>>),
    /// The usage records' log, when `tenants.usage.path` is set.
    pub usage: Option<&'a Arc<UsageLog>>,
    /// The budgets' store (for the process's life) and series.
    pub budgets: (&'a Arc<Store>, &'a Arc<BudgetSeries>),
}

/// Builds the revision of `config` over `router`; `extra` hooks (an embedder's, a test's) run
/// after the proxy's own (the meter's, the router's, the handoff's, the trace's).
pub fn build(
    config: &Config,
    shared: Shared<'_>,
    router: &Arc<Router>,
    client: UpstreamClient,
    extra: &[Arc<dyn FinishHook>],
) -> Revision {
    let Shared {
        meter,
        phases,
        limits,
        exporter,
        tenants: (tenants, gate),
        usage,
        budgets: (store, budget_series),
    } = shared;
    let budgets = Budgets::new(&config.tenants.budgets, store, budget_series).map(Arc::new);
    let below = Then::new(
        Plan::new(Arc::clone(router)),
        Then::new(
            budgets
                .as_ref()
                .map(|budgets| Budget::new(Arc::clone(budgets))),
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
    let slo = config.slo.defaults();
    let metered: Arc<dyn FinishHook> = Arc::new(MeterHook::new(Arc::clone(meter), slo));
    let calibration: Arc<dyn FinishHook> = router.calibrator().clone();
    let tracing =
        exporter.map(|exporter| Arc::new(Tracing::new(&config.tracing, Arc::clone(exporter))));
    let traced: Arc<dyn FinishHook> = Arc::new(TraceHook::new(Arc::clone(phases), tracing.clone()));
    let tenant_hook = gate.as_ref().map(|_| {
        Arc::new(TenantHook::new(
            Arc::clone(meter.metrics()),
            Arc::clone(tenants),
            slo,
        )) as Arc<dyn FinishHook>
    });
    let hooks = FinishHooks::new(
        [metered, calibration]
            .into_iter()
            .chain(router.handoff_hook())
            .chain(router.slo_hook())
            .chain([traced])
            // Every revision settles (a request admitted before a reload that removed its
            // limits still holds a reservation); before the tenant counters, so that a request
            // counted there is settled.
            .chain([
                Arc::new(BudgetHook::new(Arc::clone(store), budgets.clone()))
                    as Arc<dyn FinishHook>,
            ])
            .chain(tenant_hook)
            .chain(
                usage.map(|log| Arc::new(UsageHook::new(Arc::clone(log))) as Arc<dyn FinishHook>),
            )
            .chain(extra.iter().cloned()),
    );
    Revision {
        stack,
        hooks,
        tracing,
        tenants: gate,
    }
}

/// The current revision; cloned into every connection, swapped by reloads.
#[derive(Clone)]
pub struct LiveStack {
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
    pub fn for_connection(
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
pub struct ConnectionStack {
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
