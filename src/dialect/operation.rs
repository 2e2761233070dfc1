//! What kind of request a stream answers, in the OpenTelemetry GenAI vocabulary: the
//! `gen_ai_operation_name` and `gen_ai_provider_name` labels of every per-request series.
//!
//! One spelling for "none of the known values", `_OTHER` (`OTHER`, defined in `mod.rs` with the
//! values of the known APIs): the operation and provider of a POST to an unknown endpoint and of
//! a path that is not a generation ([`Operation::PASSTHROUGH`]) alike.
use super::{Dialect, OTHER};

/// `gen_ai_operation_name` and `gen_ai_provider_name`, from the request's [`Dialect`]
/// (OpenTelemetry GenAI values), or [`Operation::PASSTHROUGH`] for paths that are proxied and
/// counted but are not generation endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operation {
    name: &'static str,
    provider: &'static str,
}

impl Operation {
    /// Not a generation endpoint (`GET /v1/models`, embeddings, ...): proxied and counted only,
    /// under the same `_OTHER` as an unknown API.
    pub const PASSTHROUGH: Operation = Operation {
        name: OTHER,
        provider: OTHER,
    };

    pub fn of(dialect: Dialect) -> Self {
        Operation {
            name: dialect.operation(),
            provider: dialect.provider(),
        }
    }

    /// The operation of a request of `dialect` (`None`: not a generation request).
    pub fn of_request(dialect: Option<Dialect>) -> Self {
        dialect.map_or(Operation::PASSTHROUGH, Operation::of)
    }

    pub fn as_str(self) -> &'static str {
        self.name
    }

    pub fn provider(self) -> &'static str {
        self.provider
    }
}
