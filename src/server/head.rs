//! Where each request's context starts: its head is in (this is `t0`), and the stack revision it
//! takes gives it its finish hooks, its tenant and its trace.
//!
//! Every request starts here, whether the stack serves it ([`super::live::ConnectionStack`]) or
//! it is refused at `server.max_connections` ([`super::connection::refuse`]): so a refused
//! request too is counted under its tenant, written in the usage records with it, and exported
//! as a span, and the two paths cannot drift apart.
use std::net::SocketAddr;

use http::Request;
use tokio::time::Instant;

use super::smuggling::ConflictingFraming;
use crate::context::{FinishHooks, RequestContext};
use crate::proxy::headers;
use crate::tenant::certificate::CertificateNames;
use crate::tenant::Gate;
use crate::trace::Tracing;

/// What the stack revision a request takes gives it as it starts (the revision's own fields: this
/// module stays below [`super::live`], which calls it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Parts<'a> {
    /// The hooks that end it.
    pub hooks: &'a FinishHooks,
    /// Who is calling (`None`: tenants off).
    pub tenants: Option<&'a Gate>,
    /// Its tracing (`None`: off).
    pub tracing: Option<&'a Tracing>,
}

/// The connection a request came on, as its context records it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Connection<'a> {
    pub peer: SocketAddr,
    /// The connection is TLS (`x-forwarded-proto: https` upstream).
    pub tls: bool,
    /// The names of the client certificate its TLS handshake verified.
    pub certificate: Option<&'a CertificateNames>,
    /// The smuggling guard's verdict on this request's framing ([`super::smuggling`]).
    pub conflicting_framing: bool,
}

/// The context of the request whose head is `req`, under the revision's `parts`, on
/// `connection`. Writes what the server's row of [`crate::context`]'s table says: the hooks, the
/// tenant (or why it is refused), the trace, the connection. Once the client's key has named the
/// tenant, `req` carries the backend's key instead (`tenants.upstream_key_file`).
pub(super) fn start<B>(
    parts: Parts<'_>,
    req: &mut Request<B>,
    connection: Connection<'_>,
) -> Box<RequestContext> {
    let received = Instant::now();
    let Parts {
        hooks,
        tenants,
        tracing,
    } = parts;
    let mut context = RequestContext::for_head(
        received,
        req.method(),
        req.uri(),
        req.headers(),
        hooks.clone(),
    );
    if let Some(gate) = tenants {
        match gate.identify(req.headers(), connection.certificate) {
            Ok(named) => context.tenant = Some(named),
            Err(unnamed) => context.refused = Some(Box::new(unnamed.into())),
        }
        // After the client's key named the tenant: from here on, and upstream, the request
        // carries the backend's key.
        if let Some(backend) = gate.identity().upstream_authorization() {
            headers::authorize_upstream(req.headers_mut(), backend);
        }
    }
    if let Some(tracing) = tracing {
        let state = tracing.begin(req.method(), req.uri(), req.headers());
        if state.sampled && context.trace.is_none() {
            // The exemplars of a request the proxy traces lead to its trace.
            context.trace = Some(state.trace);
        }
        context.tracing = Some(state);
    }
    let Connection {
        peer,
        tls,
        certificate: _,
        conflicting_framing,
    } = connection;
    context.client = Some(peer);
    context.client_tls = tls;
    if conflicting_framing {
        // Before any tenant's refusal: the request is not read at all.
        context.refused = Some(Box::new(ConflictingFraming.into()));
    }
    context
}
