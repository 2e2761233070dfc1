//! Settling each admitted request at the finish point: the exact usage replaces the
//! reservation, and the stream's slot is freed. Whatever ended the request (a finished stream, a
//! cancelled one, a failure below the budget phase) ends here, exactly once.
use std::sync::Arc;

use super::{settle_with, Store};
use crate::context::finish::{FinishHook, Finished};

/// Settles the budget holds of finished requests in the process's store.
#[derive(Debug)]
pub struct BudgetHook {
    store: Arc<Store>,
}

impl BudgetHook {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store }
    }
}

impl FinishHook for BudgetHook {
    fn finished(&self, done: &Finished<'_>) {
        let Some(hold) = &done.context.budget else {
            return;
        };
        // As the tenant counters count them (a request no backend answered used nothing).
        let (input, output) = done.counted_tokens();
        settle_with(&self.store, hold, input.unwrap_or(0), output.unwrap_or(0));
    }
}
