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
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::upstream::{BodyGuard, InFlight};

/// One server's slots.
#[derive(Debug)]
pub(crate) struct SlotTable {
    /// One permit per free slot: waiting for a slot is waiting for a permit.
    free: Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    /// Bumped at each release: a slot's `released` orders least recently used.
    clock: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    busy: bool,
    /// The conversation key of the last request in the slot (its prompt is the slot's cache).
    key: Option<u64>,
    released: u64,
}

impl SlotTable {
    pub fn new(slots: usize) -> Self {
        Self {
            free: Arc::new(Semaphore::new(slots)),
            state: Mutex::new(State {
                slots: vec![Slot::default(); slots],
                clock: 0,
            }),
        }
    }

    #[cfg(test)]
    /// Slots held now.
    pub fn busy(&self) -> usize {
        self.lock().slots.iter().filter(|slot| slot.busy).count()
    }

    /// A free slot, waiting at most `wait` for one, chosen as `placement` says.
    pub async fn reserve(
        self: &Arc<Self>,
        placement: Placement,
        wait: Duration,
    ) -> Option<SlotGuard> {
        let permit = match Arc::clone(&self.free).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) if wait.is_zero() => return None,
            Err(_) => tokio::time::timeout(wait, Arc::clone(&self.free).acquire_owned())
                .await
                .ok()?
                .ok()?,
        };
        let mut state = self.lock();
        let mut free = state
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| !slot.busy)
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
        drop(state);
        Some(SlotGuard {
            table: Arc::clone(self),
            slot: chosen,
            _permit: permit,
        })
    }

    fn release(&self, slot: usize) {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        if let Some(slot) = state.slots.get_mut(slot) {
            slot.busy = false;
            slot.released = clock;
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

/// A slot held by one request; dropped, the slot is free again (its permit returns after it is
/// marked free, so a waiter always finds it).
#[derive(Debug)]
pub struct SlotGuard {
    table: Arc<SlotTable>,
    slot: usize,
    _permit: OwnedSemaphorePermit,
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

/// The slot tables of every llama.cpp server the proxy has reserved slots on, by backend label;
/// shared by the router's revisions.
#[derive(Debug, Default)]
pub(crate) struct SlotTables {
    tables: Mutex<HashMap<Arc<str>, Arc<SlotTable>>>,
}

impl SlotTables {
    /// The table of `backend`, if it has one.
    pub fn get(&self, backend: &str) -> Option<Arc<SlotTable>> {
        let tables = self
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tables.get(backend).cloned()
    }

    /// The table of `backend`, made with `slots` slots the first time.
    pub fn of(&self, backend: &Arc<str>, slots: usize) -> Arc<SlotTable> {
        let mut tables = self
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let table = tables
            .entry(Arc::clone(backend))
            .or_insert_with(|| Arc::new(SlotTable::new(slots)));
        Arc::clone(table)
    }
}

#[cfg(test)]
mod tests;
