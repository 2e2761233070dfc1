//! What a session run measured beyond the usual summary: one row per turn index, and how much of
//! the prompts the server's prefix cache served.
//!
//! Turn rows are what prefix-cache-aware routing is judged by: turn 1 can only reuse a shared
//! system prompt, later turns can reuse their whole history, if they land where it is cached.
//! Turns from [`GROUPED_FROM_TURN`] on share one row (`8+`), so a long tail of turns does not make
//! a long table.
//!
//! The cached ratio is `sum(cached tokens) / sum(prompt tokens)` over the successful requests that
//! reported a cache figure (see [`RequestRecord::usage_cached_tokens`]); with none it is absent
//! (`-` in the table), never a misleading 0.
use serde::{Deserialize, Serialize};

use super::client::RequestRecord;
use super::stats::Summary;
use super::workload::session::SessionWorkload;

/// Turns from this index on share one row.
pub const GROUPED_FROM_TURN: u32 = 8;

/// The row a turn index belongs to: itself, or [`GROUPED_FROM_TURN`] for that turn and later.
pub fn turn_row(turn: u32) -> u32 {
    turn.min(GROUPED_FROM_TURN)
}

/// Cached and prompt tokens of the successful requests that reported a cache figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CacheTally {
    /// Successful requests with a cache figure.
    pub requests: u64,
    pub cached_tokens: u64,
    /// Their prompt tokens (`usage.prompt_tokens`, else the words sent).
    pub prompt_tokens: u64,
}

impl CacheTally {
    /// Counts `r` if it succeeded and reported a cache figure.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(cached) = r.usage_cached_tokens.filter(|_| r.outcome.is_ok()) else {
            return;
        };
        self.requests += 1;
        self.cached_tokens += cached;
        self.prompt_tokens += r.usage_prompt_tokens.unwrap_or(u64::from(r.prompt_words));
    }

    /// `cached_tokens / prompt_tokens`, or `None` when no request reported a figure.
    pub fn ratio(&self) -> Option<f64> {
        (self.requests > 0 && self.prompt_tokens > 0)
            .then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }

    /// The tally of `records`.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Self {
        let mut tally = CacheTally::default();
        records.into_iter().for_each(|r| tally.add(r));
        tally
    }
}

/// One turn index (or the `8+` group). Latency and token summaries cover successful requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStats {
    /// The turn index, from 1; with `and_later`, this turn and every later one.
    pub turn: u32,
    pub and_later: bool,
    /// Requests that ended, successful or not.
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub ttft: Summary,
    /// N_in per request (tokens; from usage, else the words sent).
    pub prompt_tokens: Summary,
    pub cache: CacheTally,
    /// `cache.cached_tokens / cache.prompt_tokens`; `null` when no request reported a figure.
    pub cached_ratio: Option<f64>,
}

impl TurnStats {
    /// `"3"`, or `"8+"` for the grouped row.
    pub fn label(&self) -> String {
        if self.and_later {
            format!("{}+", self.turn)
        } else {
            self.turn.to_string()
        }
    }

    fn of<'a>(turn: u32, records: impl IntoIterator<Item = &'a RequestRecord>) -> Self {
        let (mut requests, mut ok, mut ttft, mut prompt) = (0, 0, Vec::new(), Vec::new());
        let mut cache = CacheTally::default();
        for r in records {
            requests += 1;
            cache.add(r);
            if r.outcome.is_ok() {
                ok += 1;
                ttft.extend(r.ttft_s);
                prompt.push(r.usage_prompt_tokens.unwrap_or(u64::from(r.prompt_words)) as f64);
            }
        }
        TurnStats {
            turn,
            and_later: turn == GROUPED_FROM_TURN,
            requests,
            ok,
            errors: requests - ok,
            ttft: Summary::of(ttft),
            prompt_tokens: Summary::of(prompt),
            cached_ratio: cache.ratio(),
            cache,
        }
    }
}

/// One row per turn index that occurs in `records` (those without a turn are not session
/// requests and are skipped), in turn order, later turns grouped.
pub fn by_turn(records: &[RequestRecord]) -> Vec<TurnStats> {
    let rows: std::collections::BTreeSet<u32> = records
        .iter()
        .filter_map(|r| r.turn)
        .map(turn_row)
        .collect();
    rows.into_iter()
        .map(|row| {
            let of_row = records.iter().filter(|r| r.turn.map(turn_row) == Some(row));
            TurnStats::of(row, of_row)
        })
        .collect()
}

/// The `sessions` object of the JSON report: the workload, the session counts, the cache and
/// the turn rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionResults {
    pub workload: SessionWorkload,
    /// The header that carried the session id, if any.
    pub session_header: Option<String>,
    /// Sessions started.
    pub started: u64,
    /// Sessions whose every turn succeeded (a failed turn ends its session: there is no reply
    /// to send back).
    pub completed: u64,
    /// Over every turn.
    pub cache: CacheTally,
    pub cached_ratio: Option<f64>,
    pub by_turn: Vec<TurnStats>,
}

impl SessionResults {
    /// Summarises a run's records.
    pub fn new(
        workload: SessionWorkload,
        session_header: Option<String>,
        (started, completed): (u64, u64),
        records: &[RequestRecord],
    ) -> Self {
        let cache = CacheTally::of(records.iter().filter(|r| r.turn.is_some()));
        SessionResults {
            workload,
            session_header,
            started,
            completed,
            cached_ratio: cache.ratio(),
            cache,
            by_turn: by_turn(records),
        }
    }
}

#[cfg(test)]
mod tests;
