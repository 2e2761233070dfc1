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

use super::payload::{self, Figures, Line};
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

/// Adds one replica's `figures`, written `age` ago, to the others' on a backend: its stall mark
/// run down by its age.
fn add_aged(sum: &mut Figures, figures: Figures, age: Duration) {
    sum.add(Figures {
        stall: figures.stall.saturating_sub(age),
        ..figures
    });
}

/// One sync's reading of the other replicas.
#[derive(Debug, Default)]
pub struct View<'a> {
    /// Their load per (pool, backend label), summed.
    pub loads: HashMap<(&'a str, &'a str), Figures>,
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
                    } => add_aged(view.loads.entry((pool, backend)).or_default(), figures, age),
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
mod tests {
    use super::*;

    /// Entries written just now.
    fn fresh<'a>(entries: &[(&'a str, &'a str)]) -> Vec<Entry<'a>> {
        entries
            .iter()
            .map(|&(name, payload)| Entry {
                name,
                age: Duration::ZERO,
                payload,
            })
            .collect()
    }

    fn counts(tokens: u64, prompts: u64, chats: u64) -> Counts {
        Counts {
            tokens,
            prompts,
            chat_tokens: chats * 100,
            chats,
            chat_misses: 0,
        }
    }

    #[test]
    fn adds_what_each_replica_offered_since_it_was_last_read() {
        let mut seen = Seen::new();
        let first = [
            ("b", "demand\tp\t8000\t1\t1000\t10\t0\n"),
            ("c", "demand\tp\t0\t0\t500\t5\t0\n"),
        ];
        let view = View::read("a", &fresh(&first), &mut seen);
        assert!(
            view.offered.is_empty(),
            "a replica seen the first time adds nothing"
        );
        let second = [
            ("b", "demand\tp\t24000\t3\t1500\t15\t0\n"),
            ("c", "demand\tp\t0\t0\t500\t5\t0\n"),
        ];
        let view = View::read("a", &fresh(&second), &mut seen);
        assert_eq!(view.offered["p"], counts(16_000, 2, 5));
        let restarted = [("b", "demand\tp\t8000\t1\t100\t1\t0\n")];
        let view = View::read("a", &fresh(&restarted), &mut seen);
        assert_eq!(
            view.offered["p"],
            counts(8_000, 1, 1),
            "counts that went back: the replica restarted, all it has is new"
        );
        assert_eq!(seen.demand.len(), 1, "c, not read this time, is forgotten");
    }

    #[test]
    fn sums_the_others_load_per_backend() {
        let others = [
            (
                "b",
                "load\tchat\tb1\t3\t1200\t300\nload\tchat\tb2\t1\t0\t0\n",
            ),
            ("c", "load\tchat\tb1\t2\t800\t900\ngarbage\n"),
        ];
        let view = View::read("a", &fresh(&others), &mut Seen::new());
        assert_eq!(view.loads.len(), 2);
        let b1 = view.loads[&("chat", "b1")];
        assert_eq!((b1.streams, b1.queued_tokens), (5, 2000));
        assert_eq!(
            b1.stall.as_millis(),
            900,
            "streams and queues add, the longer stall holds"
        );
        assert_eq!(view.loads[&("chat", "b2")].streams, 1);
        let learned = [
            ("b", "prefill\tchat\tb1\t50000\t300\n"),
            ("c", "prefill\tchat\tb1\t100000\t100.5\n"),
        ];
        let view = View::read("a", &fresh(&learned), &mut Seen::new());
        let (weighted, precision) = view.prefill[&("chat", "b1")];
        assert_eq!(precision, 400.5);
        assert!(
            (weighted / precision - (0.05 * 300.0 + 0.1 * 100.5) / 400.5).abs() < 1e-12,
            "the cost per thousand tokens, weighted by the precisions: {weighted}"
        );
    }

    #[test]
    fn the_least_name_with_a_designation_leads_each_pool() {
        let mut seen = Seen::new();
        let others = [
            ("gw-2", "heavy\tp\t10.0.0.1:8000\nheavy\tq\n"),
            ("gw-0", "heavy\tp\t10.0.0.2:8000\t10.0.0.3:8000\n"),
            ("gw-3", "heavy\tq\t10.0.0.9:8000\n"),
        ];
        let view = View::read("gw-1", &fresh(&others), &mut seen);
        assert_eq!(
            view.leaders["p"],
            ("gw-0", vec!["10.0.0.2:8000", "10.0.0.3:8000"])
        );
        assert!(
            !view.leaders.contains_key("q"),
            "gw-1 is less than gw-3: it leads q itself"
        );
        let view = View::read("gw-3", &fresh(&others), &mut seen);
        assert_eq!(
            view.leaders["q"],
            ("gw-2", vec![]),
            "a leader that designates none is followed too"
        );
    }

    #[test]
    fn lists_every_gateway_with_its_slot_partition_and_the_slots_they_hold() {
        let others = [
            ("b", "slots\t00000000000000ab\nheld\ts1\t1\t3\n"),
            ("c", "load\tchat\tb1\t1\t0\t0\nheld\ts1\t5\nheld\ts2\t0\n"),
        ];
        let view = View::read("a", &fresh(&others), &mut Seen::new());
        assert_eq!(
            view.gateways,
            [("b", Some(PartitionId(0xab))), ("c", None)],
            "c publishes no partition (an earlier version, or one that has not read the fleet)"
        );
        assert_eq!(view.held, [("s1", 1), ("s1", 3), ("s1", 5), ("s2", 0)]);
    }

    #[test]
    fn sums_the_tenants_work_in_flight_and_what_each_replica_let_through_since() {
        let mut seen = Seen::new();
        let first = [
            (
                "b",
                "tenant\tp\tflood\t3000\t50000\ntenant\tp\tquiet\t300\t900\n",
            ),
            ("c", "tenant\tp\tflood\t1000\t20000\n"),
        ];
        let view = View::read("a", &fresh(&first), &mut seen);
        assert_eq!(view.in_flight["p"]["flood"], 4000);
        assert_eq!(view.in_flight["p"]["quiet"], 300);
        assert!(
            view.served.is_empty(),
            "first seen: their past is not served now"
        );
        let second = [
            (
                "b",
                "tenant\tp\tflood\t2000\t56000\ntenant\tp\tquiet\t0\t900\n",
            ),
            ("c", "tenant\tp\tflood\t1000\t21000\n"),
        ];
        let view = View::read("a", &fresh(&second), &mut seen);
        assert_eq!(
            view.served["p"]["flood"], 7000,
            "6 000 through b, 1 000 through c"
        );
        assert!(!view.served["p"].contains_key("quiet"), "nothing moved");
        assert_eq!(view.in_flight["p"]["flood"], 3000);
        let restarted = [("b", "tenant\tp\tflood\t0\t100\n")];
        let view = View::read("a", &fresh(&restarted), &mut seen);
        assert!(view.served.is_empty(), "counted back: restarted");
    }

    #[test]
    fn a_write_is_read_as_of_its_age_on_the_stores_clock() {
        let at = |name, ms, payload| Entry {
            name,
            age: Duration::from_millis(ms),
            payload,
        };
        let others = [
            at("b", 200, "load\tchat\tb1\t1\t8000\t700\n"),
            at("c", 50, "load\tchat\tb1\t1\t8000\t100\n"),
            at(
                "d",
                10,
                "load\tchat\tb1\t2\t0\t0\nload\tchat\tb2\t1\t0\t300\n",
            ),
        ];
        let view = View::read("a", &others, &mut Seen::new());
        let b1 = view.loads[&("chat", "b1")];
        assert_eq!(
            (b1.streams, b1.queued_tokens),
            (4, 16_000),
            "streams and queues as written"
        );
        assert_eq!(
            b1.stall.as_millis(),
            500,
            "b's 700 ms stall mark, written 200 ms ago, has 500 left; c's has 50"
        );
        assert_eq!(view.loads[&("chat", "b2")].stall.as_millis(), 290);
        let gone = [at("b", 900, "load\tchat\tb1\t1\t0\t700\n")];
        let view = View::read("a", &gone, &mut Seen::new());
        assert_eq!(
            view.loads[&("chat", "b1")].stall,
            Duration::ZERO,
            "a stall mark older than itself is over"
        );
    }
}
