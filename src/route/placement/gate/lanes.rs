//! The gate's two lanes: long prompts and the rest.
//!
//! While a pool has prefill-heavy replicas designated ([`super::super::designate`]), a long prompt
//! waits for room on one of them and a chat for room on the others: they wait for different
//! replicas. In one queue a document at the head, waiting for a designated replica, held every
//! chat behind it though a chat replica had room (at 44 requests/s on the simulated fleet the
//! chats waited there while each was predicted to meet its targets). So a long prompt entering
//! while replicas are designated waits in a lane of its own: each lane keeps its fair order, and
//! neither holds the other. With none designated every prompt waits in the first lane, in one
//! order, as before the designation: a long prompt then needs room where chats go, and letting
//! chats pass it would leave it none.
//!
//! The capacity is the gate's, over both lanes.
use tokio::time::Instant;

use crate::route::placement::queue::{Entry, FairQueue, Full, Key};

/// Where an entry waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// Chats, and every prompt while no replica is designated.
    Chats = 0,
    /// Long prompts entered while prefill-heavy replicas were designated.
    Long = 1,
}

impl Lane {
    /// Both lanes, in the order the release task serves them (a chat is a short prefill: placed
    /// first, its load counts before a long prompt is predicted beside it).
    pub(super) const ALL: [Lane; 2] = [Lane::Chats, Lane::Long];
}

/// Names one push: its lane and its key there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LaneKey {
    lane: Lane,
    key: Key,
}

/// Two fair queues under one capacity.
#[derive(Debug)]
pub(super) struct Lanes<T> {
    capacity: usize,
    lanes: [FairQueue<T>; 2],
}

impl<T> Lanes<T> {
    /// Empty lanes that hold at most `capacity` entries together.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            lanes: [FairQueue::new(capacity), FairQueue::new(capacity)],
        }
    }

    /// Queues `entry` in `lane`, or gives it back when `capacity` entries wait in both.
    pub(super) fn push(&mut self, lane: Lane, entry: Entry<T>) -> Result<LaneKey, Full<T>> {
        if self.len() >= self.capacity {
            return Err(Full(entry));
        }
        let key = self.lanes[lane as usize].push(entry)?;
        Ok(LaneKey { lane, key })
    }

    /// The entry `lane` serves next, left in place.
    pub(super) fn peek(&self, lane: Lane) -> Option<&Entry<T>> {
        self.lanes[lane as usize].peek()
    }

    /// Takes the entry `lane` serves next, charging its tenant there.
    pub(super) fn pop(&mut self, lane: Lane) -> Option<Entry<T>> {
        self.lanes[lane as usize].pop().map(|(_, entry)| entry)
    }

    /// Takes back the entry pushed as `key`, or `None` when it is no longer queued.
    pub(super) fn remove(&mut self, key: LaneKey) -> Option<Entry<T>> {
        self.lanes[key.lane as usize].remove(key.key)
    }

    /// An entry of either lane whose deadline is not after `now`.
    pub(super) fn pop_expired(&mut self, now: Instant) -> Option<Entry<T>> {
        let [chats, long] = &mut self.lanes;
        chats
            .pop_expired(now)
            .or_else(|| long.pop_expired(now))
            .map(|(_, entry)| entry)
    }

    /// Charges `tokens` the tenant was served elsewhere in the fleet, in each lane where it
    /// waits ([`FairQueue::charge`]).
    pub(super) fn charge(&mut self, tenant: &str, tokens: u64) {
        for lane in &mut self.lanes {
            lane.charge(tenant, tokens);
        }
    }

    /// Whether `tenant` has an entry waiting in `lane`.
    pub(super) fn holds(&self, lane: Lane, tenant: &str) -> bool {
        self.lanes[lane as usize].counter(tenant).is_some()
    }

    /// Whether nothing waits in `lane`.
    pub(super) fn is_empty(&self, lane: Lane) -> bool {
        self.lanes[lane as usize].is_empty()
    }

    /// Entries waiting in both lanes.
    pub(super) fn len(&self) -> usize {
        self.lanes.iter().map(FairQueue::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn entry(tenant: &str, deadline: Instant, payload: u32) -> Entry<u32> {
        Entry {
            tenant: Arc::from(tenant),
            priority: 0,
            deadline,
            cost: 100,
            payload,
        }
    }

    #[test]
    fn each_lane_keeps_its_order_and_neither_holds_the_other() {
        let later = Instant::now() + Duration::from_secs(2);
        let mut lanes = Lanes::new(8);
        lanes.push(Lane::Long, entry("a", later, 1)).expect("room");
        lanes.push(Lane::Chats, entry("a", later, 2)).expect("room");
        lanes.push(Lane::Chats, entry("a", later, 3)).expect("room");
        assert_eq!(lanes.len(), 3);
        assert!(lanes.holds(Lane::Long, "a") && !lanes.holds(Lane::Long, "b"));
        // The chats' lane serves its own first entry, whatever waits in the other.
        assert_eq!(lanes.peek(Lane::Chats).map(|e| e.payload), Some(2));
        assert_eq!(lanes.pop(Lane::Chats).map(|e| e.payload), Some(2));
        assert_eq!(lanes.pop(Lane::Chats).map(|e| e.payload), Some(3));
        assert!(lanes.is_empty(Lane::Chats) && !lanes.is_empty(Lane::Long));
        assert_eq!(lanes.pop(Lane::Long).map(|e| e.payload), Some(1));
        assert_eq!(lanes.len(), 0);
    }

    #[test]
    fn the_capacity_holds_over_both_lanes_and_a_removed_entry_leaves_its_own_lane() {
        let later = Instant::now() + Duration::from_secs(2);
        let mut lanes = Lanes::new(2);
        let long = lanes.push(Lane::Long, entry("a", later, 1)).expect("room");
        let chat = lanes.push(Lane::Chats, entry("a", later, 2)).expect("room");
        let full = lanes.push(Lane::Chats, entry("a", later, 3));
        assert!(matches!(full, Err(Full(e)) if e.payload == 3), "full");
        // Keys of the two lanes may be equal numbers; each names its own entry.
        assert_eq!(lanes.remove(long).map(|e| e.payload), Some(1));
        assert_eq!(lanes.remove(long).map(|e| e.payload), None, "gone");
        assert_eq!(lanes.remove(chat).map(|e| e.payload), Some(2));
    }

    #[test]
    fn an_expired_entry_leaves_from_either_lane() {
        let now = Instant::now();
        let later = now + Duration::from_secs(2);
        let mut lanes = Lanes::new(8);
        lanes.push(Lane::Chats, entry("a", later, 1)).expect("room");
        lanes.push(Lane::Long, entry("a", now, 2)).expect("room");
        assert_eq!(lanes.pop_expired(now).map(|e| e.payload), Some(2));
        assert_eq!(lanes.pop_expired(now).map(|e| e.payload), None);
        assert_eq!(lanes.pop_expired(later).map(|e| e.payload), Some(1));
    }
}
