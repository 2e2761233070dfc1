//! The prefix index: which backend last served each prompt block a pool has seen, bounded.
//!
//! Two generations stand in for a least-recently-used list: names are written to the current
//! generation; a name found in the previous one moves to the current; when the current holds
//! half the capacity, the previous is dropped and the current becomes the previous. A name used
//! within the last half-capacity insertions always survives, one unused for a whole capacity's
//! worth never does, and every operation is a hash-map operation: no list to splice under the
//! lock, no per-entry timestamps. The keys are already hashes (XXH3), so the maps do not hash
//! them again.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[cfg(test)]
mod tests;

pub use crate::route::backend::Owner;

/// The bounded map from block names to owners.
#[derive(Debug)]
pub struct PrefixIndex {
    /// At most this many names in both generations together.
    capacity: usize,
    current: HashMap<u64, Owner, Passthrough>,
    previous: HashMap<u64, Owner, Passthrough>,
}

impl PrefixIndex {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(2);
        Self {
            capacity,
            current: HashMap::with_capacity_and_hasher(capacity / 2, Passthrough::default()),
            previous: HashMap::with_hasher(Passthrough::default()),
        }
    }

    /// Names held (both generations).
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The longest run of `names` from the first whose entries are all alive (`alive` decides),
    /// as its length and the owner of its last name. A dead entry is removed and ends the run.
    pub fn longest(
        &mut self,
        names: &[u64],
        alive: impl Fn(Owner) -> bool,
    ) -> (usize, Option<Owner>) {
        let mut last = None;
        for (i, &name) in names.iter().enumerate() {
            match self.get(name, &alive) {
                Some(owner) => last = Some(owner),
                None => return (i, last),
            }
        }
        (names.len(), last)
    }

    /// The live owner of one name, refreshed as recently used.
    pub fn get(&mut self, name: u64, alive: impl Fn(Owner) -> bool) -> Option<Owner> {
        if let Some(&owner) = self.current.get(&name) {
            if alive(owner) {
                return Some(owner);
            }
            self.current.remove(&name);
            return None;
        }
        let owner = self.previous.remove(&name)?;
        if !alive(owner) {
            return None;
        }
        self.insert(name, owner);
        Some(owner)
    }

    /// The owner recorded for `name`, without refreshing it or dropping a dead one.
    pub fn peek(&self, name: u64) -> Option<Owner> {
        self.current
            .get(&name)
            .or_else(|| self.previous.get(&name))
            .copied()
    }

    /// Records that `owner` holds `name`.
    pub fn insert(&mut self, name: u64, owner: Owner) {
        if self.current.len() >= self.capacity / 2 && !self.current.contains_key(&name) {
            self.previous = std::mem::replace(
                &mut self.current,
                HashMap::with_capacity_and_hasher(self.capacity / 2, Passthrough::default()),
            );
        }
        self.previous.remove(&name);
        self.current.insert(name, owner);
    }
}

/// A hasher for keys that are already uniform 64-bit hashes.
#[derive(Debug, Default, Clone, Copy)]
struct PassthroughHasher(u64);

impl Hasher for PassthroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `u64` keys; anything else is folded in, never dropped.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

type Passthrough = BuildHasherDefault<PassthroughHasher>;
