//! The gateway queue: where a request waits when no backend of its pool is predicted to meet its
//! TTFT target, and who goes next when capacity frees.
//!
//! Serving waiting requests first come, first served lets one tenant that floods the gateway hold
//! every other tenant's requests behind its own. So the queue shares the capacity between tenants
//! by virtual token counters (VTC, Sheng et al., "Fairness in Serving Large Language Models",
//! OSDI '24):
//! - every tenant with entries waiting (a *backlogged* tenant) has a counter of the tokens it was
//!   served: [`FairQueue::pop`] charges the popped entry's [`Entry::cost`] to its tenant;
//! - the next entry comes from the backlogged tenant with the smallest counter; ties go to the
//!   tenant backlogged longest (the one whose current backlog began with the earlier push);
//! - a tenant that becomes backlogged starts at the smallest counter among the tenants backlogged
//!   then, or, when none is, at the floor (the largest counter a served tenant has reached). A
//!   tenant that was idle therefore cannot have banked credit to flood with later: it is never
//!   below every other backlogged tenant, so it alternates with them at once.
//!
//! A tenant's counter is forgotten when its last entry leaves (popped, removed or expired), so the
//! memory is bounded by what is queued, not by every tenant ever seen. The price, as in the paper
//! when a client leaves the queue: a tenant drained by a pop comes back at the smallest backlogged
//! counter, at most one entry's cost below where it left, so it may go first once more.
//!
//! Within a tenant, a higher [`Entry::priority`] goes first, then the earlier [`Entry::deadline`],
//! then the earlier push. Across tenants, [`FairQueue::pop_expired`] takes the entry whose
//! deadline passed first (and charges nobody: it was not served), and
//! [`FairQueue::remove`] takes back the entry of a client that left.
//!
//! Every operation is `O(log n)` in the entries queued (a pop also `O(log t)` in the tenants
//! backlogged): an entry is a hash-map slot plus a place in its tenant's ordered set and in the
//! set of deadlines; a backlogged tenant is a place in the set ordered by counter. The queue is not
//! synchronised: the proxy holds it under a mutex.
//!
//! ```
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! # use tokenmeter::route::placement::queue::{Entry, FairQueue};
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
//! let entry = |tenant: &str, payload| Entry {
//!     tenant: Arc::from(tenant),
//!     priority: 0,
//!     deadline,
//!     cost: 100,
//!     payload,
//! };
//! let mut queue = FairQueue::new(16);
//! for n in 0..3 {
//!     queue.push(entry("flood", n)).unwrap();
//! }
//! queue.push(entry("quiet", 10)).unwrap();
//! let order: Vec<i32> = std::iter::from_fn(|| queue.pop()).map(|(_, e)| e.payload).collect();
//! assert_eq!(order, [0, 10, 1, 2], "the quiet tenant waits for one entry, not three");
//! ```
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tokio::time::Instant;

#[cfg(test)]
mod tests;

/// One waiting request, as pushed.
#[derive(Debug)]
pub struct Entry<T> {
    /// Whose share it is served from.
    pub tenant: Arc<str>,
    /// Larger is more urgent; orders entries within a tenant only, never across tenants.
    pub priority: u8,
    /// When the entry is no longer worth serving ([`FairQueue::pop_expired`]).
    pub deadline: Instant,
    /// What serving it charges its tenant's counter, in tokens.
    pub cost: u64,
    /// What the caller needs to resume the request (e.g. a oneshot sender).
    pub payload: T,
}

/// Names one push for [`FairQueue::remove`]; keys are never reused and grow with each push.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Key(u64);

/// A push into a full queue: the entry, given back to be shed.
#[derive(Debug, thiserror::Error)]
#[error("the gateway queue is full")]
pub struct Full<T>(pub Entry<T>);

/// A bounded queue that serves tenants their fair share of tokens (see the module docs).
#[derive(Debug)]
pub struct FairQueue<T> {
    /// At most this many entries, over all tenants.
    capacity: usize,
    /// The key of the next push.
    next_key: u64,
    entries: HashMap<Key, Entry<T>>,
    /// Every backlogged tenant, and only those.
    tenants: HashMap<Arc<str>, Tenant>,
    /// The backlogged tenants by their turn: the first is served next.
    turns: BTreeMap<Turn, Arc<str>>,
    /// Every entry by deadline, then push order.
    deadlines: BTreeSet<(Instant, Key)>,
    /// The largest counter a served tenant has reached: where a tenant starts when none is
    /// backlogged. It never decreases.
    floor: u64,
}

/// A backlogged tenant's state.
#[derive(Debug)]
struct Tenant {
    counter: u64,
    /// The push that began its current backlog: breaks ties between equal counters.
    since: Key,
    /// Its entries, the next first.
    waiting: BTreeSet<Rank>,
}

/// A tenant's place in [`FairQueue::turns`]: fields in the order they compare.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Turn {
    counter: u64,
    since: Key,
}

/// An entry's place within its tenant: fields in the order they compare.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Rank {
    priority: Reverse<u8>,
    deadline: Instant,
    key: Key,
}

impl Tenant {
    fn turn(&self) -> Turn {
        Turn {
            counter: self.counter,
            since: self.since,
        }
    }
}

impl<T> Entry<T> {
    fn rank(&self, key: Key) -> Rank {
        Rank {
            priority: Reverse(self.priority),
            deadline: self.deadline,
            key,
        }
    }
}

impl<T> FairQueue<T> {
    /// An empty queue that holds at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            next_key: 0,
            entries: HashMap::new(),
            tenants: HashMap::new(),
            turns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            floor: 0,
        }
    }

    /// Queues `entry`, or gives it back in [`Full`] when `capacity` entries are queued.
    pub fn push(&mut self, entry: Entry<T>) -> Result<Key, Full<T>> {
        if self.entries.len() >= self.capacity {
            return Err(Full(entry));
        }
        let key = Key(self.next_key);
        self.next_key += 1;
        let rank = entry.rank(key);
        if let Some(tenant) = self.tenants.get_mut(&*entry.tenant) {
            tenant.waiting.insert(rank);
        } else {
            // The lift: a tenant becoming backlogged starts level with the least served one.
            let counter = self
                .turns
                .first_key_value()
                .map_or(self.floor, |(turn, _)| turn.counter);
            let tenant = Tenant {
                counter,
                since: key,
                waiting: BTreeSet::from([rank]),
            };
            self.turns.insert(tenant.turn(), Arc::clone(&entry.tenant));
            self.tenants.insert(Arc::clone(&entry.tenant), tenant);
        }
        self.deadlines.insert((entry.deadline, key));
        self.entries.insert(key, entry);
        Ok(key)
    }

    /// The next entry: the least served backlogged tenant's most urgent one. Charges its cost to
    /// the tenant's counter.
    pub fn pop(&mut self) -> Option<(Key, Entry<T>)> {
        let (&turn, name) = self.turns.first_key_value()?;
        let tenant = self.tenants.get_mut(&**name)?;
        let key = tenant.waiting.first()?.key;
        let cost = self.entries.get(&key)?.cost;
        tenant.counter = tenant.counter.saturating_add(cost);
        self.floor = self.floor.max(tenant.counter);
        // Re-placed before `take`, which looks the tenant's turn up to forget it when this was its
        // last entry.
        let moved = tenant.turn();
        if let Some(name) = self.turns.remove(&turn) {
            self.turns.insert(moved, name);
        }
        let entry = self.take(key)?;
        Some((key, entry))
    }

    /// Charges `tokens` served elsewhere (by the fleet's other gateways) to `tenant`'s counter,
    /// while it is backlogged here: the queue then orders tenants by what they were served
    /// across the fleet. An idle tenant is not charged (it starts level with the least served
    /// when it comes back, as ever).
    pub fn charge(&mut self, tenant: &str, tokens: u64) {
        let Some(state) = self.tenants.get_mut(tenant) else {
            return;
        };
        let Some(name) = self.turns.remove(&state.turn()) else {
            return;
        };
        state.counter = state.counter.saturating_add(tokens);
        self.floor = self.floor.max(state.counter);
        self.turns.insert(state.turn(), name);
    }

    /// The entry [`Self::pop`] would take next, left in place (the caller decides whether it can
    /// be served now).
    pub fn peek(&self) -> Option<&Entry<T>> {
        let (_, name) = self.turns.first_key_value()?;
        let key = self.tenants.get(&**name)?.waiting.first()?.key;
        self.entries.get(&key)
    }

    /// Takes back the entry pushed as `key` (its client left), or `None` when it is no longer
    /// queued. Charges nobody.
    pub fn remove(&mut self, key: Key) -> Option<Entry<T>> {
        self.take(key)
    }

    /// The entry with the earliest deadline, over every tenant, when that deadline is not after
    /// `now`. Charges nobody: the entry was not served.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<(Key, Entry<T>)> {
        let &(deadline, key) = self.deadlines.first()?;
        if deadline > now {
            return None;
        }
        let entry = self.take(key)?;
        Some((key, entry))
    }

    #[cfg(test)]
    /// The earliest deadline of any queued entry: when [`Self::pop_expired`] next has work.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(deadline, _)| deadline)
    }

    /// Entries queued, over all tenants.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most entries the queue holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The tokens `tenant` has been charged, while it has entries queued (`None` otherwise: an
    /// idle tenant's counter is forgotten).
    pub fn counter(&self, tenant: &str) -> Option<u64> {
        self.tenants.get(tenant).map(|t| t.counter)
    }

    /// Removes `key` from every index, and forgets its tenant when it was the tenant's last entry.
    fn take(&mut self, key: Key) -> Option<Entry<T>> {
        let entry = self.entries.remove(&key)?;
        self.deadlines.remove(&(entry.deadline, key));
        if let Some(tenant) = self.tenants.get_mut(&*entry.tenant) {
            tenant.waiting.remove(&entry.rank(key));
            if tenant.waiting.is_empty() {
                let turn = tenant.turn();
                self.turns.remove(&turn);
                self.tenants.remove(&*entry.tenant);
            }
        }
        Some(entry)
    }

    /// Tenants with state kept: only backlogged ones, so at most [`Self::len`].
    #[cfg(test)]
    fn tenants_tracked(&self) -> usize {
        self.tenants.len()
    }

    /// Checks that the indexes agree with each other (`O(n)`, for tests).
    #[cfg(test)]
    fn check(&self) {
        assert!(self.entries.len() <= self.capacity, "over capacity");
        assert_eq!(
            self.deadlines.len(),
            self.entries.len(),
            "one deadline per entry"
        );
        assert_eq!(
            self.turns.len(),
            self.tenants.len(),
            "one turn per tracked tenant"
        );
        let waiting: usize = self.tenants.values().map(|t| t.waiting.len()).sum();
        assert_eq!(waiting, self.entries.len(), "every entry is in its tenant");
        for (name, tenant) in &self.tenants {
            assert!(!tenant.waiting.is_empty(), "{name}: tracked while idle");
            assert_eq!(
                self.turns.get(&tenant.turn()).map(|n| &**n),
                Some(&**name),
                "{name}: its turn is out of date"
            );
            for rank in &tenant.waiting {
                let entry = self.entries.get(&rank.key);
                assert!(
                    entry.is_some_and(|e| *e.tenant == **name && e.rank(rank.key) == *rank),
                    "{name}: a rank without its entry"
                );
                assert!(
                    self.deadlines.contains(&(rank.deadline, rank.key)),
                    "{name}: an entry without its deadline"
                );
            }
        }
    }
}
