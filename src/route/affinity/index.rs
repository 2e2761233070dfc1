//! The prefix index: which backends served each prompt block a pool has seen (the latest few,
//! most recent first: [`holders`]), bounded.
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

pub(crate) mod holders;
#[cfg(test)]
mod tests;

pub(crate) use crate::route::backend::Owner;
pub(crate) use holders::Holders;

/// The bounded map from block names to their holders.
#[derive(Debug)]
pub(crate) struct PrefixIndex {
    /// At most this many names in both generations together.
    capacity: usize,
    current: HashMap<u64, Holders, Passthrough>,
    previous: HashMap<u64, Holders, Passthrough>,
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

    /// The latest live holder of one name, refreshed as recently used; the dead holders met are
    /// dropped, and the name with them when none is left.
    pub fn get(&mut self, name: u64, alive: impl Fn(Owner) -> bool) -> Option<Owner> {
        if let Some(holders) = self.current.get_mut(&name) {
            if holders.retain(alive) {
                return Some(holders.latest());
            }
            self.current.remove(&name);
            return None;
        }
        let mut holders = self.previous.remove(&name)?;
        if !holders.retain(alive) {
            return None;
        }
        self.place(name, holders);
        Some(holders.latest())
    }

    /// The holders recorded for `name`, without refreshing them or dropping dead ones.
    pub fn peek(&self, name: u64) -> Option<&Holders> {
        self.current.get(&name).or_else(|| self.previous.get(&name))
    }

    /// Records that `owner` holds `name`, as its latest holder.
    pub fn insert(&mut self, name: u64, owner: Owner) {
        let holders = match self.current.get_mut(&name) {
            Some(holders) => {
                holders.serve(owner);
                return;
            }
            None => match self.previous.remove(&name) {
                Some(mut holders) => {
                    holders.serve(owner);
                    holders
                }
                None => Holders::new(owner),
            },
        };
        self.place(name, holders);
    }

    /// Puts `name`, absent from the current generation, into it, turning the generations over
    /// first when the current one is full.
    fn place(&mut self, name: u64, holders: Holders) {
        if self.current.len() >= self.capacity / 2 {
            self.previous = std::mem::replace(
                &mut self.current,
                HashMap::with_capacity_and_hasher(self.capacity / 2, Passthrough::default()),
            );
        }
        self.current.insert(name, holders);
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
