//! A replica as the designation weighs it, and which one goes in or out: the fastest first, then
//! the slowest that covers a shortfall (else the slowest), the slowest let go first, and the two
//! trades that correct a cold pool (a faster one in, a slower one for a fast one besides the
//! first).
use std::time::Duration;

/// A replica at least this many times as fast as a designated one takes its place ([`swap`]):
/// well past the learned rates' noise between replicas of one kind.
pub(super) const SWAP: f64 = 1.5;
/// Replicas whose prefill rates are within this factor are equally fast: between them, the one
/// with fewer streams is designated first (fewer chats to stall; [`first`]: one already
/// prefilling a long prompt before that), the one with more let go first.
pub(super) const SAME_RATE: f64 = 1.1;

/// One available backend as the designation weighs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Replica {
    /// Prompt tokens per second it prefills.
    pub rate: f64,
    pub streams: u64,
    /// It is prefilling a long prompt now (marked stalling): its streams meet that stall anyway.
    pub prefilling: bool,
    /// Prefill-heavy: before the step, as it was; after, as it is now.
    pub heavy: bool,
    /// The stall a stream started on it is expected to meet (set by the step).
    pub expected_stall: Duration,
}

/// Trades the slowest designated replica for the fastest other one when that is at least
/// [`SWAP`] times as fast as the fastest designated: a cold pool designates by the priors, which
/// rate every replica alike, and a replica that slowed down (a noisy neighbour) should not keep
/// the documents. The first designated is the fastest, the others the slowest that suffice, so
/// the test is against the fastest designated: two half-speed replicas designated (the first by
/// the priors, the second added before the first's rate was learned) kept every document from
/// the fast ones for 50 s of a run through one gateway, and 65 of 179 documents were shed
/// (docs/deploying.md); a fast one and a half-speed one are the split as it should be.
/// Whether it traded.
pub(super) fn swap(replicas: &mut [Replica]) -> bool {
    let fastest = replicas
        .iter()
        .filter(|r| r.heavy)
        .map(|r| r.rate)
        .fold(f64::NAN, f64::max);
    let (Some(weakest), Some(strongest)) = (weakest(replicas), strongest(replicas)) else {
        return false;
    };
    let trades = replicas[strongest].rate >= SWAP * fastest;
    if trades {
        replicas[weakest].heavy = false;
        replicas[strongest].heavy = true;
    }
    trades
}

/// Trades a designated replica other than the fastest for one [`SWAP`] times slower that is
/// not designated, when the designated replicas still prefill `needed` tokens per second with
/// it: the fastest first, then the slowest that suffice, as the designation adds them. Added
/// while every rate was the priors' (all alike), the second was as likely a fast replica as a
/// slow one; both fast ones designated left the chats the half-speed replicas, and one gateway
/// met 74 % of its SLOs at 32 requests/s where it met 92 % with a fast and a slow one
/// (docs/deploying.md). Whether it traded.
pub(super) fn trade_down(replicas: &mut [Replica], needed: f64) -> bool {
    let fastest = replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| r.heavy)
        .max_by(|(_, a), (_, b)| a.rate.total_cmp(&b.rate))
        .map(|(k, _)| k);
    let Some(fastest) = fastest else {
        return false;
    };
    let total = capacity(replicas);
    // The fastest of the others designated, for the slowest not designated that leaves enough.
    let out = replicas
        .iter()
        .enumerate()
        .filter(|&(k, r)| r.heavy && k != fastest)
        .max_by(|(_, a), (_, b)| a.rate.total_cmp(&b.rate))
        .map(|(k, _)| k);
    let Some(out) = out else {
        return false;
    };
    let rate = replicas[out].rate;
    let into = replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.heavy && r.rate * SWAP <= rate && total - rate + r.rate >= needed)
        .min_by(|(_, a), (_, b)| a.rate.total_cmp(&b.rate).then(a.streams.cmp(&b.streams)))
        .map(|(k, _)| k);
    let Some(into) = into else {
        return false;
    };
    replicas[out].heavy = false;
    replicas[into].heavy = true;
    true
}

pub(super) fn heavy(replicas: &[Replica]) -> usize {
    replicas.iter().filter(|r| r.heavy).count()
}

/// The designated replicas' prefill rate, tokens per second.
pub(super) fn capacity(replicas: &[Replica]) -> f64 {
    replicas.iter().filter(|r| r.heavy).map(|r| r.rate).sum()
}

/// The other replicas' prefill rate, tokens per second: what the chats have.
pub(super) fn chat_capacity(replicas: &[Replica]) -> f64 {
    replicas.iter().filter(|r| !r.heavy).map(|r| r.rate).sum()
}

/// The slowest replica not designated that prefills `short` tokens per second and the chats can
/// `spare`, the fewest streams between equals: what covers the demand and takes the least from
/// the chats.
pub(super) fn sufficient(
    replicas: &[Replica],
    short: f64,
    spare: impl Fn(&Replica) -> bool,
) -> Option<usize> {
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.heavy && r.rate >= short && spare(r))
        .min_by(|(_, a), (_, b)| a.rate.total_cmp(&b.rate).then(a.streams.cmp(&b.streams)))
        .map(|(k, _)| k)
}

/// The first replica to designate: among the fastest (within [`SAME_RATE`]), one prefilling a
/// long prompt already (the one that came before any replica was designated: its streams meet
/// that stall anyway), then the one with the fewest streams.
pub(super) fn first(replicas: &[Replica]) -> Option<usize> {
    let fastest = replicas.iter().map(|r| r.rate).fold(f64::NAN, f64::max);
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| r.rate * SAME_RATE >= fastest)
        .min_by_key(|(_, r)| (!r.prefilling, r.streams))
        .map(|(k, _)| k)
}

/// The replica a designated one is swapped for: among the fastest not designated
/// (within [`SAME_RATE`]), the one with the fewest streams.
pub(super) fn strongest(replicas: &[Replica]) -> Option<usize> {
    let fastest = replicas
        .iter()
        .filter(|r| !r.heavy)
        .map(|r| r.rate)
        .fold(f64::NAN, f64::max);
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.heavy && r.rate * SAME_RATE >= fastest)
        .min_by_key(|(_, r)| r.streams)
        .map(|(k, _)| k)
}

/// The designated replica to let go first: among the slowest designated (within
/// [`SAME_RATE`]), the one with the most streams (it already serves chats).
pub(super) fn weakest(replicas: &[Replica]) -> Option<usize> {
    let slowest = replicas
        .iter()
        .filter(|r| r.heavy)
        .map(|r| r.rate)
        .fold(f64::NAN, f64::min);
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| r.heavy && r.rate <= slowest * SAME_RATE)
        .max_by_key(|(_, r)| r.streams)
        .map(|(k, _)| k)
}
