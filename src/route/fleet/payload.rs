//! What a replica publishes to its fleet and reads of the others': text lines, tab-separated,
//! each led by its kind, so that `redis-cli hgetall` shows an operator what each replica sees
//! (a few dozen bytes a backend):
//!
//! - `load <pool> <backend> <streams> <queued prompt tokens> <stall ms>`: its load on a backend
//!   (one line per backend it has load on), and how much longer a long prefill it placed there
//!   stalls the streams there.
//! - `demand <pool> <tokens> <prompts> <chat tokens> <chats> <chat misses>`: the prompts it
//!   offered a designating pool since it started ([`Counts`]).
//! - `heavy <pool> [<backend>...]`: the pool's prefill-heavy backends as it sees them (none
//!   listed: none); the fleet follows its leader's.
//! - `prefill <pool> <backend> <µs per thousand prompt tokens> <precision>`: what its latency
//!   model learned of a backend's prefill in a designating pool, and how sure it is (`1 /
//!   variance`, a decimal number: the readers weight each replica's by it).
//! - `tenant <pool> <tenant> <tokens in flight> <tokens let through>`: a gated pool's work per
//!   tenant, in flight now and let through since it started ([`crate::route::placement::share`]):
//!   the others' tenant shares count the first, their fair queues charge what the second moved.
//! - `slots <partition>`: the split of llama.cpp servers' slots among the fleet's gateways it
//!   reserves by (its members hashed, 16 hex digits; [`PartitionId`]).
//! - `held <backend> [<slot>...]`: the slots of a llama.cpp server it holds now (one line per
//!   server it holds any of): a gateway waits for these to end before it takes a slot the
//!   partition moved to it.
//! - `stamp <epoch> <n>`: which of its news (see [`super::news`]) the load lines count: the
//!   replica's start (`epoch`, 16 hex digits) and the number of its news and payloads before
//!   this one. A reader keeps a newer news' figures for a backend over an older payload's.
//! - `written <ms>`: put first by the store's sync script, not by the replica: when it wrote, on
//!   the store's clock. The script returns each entry's age from it ([`super::view`]).
//!
//! A line of another kind, or one that does not read (a replica of another version, a torn
//! write), is skipped.
use std::fmt::Write;
use std::time::Duration;

use crate::route::handoff::slots::PartitionId;
use crate::route::placement::designate::Counts;

/// One replica's load on one backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub streams: u64,
    pub queued_tokens: u64,
    /// How much longer a long prefill it placed there stalls the backend's streams.
    pub stall: Duration,
}

impl Figures {
    /// The figures of two replicas together: their streams and queues add, the longer stall
    /// holds.
    pub(super) fn add(&mut self, other: Figures) {
        self.streams = self.streams.saturating_add(other.streams);
        self.queued_tokens = self.queued_tokens.saturating_add(other.queued_tokens);
        self.stall = self.stall.max(other.stall);
    }

    fn is_zero(self) -> bool {
        self == Figures::default()
    }
}

/// Which of a replica's writings (payloads and news) is newer: its `epoch` (drawn when it
/// starts) and how many it wrote before. Writings of two epochs do not compare: the replica
/// restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub epoch: u64,
    pub n: u64,
}

impl Stamp {
    /// Whether `self` was written after `other` by the same run of the replica.
    pub fn after(self, other: Stamp) -> bool {
        self.epoch == other.epoch && self.n > other.n
    }
}

/// A payload being written.
#[derive(Debug, Default)]
pub struct Payload(String);

impl Payload {
    /// Its load on `backend` of `pool`; left out with none (absent reads as none).
    pub fn load(&mut self, pool: &str, backend: &str, figures: Figures) {
        if !figures.is_zero() {
            self.posted(pool, backend, figures);
        }
    }

    /// Its load on `backend` of `pool` now, written even when none (news name the backends whose
    /// load changed: a backend left out did not).
    pub fn posted(&mut self, pool: &str, backend: &str, figures: Figures) {
        if !carried([pool, backend]) {
            return;
        }
        let Figures {
            streams,
            queued_tokens,
            stall,
        } = figures;
        let stall = stall.as_millis();
        let _ = writeln!(
            self.0,
            "load\t{pool}\t{backend}\t{streams}\t{queued_tokens}\t{stall}"
        );
    }

    /// Which of its writings this is.
    pub fn stamp(&mut self, stamp: Stamp) {
        let _ = writeln!(self.0, "stamp\t{:016x}\t{}", stamp.epoch, stamp.n);
    }

    /// The prompts it offered `pool` since it started.
    pub fn demand(&mut self, pool: &str, counts: Counts) {
        if !carried([pool]) {
            return;
        }
        let Counts {
            tokens,
            prompts,
            chat_tokens,
            chats,
            chat_misses,
        } = counts;
        let _ = writeln!(
            self.0,
            "demand\t{pool}\t{tokens}\t{prompts}\t{chat_tokens}\t{chats}\t{chat_misses}"
        );
    }

    /// What its model learned of `backend`'s prefill: `cost` seconds per thousand prompt tokens,
    /// with `precision`.
    pub fn prefill(&mut self, pool: &str, backend: &str, cost: f64, precision: f64) {
        if !carried([pool, backend]) || !precision.is_finite() || precision <= 0.0 {
            return;
        }
        let micros = (cost * 1e6).round() as u64;
        let _ = writeln!(self.0, "prefill\t{pool}\t{backend}\t{micros}\t{precision}");
    }

    /// `pool`'s prefill-heavy backends as it sees them.
    pub fn heavy<'a>(&mut self, pool: &str, backends: impl IntoIterator<Item = &'a str>) {
        if !carried([pool]) {
            return;
        }
        self.0.push_str("heavy\t");
        self.0.push_str(pool);
        for backend in backends.into_iter().filter(|b| carried([*b])) {
            self.0.push('\t');
            self.0.push_str(backend);
        }
        self.0.push('\n');
    }

    /// A gated pool's work for `tenant`: in flight now, and let through since it started.
    pub fn tenant(&mut self, pool: &str, tenant: &str, in_flight: u64, admitted: u64) {
        if !carried([pool, tenant]) || tenant.is_empty() {
            return;
        }
        let _ = writeln!(self.0, "tenant\t{pool}\t{tenant}\t{in_flight}\t{admitted}");
    }

    /// The partition of llama.cpp slots it reserves by.
    pub fn partition(&mut self, id: PartitionId) {
        let _ = writeln!(self.0, "slots\t{id}");
    }

    /// The `slots` of llama.cpp server `backend` it holds now.
    pub fn held(&mut self, backend: &str, slots: &[usize]) {
        if slots.is_empty() || !carried([backend]) {
            return;
        }
        self.0.push_str("held\t");
        self.0.push_str(backend);
        for slot in slots {
            let _ = write!(self.0, "\t{slot}");
        }
        self.0.push('\n');
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// Whether the format carries `names`: none may hold a tab or a line break (no pool name or
/// backend address has one).
fn carried<const N: usize>(names: [&str; N]) -> bool {
    !names.iter().any(|name| name.contains(['\t', '\n']))
}

/// One line of a payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Line<'a> {
    Load {
        pool: &'a str,
        backend: &'a str,
        figures: Figures,
    },
    Demand {
        pool: &'a str,
        counts: Counts,
    },
    Heavy {
        pool: &'a str,
        backends: Vec<&'a str>,
    },
    Prefill {
        pool: &'a str,
        backend: &'a str,
        /// Seconds per thousand prompt tokens.
        cost: f64,
        /// How sure its model is of `cost` (`1 / variance`; finite, above zero).
        precision: f64,
    },
    Tenant {
        pool: &'a str,
        tenant: &'a str,
        in_flight: u64,
        admitted: u64,
    },
    Partition(PartitionId),
    Stamp(Stamp),
    Held {
        backend: &'a str,
        slots: Vec<usize>,
    },
}

/// The lines of `payload` that read.
pub fn read(payload: &str) -> impl Iterator<Item = Line<'_>> {
    payload.lines().filter_map(line)
}

fn line(text: &str) -> Option<Line<'_>> {
    let mut fields = text.split('\t');
    let kind = fields.next()?;
    // The pool for the routing lines; a slot line's partition or server.
    let pool = fields.next()?;
    match kind {
        "load" => {
            let backend = fields.next()?;
            let [streams, queued_tokens, stall] = numbers(fields)?;
            Some(Line::Load {
                pool,
                backend,
                figures: Figures {
                    streams,
                    queued_tokens,
                    stall: Duration::from_millis(stall),
                },
            })
        }
        "demand" => {
            let [tokens, prompts, chat_tokens, chats, chat_misses] = numbers(fields)?;
            Some(Line::Demand {
                pool,
                counts: Counts {
                    tokens,
                    prompts,
                    chat_tokens,
                    chats,
                    chat_misses,
                },
            })
        }
        "prefill" => {
            let backend = fields.next()?;
            let micros: u64 = fields.next()?.parse().ok()?;
            let precision: f64 = fields.next()?.parse().ok()?;
            let usable = precision.is_finite() && precision > 0.0;
            (usable && fields.next().is_none()).then_some(Line::Prefill {
                pool,
                backend,
                cost: micros as f64 / 1e6,
                precision,
            })
        }
        "heavy" => Some(Line::Heavy {
            pool,
            backends: fields.filter(|b| !b.is_empty()).collect(),
        }),
        "tenant" => {
            let tenant = fields.next().filter(|t| !t.is_empty())?;
            let [in_flight, admitted] = numbers(fields)?;
            Some(Line::Tenant {
                pool,
                tenant,
                in_flight,
                admitted,
            })
        }
        "slots" => {
            let id = PartitionId::parse(pool)?;
            fields.next().is_none().then_some(Line::Partition(id))
        }
        "stamp" => {
            let epoch = u64::from_str_radix(pool, 16)
                .ok()
                .filter(|_| pool.len() == 16)?;
            let [n] = numbers(fields)?;
            Some(Line::Stamp(Stamp { epoch, n }))
        }
        "held" => {
            let slots = fields.map(|slot| slot.parse().ok());
            Some(Line::Held {
                backend: pool,
                slots: slots.collect::<Option<_>>()?,
            })
        }
        _ => None,
    }
}

/// Exactly `N` numbers, and nothing after them.
fn numbers<'a, const N: usize>(mut fields: impl Iterator<Item = &'a str>) -> Option<[u64; N]> {
    let mut out = [0; N];
    for slot in &mut out {
        *slot = fields.next()?.parse().ok()?;
    }
    fields.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests;
