//! What one sync read of the other replicas, gathered: their load per backend, the prompts they
//! offered each designating pool since the last sync, whose designation each pool follows, and
//! what their models learned of each backend's prefill.
//!
//! **Demand.** Each replica publishes the prompts it offered since it started; the reader keeps
//! the last counts it saw of each (replica, pool) and adds what moved, so every replica's
//! designation measures the fleet's demand however its syncs and the others' interleave. A
//! replica seen for the first time adds nothing (its past is not this second's demand), nor
//! does one whose counts went back past what moved (it restarted: [`Counts::since`]).
//!
//! **Leader.** Each designating pool follows the designation of the live replica with the least
//! name that publishes one for it (`heavy` lines): one replica designates from the fleet's
//! demand, the others take its choice within an interval. Designating apart, four gateways that
//! each saw a quarter of the documents chose different replicas (docs/deploying.md): each put
//! documents on one and chats on the others, so every replica stalled chats. When the leader
//! stops publishing, its entry expires and the next name leads, starting from the designation it
//! followed.
//!
//! **Age.** Each entry comes with its age on the store's clock (the sync script stamps every
//! write and measures every read there, so clocks that differ agree): a stall mark is what was
//! left of it at the write, less the age. The queues are not aged: drained from the write at
//! the learned prefill rate (rather than from the read), the others' queues read shorter, and
//! `slo` placement through four gateways met 90.5-93.7 % of its SLOs at 24 requests/s in four
//! runs, against 95.0 and 95.4 % with them taken as of the read (one gateway: 94.6-95.8 %;
//! docs/deploying.md): a queue of many streams' prefills drains slower than one prompt alone
//! does, and the fuller figure is the one that keeps the gateways from herding.
use std::collections::HashMap;
use std::time::Duration;

use super::payload::{self, Figures, Line, Stamp};
use crate::route::handoff::slots::PartitionId;
use crate::route::placement::designate::Counts;

/// What the last sync read of each replica's counts, to add what moved since.
#[derive(Debug, Default)]
pub struct Seen {
    /// The demand counts of each (replica, pool).
    demand: HashMap<(String, String), Counts>,
    /// The work let through of each (replica, pool, tenant).
    admitted: HashMap<(String, String, String), u64>,
}

impl Seen {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets everything read (the store unanswered: the next read starts afresh).
    pub fn clear(&mut self) {
        self.demand.clear();
        self.admitted.clear();
    }
}

/// Another replica's entry as the store returned it.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub name: &'a str,
    /// How long ago it wrote it, on the store's clock (zero where the store did not say).
    pub age: Duration,
    pub payload: &'a str,
}

/// One replica's load on one backend as its payload said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted<'a> {
    pub replica: &'a str,
    pub pool: &'a str,
    pub backend: &'a str,
    /// Its stall mark run down by the payload's age.
    pub figures: Figures,
}

/// One sync's reading of the other replicas.
#[derive(Debug, Default)]
pub struct View<'a> {
    /// Their load, replica by replica and backend by backend (summed by [`super::board`]).
    pub loads: Vec<Posted<'a>>,
    /// Which of its writings each one's payload is, where it says.
    pub stamps: HashMap<&'a str, Stamp>,
    /// The prompts they offered each pool since the last sync.
    pub offered: HashMap<&'a str, Counts>,
    /// Per pool, the leader's name and its prefill-heavy backends, where one of the others
    /// leads: its name is less than `me`'s.
    pub leaders: HashMap<&'a str, (&'a str, Vec<&'a str>)>,
    /// Their models' prefill cost per (pool, backend label): each cost times its precision,
    /// summed, and the precisions' sum.
    pub prefill: HashMap<(&'a str, &'a str), (f64, f64)>,
    /// Every one of them, with the partition of llama.cpp slots it reserves by (`None`: none
    /// published).
    pub gateways: Vec<(&'a str, Option<PartitionId>)>,
    /// The llama.cpp slots they hold: (server, slot), one pair a slot.
    pub held: Vec<(&'a str, usize)>,
    /// Per gated pool, their work in flight per tenant, summed.
    pub in_flight: HashMap<&'a str, HashMap<&'a str, u64>>,
    /// Per gated pool, the work they let through per tenant since the last sync, summed.
    pub served: HashMap<&'a str, HashMap<&'a str, u64>>,
}

impl<'a> View<'a> {
    /// Reads the `others`' entries for replica `me`, adding to `offered` what moved since
    /// `seen`, which is left holding what was read this time (so a replica gone is forgotten).
    pub fn read(me: &str, others: &[Entry<'a>], seen: &mut Seen) -> Self {
        let mut view = View::default();
        let mut now = Seen::default();
        for &Entry {
            name: replica,
            age,
            payload: text,
        } in others
        {
            view.gateways.push((replica, None));
            for line in payload::read(text) {
                match line {
                    Line::Load {
                        pool,
                        backend,
                        figures,
                    } => view.loads.push(Posted {
                        replica,
                        pool,
                        backend,
                        figures: Figures {
                            stall: figures.stall.saturating_sub(age),
                            ..figures
                        },
                    }),
                    Line::Stamp(stamp) => {
                        view.stamps.insert(replica, stamp);
                    }
                    Line::Demand { pool, counts } => {
                        let key = (replica.to_owned(), pool.to_owned());
                        if let Some(&last) = seen.demand.get(&key) {
                            let offered = view.offered.entry(pool).or_default();
                            *offered = offered.plus(counts.since(last));
                        }
                        now.demand.insert(key, counts);
                    }
                    Line::Tenant {
                        pool,
                        tenant,
                        in_flight,
                        admitted,
                    } => {
                        let held = view.in_flight.entry(pool).or_default();
                        let held = held.entry(tenant).or_default();
                        *held = held.saturating_add(in_flight);
                        let key = (replica.to_owned(), pool.to_owned(), tenant.to_owned());
                        // Seen the first time, or counted back (the replica restarted): its
                        // past is not this interval's service.
                        let moved = seen
                            .admitted
                            .get(&key)
                            .map_or(0, |&last| admitted.saturating_sub(last));
                        if moved > 0 {
                            let served = view.served.entry(pool).or_default();
                            let served = served.entry(tenant).or_default();
                            *served = served.saturating_add(moved);
                        }
                        now.admitted.insert(key, admitted);
                    }
                    Line::Prefill {
                        pool,
                        backend,
                        cost,
                        precision,
                    } => {
                        let sum = view.prefill.entry((pool, backend)).or_default();
                        sum.0 += cost * precision;
                        sum.1 += precision;
                    }
                    Line::Partition(id) => {
                        if let Some(gateway) = view.gateways.last_mut() {
                            gateway.1 = Some(id);
                        }
                    }
                    Line::Held { backend, slots } => {
                        view.held
                            .extend(slots.into_iter().map(|slot| (backend, slot)));
                    }
                    Line::Heavy { pool, backends } => {
                        let leads = replica < me
                            && view
                                .leaders
                                .get(pool)
                                .map_or(true, |&(leader, _)| replica < leader);
                        if leads {
                            view.leaders.insert(pool, (replica, backends));
                        }
                    }
                }
            }
        }
        *seen = now;
        view
    }
}

#[cfg(test)]
mod tests;
