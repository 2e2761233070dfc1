//! What a tenant's budget holds for a request while it runs ([`crate::tenant::budget`]): written
//! when the request is admitted against its budget, read once at the finish point, where the
//! reservation is settled with the exact usage.
//!
//! Shared vocabulary: the tenant layer writes it, the finish hook of the same layer reads it, and
//! the context carries it between them.
use std::sync::Arc;

use crate::config::Counts;

/// A request's hold on its tenant's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetHold {
    /// The tenant whose budget it is (its name, or `anonymous`).
    pub tenant: Arc<str>,
    /// Which tokens the tenant's token limits count (the settlement counts the same).
    pub counts: Counts,
    /// Tokens reserved at admission (the prompt estimate and/or the output limit, as `counts`
    /// says).
    pub reserved: u64,
    /// The store admitted it (its reservation and its stream slot are there). `false`: the store
    /// did not answer and the request was let through (`on_store_error = "allow"`): its whole
    /// usage is settled, unless the store turns out to hold its reservation after all.
    pub in_store: bool,
    /// The minute (Unix milliseconds / 60 000) the tokens were charged to.
    pub minute: u64,
    /// The UTC day (Unix milliseconds / 86 400 000) the tokens were charged to.
    pub day: u64,
    /// The request's id in the store's slot set (unique across replicas).
    pub id: u64,
}
