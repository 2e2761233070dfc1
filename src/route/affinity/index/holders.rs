//! The backends known to hold one prompt block, most recent first, at most [`MAX_HOLDERS`].
//!
//! A block that many conversations share (a system prompt, a tool list, a document several users
//! ask about) ends up in the prompt cache of every backend that served one of them. The index's
//! affinity needs only the latest of them; a latency prediction needs to know whether *this*
//! candidate holds it, or it counts a shared 1 600-token system prompt as uncached on three
//! replicas of four. Measured on the simulated mixed fleet at 32 requests/s: with one owner per
//! block, 411 of 6 068 requests had cached tokens the index did not know of, half of all cached
//! tokens. Four holders cover a pool of four; in a larger pool the least recent fall off, and a
//! prediction that misses one is where it was before this list.
use super::Owner;

/// How many holders a block remembers.
pub(crate) const MAX_HOLDERS: usize = 4;

/// The holders of one block, most recent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holders {
    owners: [Owner; MAX_HOLDERS],
    len: u8,
}

impl Holders {
    /// `owner` alone.
    pub fn new(owner: Owner) -> Self {
        Self {
            owners: [owner; MAX_HOLDERS],
            len: 1,
        }
    }

    /// The most recent holder.
    pub fn latest(&self) -> Owner {
        self.owners[0]
    }

    /// Whether `owner` is among them.
    pub fn contains(&self, owner: Owner) -> bool {
        self.as_slice().contains(&owner)
    }

    /// The holders, most recent first.
    pub fn as_slice(&self) -> &[Owner] {
        &self.owners[..usize::from(self.len)]
    }

    /// Makes `owner` the most recent; the least recent falls off a full list.
    pub fn serve(&mut self, owner: Owner) {
        let len = usize::from(self.len);
        let end = match self.as_slice().iter().position(|&o| o == owner) {
            Some(at) => at,
            None if len < MAX_HOLDERS => {
                self.len += 1;
                len
            }
            None => MAX_HOLDERS - 1,
        };
        self.owners.copy_within(0..end, 1);
        self.owners[0] = owner;
    }

    /// Keeps the holders `alive` says are; `false` when none is left.
    pub fn retain(&mut self, alive: impl Fn(Owner) -> bool) -> bool {
        let mut kept = 0;
        for i in 0..usize::from(self.len) {
            if alive(self.owners[i]) {
                self.owners[kept] = self.owners[i];
                kept += 1;
            }
        }
        // `kept` is at most `len`, itself at most MAX_HOLDERS.
        self.len = kept as u8;
        kept > 0
    }
}
