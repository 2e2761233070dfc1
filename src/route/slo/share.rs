//! Each tenant's share of the streams a gated pool serves.
//!
//! The gate's fair queue orders what waits, but a tenant that floods still takes whatever room the
//! others leave: the backends fill to the edge of the TTFT target, and every other tenant's next
//! request joins those longer queues. Fairness in the queue alone moved the quiet tenants' TTFT
//! p99 by 94-148 % under a 5x flood (docs/routing.md). So the gate also counts the streams it let
//! through, per tenant, until each ends ([`ShareSlot`]). A tenant whose next stream would put it
//! over an equal part of them ([`Shares::over`]) — shared by the tenants that have streams, itself
//! included — is sent only into ample room (see [`super::gate`]), else waits its turn in the
//! queue behind the others. Alone, a tenant has every stream; with three quiet tenants, a flooding
//! one holds about what each of them holds.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::route::backend::LoadGuard;
use crate::upstream::{BodyGuard, InFlight};

/// The streams in flight per tenant.
#[derive(Debug, Default)]
pub struct Shares {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    by_tenant: HashMap<Arc<str>, u64>,
    total: u64,
}

impl Shares {
    /// Whether one more stream would put `tenant` over its share: an equal part of the streams in
    /// flight and that one, among the tenants with streams and it.
    pub fn over(&self, tenant: &str) -> bool {
        let counts = self.lock();
        let own = counts.by_tenant.get(tenant).copied().unwrap_or(0);
        let tenants = counts.by_tenant.len() as u64 + u64::from(own == 0);
        if tenants <= 1 {
            return false;
        }
        own + 1 > (counts.total + 1).div_ceil(tenants)
    }

    /// Counts a stream of `tenant` until the slot is dropped.
    pub fn take(self: &Arc<Self>, tenant: Arc<str>) -> ShareSlot {
        let mut counts = self.lock();
        *counts.by_tenant.entry(Arc::clone(&tenant)).or_insert(0) += 1;
        counts.total += 1;
        drop(counts);
        ShareSlot {
            shares: Arc::clone(self),
            tenant,
        }
    }

    /// The streams in flight of `tenant`.
    pub fn of(&self, tenant: &str) -> u64 {
        self.lock().by_tenant.get(tenant).copied().unwrap_or(0)
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One stream of a tenant, counted in its [`Shares`] until dropped (with the response body).
#[derive(Debug)]
pub struct ShareSlot {
    shares: Arc<Shares>,
    tenant: Arc<str>,
}

impl Drop for ShareSlot {
    fn drop(&mut self) {
        let mut counts = self.shares.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(own) = counts.by_tenant.get_mut(&self.tenant) {
            *own = own.saturating_sub(1);
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
        let slots: Vec<ShareSlot> = (0..100).map(|_| shares.take(Arc::from("a"))).collect();
        assert!(!shares.over("a"));
        assert_eq!(shares.of("a"), 100);
        drop(slots);
        assert_eq!(shares.of("a"), 0);
    }

    #[test]
    fn a_tenant_holds_an_equal_part_of_the_streams_and_no_more() {
        let shares = Arc::new(Shares::default());
        let mut slots = Vec::new();
        for tenant in ["b", "c", "d"] {
            for _ in 0..10 {
                slots.push(shares.take(Arc::from(tenant)));
            }
        }
        // a joins, and takes streams while one more would not put it over an equal part.
        let mut taken = 0;
        while !shares.over("a") {
            slots.push(shares.take(Arc::from("a")));
            taken += 1;
            assert!(taken < 100, "never over");
        }
        assert_eq!(
            taken, 11,
            "as many as each of the others, the share rounded up"
        );
        // A quiet tenant is not over where the flooding one is.
        assert!(!shares.over("b"));
        // One of b's streams ends: a is still over (it holds 11 of 40).
        slots.remove(0);
        assert!(shares.over("a"));
        // A fifth tenant is never over with its first stream.
        assert!(!shares.over("e"));
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
        let slot = Arc::new(shares.take(Arc::from("a")));
        // The first attempt fails before any byte: its guard goes, the request is retried.
        let first = in_flight(LoadGuard::new(backend(9001), 100), Some(&slot));
        drop(first);
        let second = in_flight(LoadGuard::new(backend(9002), 100), Some(&slot));
        // The dispatch returns: only the response body holds the slot now.
        drop(slot);
        assert_eq!(shares.of("a"), 1, "still a's stream");
        drop(second);
        assert_eq!(shares.of("a"), 0, "the stream ended");
    }

    #[test]
    fn slots_count_down_to_nothing() {
        let shares = Arc::new(Shares::default());
        let a = shares.take(Arc::from("a"));
        let b = shares.take(Arc::from("b"));
        drop(a);
        drop(b);
        let counts = shares.lock();
        assert_eq!(counts.total, 0);
        assert!(counts.by_tenant.is_empty(), "no tenant left behind");
    }
}
