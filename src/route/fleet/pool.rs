//! A pool as its fleet shares it, and what a replica publishes of it.
use std::sync::Arc;

use tokio::time::Instant;

use super::payload::{Figures, Payload};
use crate::route::backend::Backend;
use crate::route::members::Members;
use crate::route::placement::designate::Designation;
use crate::route::placement::gate::Gate;
use crate::route::placement::PoolSlo;

/// A pool as its fleet shares it: its members (their backends now: DNS may change them between
/// rounds), its placement, whose designation the fleet leads or follows, and its gateway queue,
/// whose tenants' shares are the fleet's.
#[derive(Debug, Clone)]
pub struct SharedPool {
    pub members: Arc<Members>,
    pub slo: Option<Arc<PoolSlo>>,
    pub gate: Option<Arc<Gate>>,
}

impl SharedPool {
    pub(super) fn designation(&self) -> Option<(&PoolSlo, &Designation)> {
        let slo = self.slo.as_deref()?;
        Some((slo, slo.designation()?))
    }

    /// Writes this replica's load on the pool's backends and, where it designates, the prompts
    /// it offered and the prefill-heavy backends it sees.
    pub(super) fn publish(&self, payload: &mut Payload, now: Instant) {
        let backends = self.members.backends();
        for backend in backends.iter() {
            let figures = own_figures(backend, now);
            payload.load(&backend.pool, &backend.target.label, figures);
        }
        if let Some((_, designation)) = self.designation() {
            let name = &self.members.name;
            payload.demand(name, designation.own_counts());
            let heavy = backends.iter().filter(|b| b.role().prefill_heavy());
            payload.heavy(name, heavy.map(|b| &*b.target.label));
            for backend in backends.iter() {
                if let Some((cost, precision)) = backend.own_prefill_cost() {
                    payload.prefill(name, &backend.target.label, cost, precision);
                }
            }
        }
        if let Some(gate) = &self.gate {
            for work in gate.tenants(now) {
                let name = &self.members.name;
                payload.tenant(name, &work.tenant, work.in_flight, work.admitted);
            }
        }
    }
}

/// This replica's load on `backend` at `now`, as it tells its fleet.
pub(super) fn own_figures(backend: &Backend, now: Instant) -> Figures {
    let load = backend.own_load(now);
    Figures {
        streams: load.streams,
        queued_tokens: load.queued_tokens,
        stall: backend.own_stall_left(now),
    }
}
