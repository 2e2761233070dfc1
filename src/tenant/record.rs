//! Whose request it is ([`TenantRecord`], `context.tenant`): written at the request head when the
//! tenant gate named the tenant, read by every layer that labels or charges by tenant (the meter's
//! tracked histograms, the budget, the gateway queue's shares, the usage record, the span).
//!
//! A record, not a layer: it names only the shared vocabulary, so the context can hold it and
//! every layer can read it (`tests/e2e/module_graph.rs`).
use std::sync::Arc;

/// A request's tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRecord {
    /// The bounded label value (`anonymous`, `other`, or the name).
    pub label: Arc<str>,
    /// The name itself (cut at 256 bytes); `None` for an anonymous request.
    pub name: Option<Arc<str>>,
    /// The tenant is tracked (`tenants.tracked`): its latencies get histograms of their own.
    pub tracked: bool,
}
