//! Settling each admitted request at the finish point: the exact usage replaces the
//! reservation, and the stream's slot is freed. Whatever ended the request (a finished stream, a
//! cancelled one, a failure below the budget phase) ends here, exactly once. Once charged, the
//! tenant's tokens of the day are reported in its `tokens_per_day` used-ratio gauge.
use std::sync::Arc;

use super::{settle_with, Budgets, Store};
use crate::context::finish::{FinishHook, Finished};

/// Settles the budget holds of finished requests in the process's store.
#[derive(Debug)]
pub(crate) struct BudgetHook {
    store: Arc<Store>,
    /// This revision's budgets (`None`: no tenant has a limit in it), for the day's limit that
    /// the settlement's report is a share of.
    budgets: Option<Arc<Budgets>>,
}

impl BudgetHook {
    pub fn new(store: Arc<Store>, budgets: Option<Arc<Budgets>>) -> Self {
        Self { store, budgets }
    }
}

impl FinishHook for BudgetHook {
    fn finished(&self, done: &Finished<'_>) {
        let Some(hold) = &done.context.budget else {
            return;
        };
        // The same label the admission reported under.
        let report = self.budgets.as_ref().and_then(|budgets| {
            let label = done.context.tenant.as_ref().map_or_else(
                || Arc::clone(&hold.tenant),
                |tenant| Arc::clone(&tenant.label),
            );
            budgets.day_report(hold, label)
        });
        // As the tenant counters count them (a request no backend answered used nothing).
        let (input, output) = done.counted_tokens();
        settle_with(
            &self.store,
            hold,
            input.unwrap_or(0),
            output.unwrap_or(0),
            report,
        );
    }
}
