//! The embedded store: every tenant's counts in this process, behind one lock held for a few
//! additions per admission and per settlement. Budgets are this replica's alone (with N
//! replicas, each enforces the whole budget: use Redis to share one).
//!
//! A tenant's account is kept while it counts anything; idle accounts (no stream, nothing in the
//! last two minutes, nothing today) are swept every minute, or sooner once there are many, so a
//! stream of distinct tenant names cannot grow it without bound.
//!
//! A settlement that asks for it reports the tenant's tokens of the day once charged (the
//! used-ratio gauge of `tokens_per_day`, see [`super`]).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::exchange::{Ask, Counted, Settlement, Verdict};
use super::series::BudgetSeries;
use super::window::Now;

/// Past this many accounts (or twice as many as the last sweep kept) a sweep runs at the next
/// admission rather than the next minute.
const SWEEP_AT: usize = 10_000;

/// The embedded store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// Where settlements report the tenant's day (`None`: nowhere, as in unit tests).
    series: Option<Arc<BudgetSeries>>,
}

#[derive(Debug, Default)]
struct State {
    accounts: HashMap<Arc<str>, Account>,
    /// The minute of the last sweep.
    swept: u64,
    /// Accounts that make the next admission sweep.
    sweep_at: usize,
}

/// One tenant's counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Account {
    minute: u64,
    /// Tokens of the previous and the current minute.
    tokens: [u64; 2],
    /// Requests of the previous and the current minute.
    requests: [u64; 2],
    day: u64,
    day_tokens: u64,
    streams: u64,
}

impl Account {
    /// Moves the windows to `now`'s minute and day.
    fn roll(&mut self, now: Now) {
        let minute = now.minute();
        if minute != self.minute {
            let keep = minute == self.minute + 1;
            self.tokens = [if keep { self.tokens[1] } else { 0 }, 0];
            self.requests = [if keep { self.requests[1] } else { 0 }, 0];
            self.minute = minute;
        }
        if now.day() != self.day {
            self.day = now.day();
            self.day_tokens = 0;
        }
    }

    fn counted(&self) -> Counted {
        Counted {
            tokens: self.tokens,
            requests: self.requests,
            day_tokens: self.day_tokens,
            streams: self.streams,
        }
    }

    fn idle(&self) -> bool {
        self.streams == 0
            && self.tokens == [0, 0]
            && self.requests == [0, 0]
            && self.day_tokens == 0
    }
}

impl MemoryStore {
    /// A store whose settlements report the tenant's day in `series`.
    pub fn reporting(series: Arc<BudgetSeries>) -> Self {
        Self {
            state: Mutex::default(),
            series: Some(series),
        }
    }

    pub fn admit(&self, ask: &Ask<'_>) -> Verdict {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = ask.now;
        if state.swept != now.minute() || state.accounts.len() >= state.sweep_at.max(SWEEP_AT) {
            state.sweep(now);
        }
        let account = match state.accounts.get_mut(ask.tenant) {
            Some(account) => account,
            None => state
                .accounts
                .entry(Arc::from(ask.tenant))
                .or_insert_with(|| Account {
                    minute: now.minute(),
                    day: now.day(),
                    ..Account::default()
                }),
        };
        account.roll(now);
        let counted = account.counted();
        if let Some(limit) = counted.over(ask.limits, ask.reserve, now) {
            return Verdict::Over(limit, counted);
        }
        account.tokens[1] += ask.reserve;
        account.requests[1] += 1;
        account.day_tokens += ask.reserve;
        account.streams += 1;
        Verdict::Admitted(counted)
    }

    /// Charges the difference between a request's usage and its reservation to the windows it was
    /// reserved in (a minute already out of the sliding window no longer matters), and frees its
    /// stream slot. Returns the tenant's tokens of `now`'s day after it (reported where the
    /// settlement asks), `None` when the tenant has no account (nothing to settle).
    pub fn settle(&self, settlement: &Settlement, now: Now) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let account = state.accounts.get_mut(&settlement.tenant)?;
        account.roll(now);
        // (This store always answers, so every request it settles it admitted; a hold from a
        // store that did not is charged whole, as Redis would.)
        let difference = if settlement.in_store {
            settlement.difference()
        } else {
            i64::try_from(settlement.used).unwrap_or(i64::MAX)
        };
        let adjust = |count: &mut u64| {
            *count = count.saturating_add_signed(difference);
        };
        if settlement.minute == account.minute {
            adjust(&mut account.tokens[1]);
        } else if settlement.minute + 1 == account.minute {
            adjust(&mut account.tokens[0]);
        }
        if settlement.day == account.day {
            adjust(&mut account.day_tokens);
        }
        if settlement.in_store {
            account.streams = account.streams.saturating_sub(1);
        }
        let day_tokens = account.day_tokens;
        drop(state);
        if let (Some(series), Some(report)) = (&self.series, &settlement.report) {
            report.report(series, day_tokens);
        }
        Some(day_tokens)
    }

    #[cfg(test)]
    /// Accounts kept (for tests).
    pub(crate) fn accounts(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .accounts
            .len()
    }
}

impl State {
    fn sweep(&mut self, now: Now) {
        self.accounts.retain(|_, account| {
            account.roll(now);
            !account.idle()
        });
        self.swept = now.minute();
        self.sweep_at = self.accounts.len() * 2;
    }
}
