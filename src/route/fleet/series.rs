//! The fleet sync's series, and the names of the series the sync task sets.
use metrics::{Counter, Gauge, Label};

use crate::metrics::Metrics;

/// Rounds of the sync, by outcome.
pub(crate) const FLEET_SYNCS: &str = "tokenmeter_fleet_syncs_total";
/// 1 while this replica designates a pool's prefill-heavy replicas for the fleet, 0 while it
/// follows another's designation.
pub(crate) const FLEET_DESIGNATES: &str = "tokenmeter_fleet_designates";
/// Other replicas in the last view read.
pub(crate) const FLEET_REPLICAS: &str = "tokenmeter_fleet_replicas";
/// 1 while the replica routes on its own view (the store has not answered for two intervals).
pub(crate) const FLEET_OWN_VIEW: &str = "tokenmeter_fleet_own_view";
/// The other replicas' streams on a backend, as the last sync read them.
pub(crate) const BACKEND_FLEET_STREAMS: &str = "tokenmeter_backend_fleet_streams";
/// The slots of a llama.cpp server this replica may reserve (its share of the fleet's).
pub(crate) const FLEET_SLOTS_OWNED: &str = "tokenmeter_fleet_slots_owned";

/// The sync's series.
pub(super) struct Series {
    pub ok: Counter,
    pub error: Counter,
    pub timeout: Counter,
    pub replicas: Gauge,
    pub own_view: Gauge,
}

impl Series {
    pub fn new(metrics: &Metrics) -> Self {
        metrics.describe_counter(
            FLEET_SYNCS,
            "Rounds of the fleet's load sync by outcome: ok, error (the store refused or was unreachable), timeout (no answer within [fleet] interval).",
        );
        metrics.describe_gauge(
            FLEET_REPLICAS,
            "Other gateway replicas of the fleet whose load the last sync read.",
        );
        metrics.describe_gauge(
            BACKEND_FLEET_STREAMS,
            "Streams in flight on the backend from the fleet's other gateway replicas, as the last sync read them ([fleet]).",
        );
        metrics.describe_gauge(
            FLEET_DESIGNATES,
            "1 while this replica designates the pool's prefill-heavy replicas for its fleet (the live replica with the least name), 0 while it follows that replica's designation.",
        );
        metrics.describe_gauge(
            FLEET_SLOTS_OWNED,
            "Slots of the llama.cpp server this replica may reserve: its share of the fleet's split of the server's slots ([fleet], a llamacpp handoff pool).",
        );
        metrics.describe_gauge(
            FLEET_OWN_VIEW,
            "1 while this replica routes on its own load only: the fleet's store has not answered for two intervals.",
        );
        let outcome = |outcome: &'static str| {
            metrics.counter(FLEET_SYNCS, vec![Label::new("outcome", outcome)])
        };
        Self {
            ok: outcome("ok"),
            error: outcome("error"),
            timeout: outcome("timeout"),
            replicas: metrics.gauge(FLEET_REPLICAS, Vec::new()),
            own_view: metrics.gauge(FLEET_OWN_VIEW, Vec::new()),
        }
    }
}
