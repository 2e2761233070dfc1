//! The request stack below the meter, as one generic layer over a small trait.
//!
//! Each phase of the stack (plan, budget, dispatch, handoff, forward) works on a request's
//! [`RequestContext`] and then calls the rest of the stack: once, again for a retry, or not at
//! all when it refuses. As tower services each phase needed its own layer, service and boxed
//! future (up to seven boxes per request), and each took the context out of the request's
//! extensions and put it back (an allocation every time). Here a phase is one method, the context
//! goes down as an argument, and the stack is one value of nested [`Then`]s whose futures nest
//! without a box: the meter boxes the whole request's future once.
//!
//! The context comes back up with the answer: in the response's extensions (where
//! [`super::Forward`] puts it) or in the [`Failure`].
use std::future::Future;

use http::{Request, Response};

use super::{Failure, RequestBody, UpstreamBody};
use crate::context::{Refusal, RequestContext};

/// What the rest of the stack answers: the upstream's response (its context in its extensions),
/// or the failure with the context.
pub type Answer = Result<Response<UpstreamBody>, Failure>;

/// The rest of the stack below a phase.
pub trait Next: Send + Sync + 'static {
    /// Sends `req`, whose context is `context`, on down the stack.
    fn call(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
    ) -> impl Future<Output = Answer> + Send;
}

/// One phase of the stack: it runs on the request's context and calls `next` (or answers without
/// it: a refusal is a [`Failure`] carrying the context back up).
pub trait Phase: Send + Sync + 'static {
    fn run<N: Next>(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> impl Future<Output = Answer> + Send;
}

/// `phase`, then the rest of the stack.
#[derive(Debug, Clone)]
pub struct Then<P, N> {
    phase: P,
    next: N,
}

impl<P, N> Then<P, N> {
    pub fn new(phase: P, next: N) -> Self {
        Self { phase, next }
    }
}

impl<P: Phase, N: Next> Next for Then<P, N> {
    fn call(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
    ) -> impl Future<Output = Answer> + Send {
        self.phase.run(context, req, &self.next)
    }
}

/// A phase a configuration may leave out (the budget without limits, the handoff without a
/// prefill pool): without it, the request goes straight on.
impl<P: Phase> Phase for Option<P> {
    async fn run<N: Next>(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> Answer {
        match self {
            Some(phase) => phase.run(context, req, next).await,
            None => next.call(context, req).await,
        }
    }
}

/// A phase that works only before the request moves on (the plan, the budget): it reads and
/// writes the context, or refuses; the rest of the stack runs after it. Every such phase is a
/// [`Phase`] by the one impl below, so none repeats the hand-over.
pub trait Check: Send + Sync + 'static {
    fn check(
        &self,
        context: &mut RequestContext,
        req: &Request<RequestBody>,
    ) -> impl Future<Output = Result<(), Refusal>> + Send;
}

impl<C: Check> Phase for C {
    async fn run<N: Next>(
        &self,
        mut context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> Answer {
        if let Err(refused) = self.check(&mut context, &req).await {
            return Err(Failure::new(refused.into(), context));
        }
        next.call(context, req).await
    }
}
