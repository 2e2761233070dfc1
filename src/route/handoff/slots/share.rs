//! Which of a llama.cpp server's slots this gateway may reserve, when several gateways run one
//! handoff pool (`[fleet]`).
//!
//! A slot table is only safe while one process reserves a server's slots: two gateways that each
//! restored a prompt into slot 0 would each send their request to it, and one of them would
//! compute its whole prompt again (a collision: the answer stays right, the handoff is lost). So
//! the gateways of a fleet split every server's slots among themselves: with `m` gateways, the
//! one `r`-th by name takes the slots whose index is `r` modulo `m`. Spread that way rather than
//! in blocks, each gateway keeps low and high slots, which is what [`super::Placement::First`]
//! and [`super::Placement::Last`] order a prefill server's batches by.
//!
//! The split follows the fleet's membership as each sync reads it, and a gateway takes a slot
//! another held only once that one cannot be using it: a slot the partition moves to this
//! gateway is *pending* until every other live gateway publishes the same partition (from then
//! on it never reserves the slot again) and does not list the slot as held (a request it placed
//! there before has ended). A gateway that left the fleet (its entry expired) is not waited
//! for: killed, its connections closed and the server dropped its requests.
use std::fmt;

/// Which slots of each server this gateway may reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// All of them: no fleet, this gateway is its servers' only client (also a fleet member
    /// whose store never answered: routing alone, as without a fleet).
    Whole,
    /// None yet: a fleet member before its first reading of the fleet (it does not know whose
    /// the slots are).
    Unknown,
    /// Its part of the fleet's partition.
    Part(Partition),
}

impl Share {
    /// Whether `slot` is this gateway's under the share (for a partition, once agreed).
    pub fn assigns(&self, slot: usize) -> bool {
        match self {
            Share::Whole => true,
            Share::Unknown => false,
            Share::Part(partition) => partition.assigns(slot),
        }
    }
}

/// The fleet's split of every server's slots, as one gateway sees its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Partition {
    /// The members' names, hashed: gateways that publish the same id split the slots the same
    /// way.
    pub id: PartitionId,
    /// This gateway's place among the members sorted by name.
    pub rank: usize,
    pub members: usize,
}

impl Partition {
    /// The partition of the fleet of `me` and `others` (the live gateways a sync read).
    pub fn of<'a>(me: &'a str, others: impl IntoIterator<Item = &'a str>) -> Self {
        let mut names: Vec<&str> = others.into_iter().chain([me]).collect();
        names.sort_unstable();
        names.dedup();
        let rank = names.iter().position(|name| *name == me).unwrap_or(0);
        Self {
            id: PartitionId::of(&names),
            rank,
            members: names.len(),
        }
    }

    /// Whether `slot` is this gateway's.
    pub fn assigns(&self, slot: usize) -> bool {
        slot % self.members == self.rank
    }
}

/// A fleet's membership, hashed (FNV-1a over the sorted names, each ended by a zero byte: the
/// same on every platform and version, unlike std's hasher).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionId(pub u64);

impl PartitionId {
    fn of(sorted: &[&str]) -> Self {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut hash = OFFSET;
        for name in sorted {
            for byte in name.bytes().chain([0]) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(PRIME);
            }
        }
        Self(hash)
    }

    /// Reads the id as [`fmt::Display`] writes it.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == 16)
            .then(|| u64::from_str_radix(text, 16).ok())
            .flatten()
            .map(Self)
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_exactly_one_gateway_and_all_agree_on_the_split() {
        let names = ["gw-b", "gw-a", "gw-c"];
        let partitions: Vec<Partition> = names
            .iter()
            .map(|me| Partition::of(me, names.iter().copied().filter(|n| n != me)))
            .collect();
        assert!(partitions.iter().all(|p| p.id == partitions[0].id));
        assert_eq!(
            partitions.iter().map(|p| p.rank).collect::<Vec<_>>(),
            [1, 0, 2],
            "ranked by name"
        );
        for slot in 0..8 {
            let owners = partitions.iter().filter(|p| p.assigns(slot)).count();
            assert_eq!(owners, 1, "slot {slot}");
        }
        assert!(partitions[1].assigns(0) && partitions[1].assigns(3));
        let two = Partition::of("gw-a", ["gw-b"]);
        assert_ne!(two.id, partitions[1].id, "another membership, another id");
        assert_eq!(
            PartitionId::parse(&two.id.to_string()),
            Some(two.id),
            "reads back"
        );
        assert_eq!(PartitionId::parse("12"), None);
        assert_eq!(PartitionId::parse("zzzzzzzzzzzzzzzz"), None);
    }

    #[test]
    fn names_joined_differently_hash_differently() {
        let split = Partition::of("ab", ["c"]);
        let joined = Partition::of("a", ["bc"]);
        assert_ne!(split.id, joined.id);
        assert_eq!(
            Partition::of("a", ["a", "b"]).members,
            2,
            "a name read twice counts once"
        );
    }
}
