//! The budget phase: a tower service between the plan (which estimated the prompt) and the
//! dispatch, built only when some tenant has a limit. It admits each generation request against
//! its tenant's budget ([`Budgets::admit`]) or answers it 429 (503 when the store failed and the
//! policy denies) without reaching a backend.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service, ServiceExt};

use super::Budgets;
use crate::context::RequestContext;
use crate::proxy::{Failure, RequestBody, UpstreamBody};

/// Configures [`Budget`].
#[derive(Debug, Clone)]
pub struct BudgetLayer {
    budgets: Arc<Budgets>,
}

impl BudgetLayer {
    pub fn new(budgets: Arc<Budgets>) -> Self {
        Self { budgets }
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budget<S>;

    fn layer(&self, inner: S) -> Budget<S> {
        Budget {
            inner,
            budgets: Arc::clone(&self.budgets),
        }
    }
}

/// Admits each request against its tenant's budget, then passes it on.
#[derive(Debug, Clone)]
pub struct Budget<S> {
    inner: S,
    budgets: Arc<Budgets>,
}

impl<S> Service<Request<RequestBody>> for Budget<S>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = Failure>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<UpstreamBody>;
    type Error = Failure;
    // One allocation per request: the admission may wait for the store.
    type Future = Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, Failure>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Failure>> {
        // The inner service's readiness is awaited per request inside the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<RequestBody>) -> Self::Future {
        let mut inner = self.inner.clone();
        let budgets = Arc::clone(&self.budgets);
        Box::pin(async move {
            let Some(mut context) = RequestContext::take(req.extensions_mut(), "budget") else {
                return Err(Failure::lost());
            };
            if let Err(refused) = budgets.admit(&mut context).await {
                return Err(Failure::new(refused, context));
            }
            context.put(req.extensions_mut());
            inner.ready().await?.call(req).await
        })
    }
}
