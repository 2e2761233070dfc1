//! Every llama.cpp server's slot table, and this gateway's share of their slots as the fleet's
//! sync last read it ([`super::share`]).
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::share::{Partition, PartitionId, Share};
use super::{Own, Slot, SlotTable};

/// The slot tables of every llama.cpp server the proxy has reserved slots on, by backend label,
/// and this gateway's share of their slots; shared by the router's revisions.
#[derive(Debug)]
pub(crate) struct SlotTables {
    tables: Mutex<HashMap<Arc<str>, Arc<SlotTable>>>,
    fleet: Mutex<FleetSlots>,
}

/// What the last reading of the fleet said of the slots (locked before the tables).
#[derive(Debug)]
struct FleetSlots {
    share: Share,
    /// Whether every other live gateway published this gateway's partition.
    agreed: bool,
    /// The slots the others hold, per server.
    held: HashMap<String, Vec<usize>>,
}

impl Default for SlotTables {
    /// Tables of a gateway alone: every slot its own.
    fn default() -> Self {
        Self::with(Share::Whole)
    }
}

impl SlotTables {
    /// Tables of a gateway in a fleet: no slot its own before its first reading of the fleet.
    pub fn in_fleet() -> Self {
        Self::with(Share::Unknown)
    }

    fn with(share: Share) -> Self {
        Self {
            tables: Mutex::default(),
            fleet: Mutex::new(FleetSlots {
                share,
                agreed: false,
                held: HashMap::new(),
            }),
        }
    }

    /// The table of `backend`, if it has one.
    pub fn get(&self, backend: &str) -> Option<Arc<SlotTable>> {
        self.tables().get(backend).cloned()
    }

    /// The table of `backend`, made with `slots` slots the first time (those of this gateway's
    /// share its own where the fleet agreed and no other holds them).
    pub fn of(&self, backend: &Arc<str>, slots: usize) -> Arc<SlotTable> {
        let fleet = self.fleet();
        let mut tables = self.tables();
        let table = tables.entry(Arc::clone(backend)).or_insert_with(|| {
            let held = fleet.held.get(&**backend).map_or(&[][..], Vec::as_slice);
            let own = |index: usize| match fleet.share {
                _ if !fleet.share.assigns(index) => Own::Theirs,
                Share::Part(_) if !fleet.agreed || held.contains(&index) => Own::Pending,
                _ => Own::Mine,
            };
            Arc::new(SlotTable::with(
                (0..slots).map(|i| Slot::new(own(i))).collect(),
            ))
        });
        Arc::clone(table)
    }

    /// The partition this gateway reserves by, for the others to see; `None` outside one.
    pub fn partition(&self) -> Option<PartitionId> {
        match self.fleet().share {
            Share::Part(partition) => Some(partition.id),
            Share::Whole | Share::Unknown => None,
        }
    }

    /// The slots this gateway holds, per server (servers with none left out).
    pub fn held(&self) -> Vec<(Arc<str>, Vec<usize>)> {
        let tables = self.tables();
        let held = tables
            .iter()
            .map(|(label, t)| (Arc::clone(label), t.held()));
        held.filter(|(_, slots)| !slots.is_empty()).collect()
    }

    /// How many slots this gateway may reserve, per server.
    pub fn owned(&self) -> Vec<(Arc<str>, usize)> {
        let tables = self.tables();
        let owned = tables
            .iter()
            .map(|(label, t)| (Arc::clone(label), t.owned()));
        owned.collect()
    }

    /// Takes a reading of the fleet: `me`, the `others` live with the partition each published
    /// (`None`: none), and the slots they hold per server.
    pub fn read(&self, me: &str, others: &[(&str, Option<PartitionId>)], held: &[(&str, usize)]) {
        let mut fleet = self.fleet();
        let partition = Partition::of(me, others.iter().map(|&(name, _)| name));
        let share = Share::Part(partition);
        if fleet.share != share {
            let kept = matches!(fleet.share, Share::Part(_));
            fleet.share = share;
            for table in self.tables().values() {
                table.adopt(share, kept);
            }
            tracing::info!(
                gateways = partition.members,
                rank = partition.rank,
                "fleet: llama.cpp slots split among the gateways anew"
            );
        }
        fleet.agreed = others.iter().all(|&(_, id)| id == Some(partition.id));
        fleet.held.clear();
        for &(server, slot) in held {
            fleet.held.entry(server.to_owned()).or_default().push(slot);
        }
        if fleet.agreed {
            for (label, table) in self.tables().iter() {
                table.confirm(fleet.held.get(&**label).map_or(&[][..], Vec::as_slice));
            }
        }
    }

    /// The fleet's store has not answered for a while: the partition this gateway had stays
    /// (the others keep theirs too); a gateway that never had one takes every slot, as a
    /// gateway without a fleet does.
    pub fn alone(&self) {
        let mut fleet = self.fleet();
        fleet.agreed = false;
        if fleet.share == Share::Unknown {
            fleet.share = Share::Whole;
            for table in self.tables().values() {
                table.adopt(Share::Whole, false);
            }
            tracing::warn!(
                "fleet: the store never answered; this gateway reserves every llama.cpp slot, as if it were the servers' only client"
            );
        }
    }

    fn tables(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<SlotTable>>> {
        self.tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fleet(&self) -> MutexGuard<'_, FleetSlots> {
        self.fleet
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
