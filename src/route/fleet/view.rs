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
use std::collections::HashMap;

use super::payload::{self, Figures, Line};
use crate::route::placement::designate::Counts;

/// The last demand counts read of each (replica, pool).
pub type Seen = HashMap<(String, String), Counts>;

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
    /// Their models' prefill cost per (pool, backend label): each cost times the requests it
    /// rests on, summed, and the requests' sum.
    pub prefill: HashMap<(&'a str, &'a str), (f64, u64)>,
}

impl<'a> View<'a> {
    /// Reads the `others`' (name, payload) entries for replica `me`, adding to `offered` what
    /// moved since `seen`, which is left holding what was read this time (so a replica gone is
    /// forgotten).
    pub fn read(me: &str, others: &[(&'a str, &'a str)], seen: &mut Seen) -> Self {
        let mut view = View::default();
        let mut now = Seen::with_capacity(seen.len());
        for &(replica, text) in others {
            for line in payload::read(text) {
                match line {
                    Line::Load {
                        pool,
                        backend,
                        figures,
                    } => view.loads.entry((pool, backend)).or_default().add(figures),
                    Line::Demand { pool, counts } => {
                        let key = (replica.to_owned(), pool.to_owned());
                        if let Some(&last) = seen.get(&key) {
                            let offered = view.offered.entry(pool).or_default();
                            *offered = offered.plus(counts.since(last));
                        }
                        now.insert(key, counts);
                    }
                    Line::Prefill {
                        pool,
                        backend,
                        cost,
                        requests,
                    } => {
                        let sum = view.prefill.entry((pool, backend)).or_default();
                        sum.0 += cost * requests as f64;
                        sum.1 = sum.1.saturating_add(requests);
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
        let view = View::read("a", &first, &mut seen);
        assert!(
            view.offered.is_empty(),
            "a replica seen the first time adds nothing"
        );
        let second = [
            ("b", "demand\tp\t24000\t3\t1500\t15\t0\n"),
            ("c", "demand\tp\t0\t0\t500\t5\t0\n"),
        ];
        let view = View::read("a", &second, &mut seen);
        assert_eq!(view.offered["p"], counts(16_000, 2, 5));
        let restarted = [("b", "demand\tp\t8000\t1\t100\t1\t0\n")];
        let view = View::read("a", &restarted, &mut seen);
        assert_eq!(
            view.offered["p"],
            counts(8_000, 1, 1),
            "counts that went back: the replica restarted, all it has is new"
        );
        assert_eq!(seen.len(), 1, "c, not read this time, is forgotten");
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
        let view = View::read("a", &others, &mut Seen::new());
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
            ("c", "prefill\tchat\tb1\t100000\t100\n"),
        ];
        let view = View::read("a", &learned, &mut Seen::new());
        let (weighted, requests) = view.prefill[&("chat", "b1")];
        assert_eq!(requests, 400);
        assert!(
            (weighted / requests as f64 - 0.0625).abs() < 1e-9,
            "the cost per thousand tokens, weighted by the requests: {weighted}"
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
        let view = View::read("gw-1", &others, &mut seen);
        assert_eq!(
            view.leaders["p"],
            ("gw-0", vec!["10.0.0.2:8000", "10.0.0.3:8000"])
        );
        assert!(
            !view.leaders.contains_key("q"),
            "gw-1 is less than gw-3: it leads q itself"
        );
        let view = View::read("gw-3", &others, &mut seen);
        assert_eq!(
            view.leaders["q"],
            ("gw-2", vec![]),
            "a leader that designates none is followed too"
        );
    }
}
