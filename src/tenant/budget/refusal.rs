//! The budget's refusals, and how they read in the vocabulary below the subsystems
//! ([`Refusal`]): over a limit is the client's 429, with `retry-after` when waiting can help; a
//! store that did not answer under `on_store_error = "deny"` is tokenmeter's own 503.
use std::time::Duration;

use http::StatusCode;

use crate::context::{Refusal, RefusedBy};

/// Why the budget turned a request away.
#[derive(Debug, thiserror::Error)]
pub enum BudgetRefusal {
    /// The tenant is over one of its limits.
    #[error("{message}")]
    Over {
        /// The limit's name (`tokens_per_minute`, ...).
        limit: &'static str,
        message: String,
        /// `None` when waiting cannot help (the request is larger than the limit itself).
        retry_after: Option<Duration>,
    },
    /// The store did not answer and `tenants.budgets.on_store_error = "deny"`.
    #[error("the tenant budget store did not answer in time; the request was refused unchecked (tenants.budgets.on_store_error = \"deny\")")]
    StoreUnavailable,
}

/// How long a client refused for want of the store waits before it tries again.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

impl From<BudgetRefusal> for Refusal {
    fn from(refused: BudgetRefusal) -> Self {
        let message = refused.to_string();
        match refused {
            BudgetRefusal::Over { retry_after, .. } => Refusal {
                retry_after,
                ..Refusal::new(
                    RefusedBy::Budget,
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_exceeded",
                    message,
                )
            },
            BudgetRefusal::StoreUnavailable => Refusal::new(
                RefusedBy::Store,
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                message,
            )
            .retry_after(STORE_RETRY_AFTER),
        }
    }
}
