//! The budget phase: between the plan (which estimated the prompt) and the
//! dispatch, built only when some tenant has a limit. It admits each generation request against
//! its tenant's budget ([`Budgets::admit`]) or answers it 429 (503 when the store failed and the
//! policy denies) without reaching a backend.
use std::sync::Arc;

use http::Request;

use super::Budgets;
use crate::context::RequestContext;
use crate::proxy::phase::{Answer, Next, Phase};
use crate::proxy::{Failure, RequestBody};

/// The budget phase: admits each request against its tenant's budget, then passes it on.
#[derive(Debug, Clone)]
pub struct Budget {
    budgets: Arc<Budgets>,
}

impl Budget {
    pub fn new(budgets: Arc<Budgets>) -> Self {
        Self { budgets }
    }
}

impl Phase for Budget {
    async fn run<N: Next>(
        &self,
        mut context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> Answer {
        // The admission may wait for the store: boxed, so that a shared store's exchange is not
        // state every phase above holds inline.
        if let Err(refused) = Box::pin(self.budgets.admit(&mut context)).await {
            return Err(Failure::new(refused, context));
        }
        next.call(context, req).await
    }
}
