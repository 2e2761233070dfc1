//! Each tenant's share of the work a gated pool serves.
//!
//! The gate's fair queue orders what waits, but a tenant that floods still takes whatever room the
//! others leave: the backends fill to the edge of the TTFT target, and every other tenant's next
//! request joins those longer queues. Fairness in the queue alone moved the quiet tenants' TTFT
//! p99 by 94-148 % under a 5x flood (docs/routing.md). So the gate also counts the work it let
//! through, per tenant, until each stream ends ([`ShareSlot`]): a request's prompt tokens and the
//! output tokens it may ask for, what the fair queue charges it too. Counted in streams instead,
//! a tenant of long documents would hold as much as one of short chats.
//!
//! A tenant already holding an equal part of that work ([`Shares::over`]) — shared by the tenants
//! that have streams, itself included, and counting its new request — is sent only into ample
//! room (see [`super::gate`]), else waits its turn in the queue behind the others. Alone, a tenant
//! has all of it; with three quiet tenants, a flooding one holds about what each of them holds.
//!
//! **A fleet of gateways** (`[fleet]`). Each gateway lets through only what reaches it, so a
//! tenant that floods every gateway while a quiet one reaches one would hold an equal part of
//! each gateway's work, and most of the fleet's. So each publishes its work in flight per tenant
//! ([`Shares::published`]) and counts the others' as the last sync read them
//! ([`Shares::set_others`]): a tenant's share is of the fleet's work. It also publishes the work
//! it let through per tenant since it started, which the others charge to the tenant's counter
//! in their fair queue ([`super::queue::FairQueue::charge`]).
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::route::backend::LoadGuard;
use crate::upstream::{BodyGuard, InFlight};

/// The work in flight per tenant, in tokens.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    by_tenant: HashMap<Arc<str>, u64>,
    total: u64,
    /// The fleet's other gateways' work in flight per tenant, as the last sync read it.
    others: HashMap<Arc<str>, u64>,
    others_total: u64,
    /// The work let through per tenant since the gateway started, for the others' queues;
    /// forgotten [`ADMITTED_KEPT`] after a tenant's last.
    admitted: HashMap<Arc<str>, Admitted>,
}

/// A tenant's work let through since the gateway started, and when it was last.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    work: u64,
    at: Instant,
}

/// How long a tenant with nothing in flight is still published after its last request: long
/// enough for every other gateway to read the last of it (many sync intervals), short enough that
/// the payload holds the tenants of the last half minute, not every tenant ever seen.
const ADMITTED_KEPT: Duration = Duration::from_secs(30);

/// One tenant's figures as a gateway publishes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantWork {
    pub tenant: Arc<str>,
    /// Its work in flight, in tokens.
    pub in_flight: u64,
    /// The work let through since the gateway started, in tokens.
    pub admitted: u64,
}

impl Shares {
    /// Whether `tenant` already holds its share of the work in flight with a new request of `work`
    /// tokens: an equal part of it, among the tenants with streams and it. A tenant under its share
    /// is not over it with one request, however large: its first is never over.
    /// With a fleet, the work is the whole fleet's: this gateway's and the others' as last read.
    pub fn over(&self, tenant: &str, work: u64) -> bool {
        let counts = self.lock();
        let here = counts.by_tenant.get(tenant).copied().unwrap_or(0);
        let own = here.saturating_add(counts.others.get(tenant).copied().unwrap_or(0));
        let elsewhere_only = counts.others.keys();
        let elsewhere_only = elsewhere_only.filter(|t| !counts.by_tenant.contains_key(*t));
        let tenants =
            (counts.by_tenant.len() + elsewhere_only.count()) as u64 + u64::from(own == 0);
        let total = counts.total.saturating_add(counts.others_total);
        tenants > 1 && own.saturating_mul(tenants) >= total.saturating_add(work)
    }

    /// Counts `work` tokens of `tenant` until the slot is dropped.
    pub fn take(self: &Arc<Self>, tenant: Arc<str>, work: u64) -> ShareSlot {
        let now = Instant::now();
        let mut counts = self.lock();
        let own = counts.by_tenant.entry(Arc::clone(&tenant)).or_insert(0);
        *own = own.saturating_add(work);
        counts.total = counts.total.saturating_add(work);
        let admitted = counts.admitted.entry(Arc::clone(&tenant));
        let admitted = admitted.or_insert(Admitted { work: 0, at: now });
        admitted.work = admitted.work.saturating_add(work);
        admitted.at = now;
        drop(counts);
        ShareSlot {
            shares: Arc::clone(self),
            tenant,
            work,
        }
    }

    /// The other gateways' work in flight per tenant, as a sync read it (empty: none, or the
    /// fleet's store unanswered).
    pub fn set_others(&self, others: HashMap<Arc<str>, u64>) {
        let mut counts = self.lock();
        counts.others_total = others
            .values()
            .fold(0, |sum, work| sum.saturating_add(*work));
        counts.others = others;
    }

    /// Each tenant's figures to publish at `now`: those with work in flight or let through within
    /// [`ADMITTED_KEPT`] (the others are forgotten here).
    pub fn published(&self, now: Instant) -> Vec<TenantWork> {
        let mut counts = self.lock();
        let Counts {
            by_tenant,
            admitted,
            ..
        } = &mut *counts;
        admitted.retain(|tenant, admitted| {
            by_tenant.contains_key(tenant) || now.duration_since(admitted.at) < ADMITTED_KEPT
        });
        let work = admitted.iter().map(|(tenant, admitted)| TenantWork {
            tenant: Arc::clone(tenant),
            in_flight: by_tenant.get(tenant).copied().unwrap_or(0),
            admitted: admitted.work,
        });
        work.collect()
    }

    #[cfg(test)]
    /// The work in flight of `tenant`, in tokens.
    pub fn of(&self, tenant: &str) -> u64 {
        self.lock().by_tenant.get(tenant).copied().unwrap_or(0)
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One stream's work, counted in its tenant's [`Shares`] until dropped (with the response body).
#[derive(Debug)]
pub struct ShareSlot {
    shares: Arc<Shares>,
    tenant: Arc<str>,
    work: u64,
}

impl Drop for ShareSlot {
    fn drop(&mut self) {
        let mut counts = self.shares.lock();
        counts.total = counts.total.saturating_sub(self.work);
        if let Some(own) = counts.by_tenant.get_mut(&self.tenant) {
            *own = own.saturating_sub(self.work);
            if *own == 0 {
                counts.by_tenant.remove(&self.tenant);
            }
        }
    }
}

/// A request's load on its backend and its tenant's share slot, held together by its response
/// body until the stream ends. The slot is shared by every attempt of the request: a retry on
/// another backend keeps the stream counted.
#[derive(Debug)]
pub struct Held {
    pub load: LoadGuard,
    pub slot: Arc<ShareSlot>,
}

/// The guard one attempt of a request hands its response body: its `load`, and with the
/// request's share `slot` (a gated pool's), that too.
pub fn in_flight(load: LoadGuard, slot: Option<&Arc<ShareSlot>>) -> InFlight {
    InFlight(match slot {
        Some(slot) => Arc::new(Held {
            load,
            slot: Arc::clone(slot),
        }),
        None => Arc::new(load),
    })
}

impl BodyGuard for Held {
    fn first_frame(&self) {
        self.load.first_frame();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_alone_is_never_over_its_share() {
        let shares = Arc::new(Shares::default());
        let slots: Vec<ShareSlot> = (0..100).map(|_| shares.take(Arc::from("a"), 300)).collect();
        assert!(!shares.over("a", 300));
        assert_eq!(shares.of("a"), 30_000);
        drop(slots);
        assert_eq!(shares.of("a"), 0);
    }

    #[test]
    fn a_tenant_holds_an_equal_part_of_the_work_and_no_more() {
        let shares = Arc::new(Shares::default());
        let mut slots = Vec::new();
        for tenant in ["b", "c", "d"] {
            for _ in 0..10 {
                slots.push(shares.take(Arc::from(tenant), 1));
            }
        }
        // a joins, and takes streams while it holds less than an equal part, its next counted.
        let mut taken = 0;
        while !shares.over("a", 1) {
            slots.push(shares.take(Arc::from("a"), 1));
            taken += 1;
            assert!(taken < 100, "never over");
        }
        assert_eq!(taken, 11, "as many as each of the others, and the one over");
        // A quiet tenant is not over where the flooding one is.
        assert!(!shares.over("b", 1));
        // One of b's streams ends: a is still over (it holds 11 of 40).
        slots.remove(0);
        assert!(shares.over("a", 1));
        // A fifth tenant is never over with its first stream, however large.
        assert!(!shares.over("e", 1_000_000));
    }

    #[test]
    fn shares_are_counted_in_tokens_not_streams() {
        let shares = Arc::new(Shares::default());
        // b holds ten chats of 300 tokens; a one document of 3 000 and one chat.
        let _chats: Vec<ShareSlot> = (0..10).map(|_| shares.take(Arc::from("b"), 300)).collect();
        let _document = shares.take(Arc::from("a"), 3_000);
        assert!(!shares.over("a", 300), "3 000 of 6 300: under half");
        let _chat = shares.take(Arc::from("a"), 300);
        assert!(
            shares.over("a", 300),
            "two streams against b's ten, but 3 300 of 6 600 tokens: its half"
        );
        assert!(!shares.over("b", 300));
    }

    #[test]
    fn a_retried_request_keeps_its_slot_until_its_last_attempt_ends() {
        use crate::route::backend::Backend;
        use crate::upstream::Target;
        let shares = Arc::new(Shares::default());
        let backend = |port: u16| {
            let target = Target::from_url(&format!("http://127.0.0.1:{port}")).expect("target");
            Arc::new(Backend::new(target, Arc::from("p"), None))
        };
        let slot = Arc::new(shares.take(Arc::from("a"), 300));
        // The first attempt fails before any byte: its guard goes, the request is retried.
        let first = in_flight(LoadGuard::new(backend(9001), 100), Some(&slot));
        drop(first);
        let second = in_flight(LoadGuard::new(backend(9002), 100), Some(&slot));
        // The dispatch returns: only the response body holds the slot now.
        drop(slot);
        assert_eq!(shares.of("a"), 300, "still a's stream");
        drop(second);
        assert_eq!(shares.of("a"), 0, "the stream ended");
    }

    #[test]
    fn with_a_fleet_a_tenant_holds_an_equal_part_of_the_fleets_work() {
        let shares = Arc::new(Shares::default());
        // Here: a quiet tenant b with 1 000 tokens in flight, the flood a with 1 000.
        let _b = shares.take(Arc::from("b"), 1_000);
        let _a = shares.take(Arc::from("a"), 1_000);
        assert!(
            !shares.over("a", 100),
            "here alone, a holds half of 2 100 with its next"
        );
        // The other gateways let a through for 5 000 more, and c (never seen here) for 500.
        shares.set_others(HashMap::from([
            (Arc::from("a"), 5_000),
            (Arc::from("c"), 500),
        ]));
        assert!(
            shares.over("a", 100),
            "6 000 of the fleet's 7 600 with three tenants: far over a third"
        );
        assert!(!shares.over("b", 100), "1 000 of 7 600");
        assert!(
            !shares.over("d", 10_000),
            "a fourth tenant's first is never over"
        );
        shares.set_others(HashMap::new());
        assert!(
            !shares.over("a", 100),
            "the store unanswered: this gateway's own view again"
        );
    }

    #[test]
    fn publishes_each_tenants_work_in_flight_and_let_through_then_forgets_the_idle() {
        let start = Instant::now();
        let shares = Arc::new(Shares::default());
        let a = shares.take(Arc::from("a"), 300);
        drop(shares.take(Arc::from("a"), 200));
        drop(shares.take(Arc::from("b"), 50));
        let mut published = shares.published(start);
        published.sort_by(|x, y| x.tenant.cmp(&y.tenant));
        let work = |tenant: &str, in_flight, admitted| TenantWork {
            tenant: Arc::from(tenant),
            in_flight,
            admitted,
        };
        assert_eq!(published, [work("a", 300, 500), work("b", 0, 50)]);
        let later = start + ADMITTED_KEPT + Duration::from_secs(1);
        assert_eq!(
            shares.published(later),
            [work("a", 300, 500)],
            "b, idle for longer than kept, is forgotten; a still has work in flight"
        );
        drop(a);
        assert!(shares.published(later + ADMITTED_KEPT).is_empty());
    }

    #[test]
    fn slots_count_down_to_nothing() {
        let shares = Arc::new(Shares::default());
        let a = shares.take(Arc::from("a"), 300);
        let b = shares.take(Arc::from("b"), 500);
        drop(a);
        drop(b);
        let counts = shares.lock();
        assert_eq!(counts.total, 0);
        assert!(counts.by_tenant.is_empty(), "no tenant left behind");
    }
}
