//! The slots of llama.cpp servers, owned by the proxy: which of a server's `--parallel` slots each
//! request runs in, so that a KV cache restored into a slot is never handed to another request.
//!
//! `llama-server` gives a request without `id_slot` any idle slot; a slot the proxy has just
//! restored a prompt into is idle until the request it was restored for arrives. So every request
//! the proxy sends to a server of a llama.cpp handoff pool names its slot, and a slot is held from
//! its reservation (before the restore) to the end of that request's stream: never two requests
//! in one slot, and no more requests in flight than the server has slots. A request that finds no
//! free slot within `slot_wait` goes without one (the server queues it) and is counted.
//!
//! Among the free slots, a request takes the one its conversation used last (llama.cpp keeps a
//! slot's last prompt as its cache), else the one used longest ago. Tables are per server and
//! outlive configuration reloads (a request in flight keeps its slot whatever a reload does).
//!
//! With a fleet of gateways, each reserves only its share of every server's slots ([`share`]):
//! the fleet's sync reads whose each slot is ([`SlotTables::read`]) and publishes the slots this
//! gateway holds ([`SlotTables::held`]).
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::upstream::{BodyGuard, InFlight};
pub(crate) use share::PartitionId;
use share::Share;
pub(crate) use tables::SlotTables;

mod share;
mod tables;

/// One server's slots.
#[derive(Debug)]
pub(crate) struct SlotTable {
    /// Woken when a slot of this gateway's comes free, or one becomes its own.
    freed: Notify,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    /// Bumped at each release: a slot's `released` orders least recently used.
    clock: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    busy: bool,
    own: Own,
    /// The conversation key of the last request in the slot (its prompt is the slot's cache).
    key: Option<u64>,
    released: u64,
}

/// Whose a slot is, for a gateway of a fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    /// This gateway's to reserve.
    Mine,
    /// Moved to this gateway by the partition, not reserved until no other gateway can be
    /// using it ([`share`]).
    Pending,
    /// Another gateway's (a request of this one's may still be finishing in it).
    Theirs,
}

impl Slot {
    fn new(own: Own) -> Self {
        Self {
            busy: false,
            own,
            key: None,
            released: 0,
        }
    }
}

impl SlotTable {
    #[cfg(test)]
    /// A table of `slots` slots, all this gateway's.
    pub fn new(slots: usize) -> Self {
        Self::with(vec![Slot::new(Own::Mine); slots])
    }

    fn with(slots: Vec<Slot>) -> Self {
        Self {
            freed: Notify::new(),
            state: Mutex::new(State { slots, clock: 0 }),
        }
    }

    #[cfg(test)]
    /// Slots held now.
    pub fn busy(&self) -> usize {
        self.lock().slots.iter().filter(|slot| slot.busy).count()
    }

    /// The slots held now, by index.
    pub fn held(&self) -> Vec<usize> {
        let state = self.lock();
        let held = state.slots.iter().enumerate().filter(|(_, s)| s.busy);
        held.map(|(index, _)| index).collect()
    }

    /// How many slots this gateway may reserve (held or not).
    pub fn owned(&self) -> usize {
        let state = self.lock();
        state.slots.iter().filter(|s| s.own == Own::Mine).count()
    }

    /// A free slot, waiting at most `wait` for one, chosen as `placement` says.
    pub async fn reserve(
        self: &Arc<Self>,
        placement: Placement,
        wait: Duration,
    ) -> Option<SlotGuard> {
        let deadline = Instant::now() + wait;
        loop {
            // Listening before looking: a slot freed between the look and the wait wakes it.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.take(placement) {
                return Some(SlotGuard {
                    table: Arc::clone(self),
                    slot,
                });
            }
            tokio::time::timeout_at(deadline, freed).await.ok()?;
        }
    }

    /// Marks a free slot of this gateway's, chosen as `placement` says, held.
    fn take(&self, placement: Placement) -> Option<usize> {
        let mut state = self.lock();
        let mut free = state
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| !slot.busy && slot.own == Own::Mine)
            .map(|(index, slot)| (index, *slot));
        let chosen = match placement {
            Placement::Conversation(key) => free
                .min_by_key(|(_, slot)| {
                    let same = key.is_some() && slot.key == key;
                    (!same, slot.released)
                })
                .map(|(index, _)| index),
            Placement::First => free.next().map(|(index, _)| index),
            Placement::Last => free.next_back().map(|(index, _)| index),
        }?;
        state.slots[chosen].busy = true;
        if let Placement::Conversation(Some(key)) = placement {
            state.slots[chosen].key = Some(key);
        }
        Some(chosen)
    }

    fn release(&self, slot: usize) {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        let Some(slot) = state.slots.get_mut(slot) else {
            return;
        };
        slot.busy = false;
        slot.released = clock;
        let mine = slot.own == Own::Mine;
        drop(state);
        if mine {
            self.freed.notify_one();
        }
    }

    /// Takes `share`: each slot it assigns stays this gateway's if it was under a partition
    /// before (`kept`), else waits for the others' word ([`Own::Pending`]; under
    /// [`Share::Whole`], no one else's), and each it does not is another's.
    fn adopt(&self, share: Share, kept: bool) {
        let mut state = self.lock();
        for (index, slot) in state.slots.iter_mut().enumerate() {
            slot.own = match (share.assigns(index), share, slot.own) {
                (false, _, _) => Own::Theirs,
                (true, Share::Whole, _) => Own::Mine,
                (true, _, Own::Mine) if kept => Own::Mine,
                (true, _, _) => Own::Pending,
            };
        }
        drop(state);
        self.freed.notify_waiters();
    }

    /// Makes each pending slot that no other gateway holds (`held`) this gateway's.
    fn confirm(&self, held: &[usize]) {
        let mut state = self.lock();
        let mut gained = false;
        for (index, slot) in state.slots.iter_mut().enumerate() {
            if slot.own == Own::Pending && !held.contains(&index) {
                slot.own = Own::Mine;
                gained = true;
            }
        }
        drop(state);
        if gained {
            self.freed.notify_waiters();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
/// Which free slot a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The slot this conversation (its key) used last, whose cache holds its prompt; else the
    /// one used longest ago. For decode servers.
    Conversation(Option<u64>),
    /// The lowest free slot. `llama-server` fills each step's batch with the prompts of its slots
    /// in slot order, so on a prefill server a short prompt placed before a long one is computed
    /// in the next batch instead of after the whole long prompt.
    First,
    /// The highest free slot: a long prompt, computed after any shorter one.
    Last,
}

/// A slot held by one request; dropped, the slot is free again (and a waiter woken).
#[derive(Debug)]
pub struct SlotGuard {
    table: Arc<SlotTable>,
    slot: usize,
}

impl SlotGuard {
    /// The slot's index: the request's `id_slot`.
    pub fn id(&self) -> usize {
        self.slot
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.table.release(self.slot);
    }
}

/// A request's load guard and its llama.cpp slot, carried together by the response body.
#[derive(Debug)]
pub struct Held {
    pub load: Option<InFlight>,
    pub slot: SlotGuard,
}

impl BodyGuard for Held {
    fn first_frame(&self) {
        if let Some(load) = &self.load {
            load.0.first_frame();
        }
    }
}

#[cfg(test)]
mod tests;
