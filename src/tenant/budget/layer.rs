//! The budget phase: between the plan (which estimated the prompt) and the
//! dispatch, built only when some tenant has a limit. It admits each generation request against
//! its tenant's budget ([`Budgets::admit`]) or answers it 429 (503 when the store failed and the
//! policy denies) without reaching a backend.
use std::sync::Arc;

use http::Request;

use super::Budgets;
use crate::context::{Refusal, RequestContext};
use crate::proxy::phase::Check;
use crate::proxy::RequestBody;

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

impl Check for Budget {
    async fn check(
        &self,
        context: &mut RequestContext,
        _req: &Request<RequestBody>,
    ) -> Result<(), Refusal> {
        // The admission may wait for the store: boxed, so that a shared store's exchange is not
        // state every phase above holds inline.
        Ok(Box::pin(self.budgets.admit(context)).await?)
    }
}
