use std::sync::Arc;
use std::time::Duration;

use super::memory::MemoryStore;
use super::window::{Now, DAY_MS, MINUTE_MS};
use super::*;
use crate::config::{Counts, Limits};

/// A minute's start, well inside a day.
const T0: u64 = 19_000 * DAY_MS + 600 * MINUTE_MS;

fn limits() -> Limits {
    Limits {
        counts: Counts::Total,
        tokens_per_minute: Some(1_000),
        ..Limits::default()
    }
}

fn ask<'a>(limits: &'a Limits, tenant: &'a str, reserve: u64, id: u64, at: u64) -> Ask<'a> {
    Ask {
        tenant,
        limits,
        reserve,
        id,
        now: Now(at),
    }
}

/// The settlement of a request admitted at `at` that reserved `reserved` and used `used`.
fn settlement(tenant: &str, at: u64, used: u64, reserved: u64, id: u64) -> Settlement {
    Settlement {
        tenant: Arc::from(tenant),
        minute: Now(at).minute(),
        day: Now(at).day(),
        used,
        reserved,
        in_store: true,
        withdrawn: false,
        id,
        report: None,
    }
}

#[test]
fn reservations_are_admitted_until_the_next_would_pass_the_limit() {
    let store = MemoryStore::default();
    let limits = limits();
    for id in 0..4 {
        assert!(
            matches!(
                store.admit(&ask(&limits, "a", 250, id, T0)),
                Verdict::Admitted(_)
            ),
            "reservation {id} of 250 fits under 1000"
        );
    }
    let Verdict::Over(limit, counted) = store.admit(&ask(&limits, "a", 1, 9, T0)) else {
        panic!("a fifth reservation passes the limit");
    };
    assert_eq!(limit, Limit::TokensPerMinute);
    assert_eq!(
        counted.tokens,
        [0, 1_000],
        "the four reservations are counted"
    );
    assert!(
        matches!(
            store.admit(&ask(&limits, "b", 1_000, 1, T0)),
            Verdict::Admitted(_)
        ),
        "another tenant has its own budget"
    );
}

#[test]
fn a_settlement_replaces_the_reservation_with_the_usage() {
    let store = MemoryStore::default();
    let limits = limits();
    assert!(matches!(
        store.admit(&ask(&limits, "a", 900, 1, T0)),
        Verdict::Admitted(_)
    ));
    // It used 150 of its 900: 750 come back.
    store.settle(&settlement("a", T0, 150, 900, 1), Now(T0 + 10));
    let Verdict::Admitted(counted) = store.admit(&ask(&limits, "a", 850, 2, T0 + 20)) else {
        panic!("850 fits once the first request settled at 150");
    };
    assert_eq!(counted.tokens, [0, 150], "the settled usage is what counts");
    // More than reserved (a prompt the estimate undercounted) is charged too.
    store.settle(&settlement("a", T0, 950, 850, 2), Now(T0 + 30));
    let Verdict::Over(_, counted) = store.admit(&ask(&limits, "a", 1, 3, T0 + 40)) else {
        panic!("the overshoot is charged");
    };
    assert_eq!(counted.tokens, [0, 1_100]);
}

#[test]
fn the_previous_minute_counts_by_its_share_and_an_old_one_not_at_all() {
    let store = MemoryStore::default();
    let limits = limits();
    assert!(matches!(
        store.admit(&ask(&limits, "a", 1_000, 1, T0)),
        Verdict::Admitted(_)
    ));
    let next = T0 + MINUTE_MS;
    assert!(
        matches!(
            store.admit(&ask(&limits, "a", 1, 2, next)),
            Verdict::Over(..)
        ),
        "at the next minute's start the last 60 s still hold 1000"
    );
    let Verdict::Admitted(counted) = store.admit(&ask(&limits, "a", 500, 3, next + 30_000)) else {
        panic!("half a minute on, half of it is out of the window");
    };
    assert_eq!(counted.tokens, [1_000, 0]);
    // A settlement of the first request now lands in the previous minute.
    store.settle(&settlement("a", T0, 0, 1_000, 1), Now(next + 30_001));
    let Verdict::Admitted(counted) = store.admit(&ask(&limits, "a", 500, 4, next + 30_002)) else {
        panic!("the first request's tokens came back");
    };
    assert_eq!(counted.tokens, [0, 500]);
    // Two minutes on, nothing of the first minute is left, and its settlement is ignored.
    store.settle(&settlement("a", T0, 5_000, 0, 1), Now(T0 + 3 * MINUTE_MS));
    let Verdict::Admitted(counted) = store.admit(&ask(&limits, "a", 1_000, 5, T0 + 3 * MINUTE_MS))
    else {
        panic!("an old minute does not count");
    };
    assert_eq!(counted.tokens, [0, 0]);
}

#[test]
fn a_day_budget_counts_the_utc_day() {
    let store = MemoryStore::default();
    let limits = Limits {
        counts: Counts::Output,
        tokens_per_day: Some(10_000),
        ..Limits::default()
    };
    for id in 0..10 {
        let at = T0 + id * 10 * MINUTE_MS;
        assert!(matches!(
            store.admit(&ask(&limits, "a", 1_000, id, at)),
            Verdict::Admitted(_)
        ));
    }
    let late = T0 + 100 * MINUTE_MS;
    let Verdict::Over(limit, counted) = store.admit(&ask(&limits, "a", 1, 11, late)) else {
        panic!("the day's 10 000 are spent");
    };
    assert_eq!(limit, Limit::TokensPerDay);
    assert_eq!(
        counted.wait(limit, &limits, 1, Now(late)),
        Some(Duration::from_millis(DAY_MS - late % DAY_MS)),
        "come back at UTC midnight"
    );
    let tomorrow = (Now(late).day() + 1) * DAY_MS;
    assert!(matches!(
        store.admit(&ask(&limits, "a", 1_000, 12, tomorrow)),
        Verdict::Admitted(_)
    ));
}

#[test]
fn streams_hold_a_slot_until_they_settle() {
    let store = MemoryStore::default();
    let limits = Limits {
        concurrent_streams: Some(2),
        requests_per_minute: Some(100),
        ..Limits::default()
    };
    for id in 0..2 {
        assert!(matches!(
            store.admit(&ask(&limits, "a", 10, id, T0)),
            Verdict::Admitted(_)
        ));
    }
    let Verdict::Over(limit, counted) = store.admit(&ask(&limits, "a", 10, 3, T0)) else {
        panic!("a third stream passes the limit of two");
    };
    assert_eq!((limit, counted.streams), (Limit::ConcurrentStreams, 2));
    store.settle(&settlement("a", T0, 0, 10, 0), Now(T0 + 1));
    assert!(
        matches!(
            store.admit(&ask(&limits, "a", 10, 4, T0 + 2)),
            Verdict::Admitted(_)
        ),
        "a settled stream frees its slot"
    );
}

#[test]
fn requests_per_minute_count_requests_not_tokens() {
    let store = MemoryStore::default();
    let limits = Limits {
        requests_per_minute: Some(3),
        ..Limits::default()
    };
    for id in 0..3 {
        assert!(matches!(
            store.admit(&ask(&limits, "a", 1_000_000, id, T0 + id)),
            Verdict::Admitted(_)
        ));
    }
    let Verdict::Over(limit, counted) = store.admit(&ask(&limits, "a", 1, 4, T0 + 10)) else {
        panic!("a fourth request in the minute");
    };
    assert_eq!(limit, Limit::RequestsPerMinute);
    let wait = counted
        .wait(limit, &limits, 1, Now(T0 + 10))
        .expect("waiting helps");
    // The three move to the previous minute, whose share must fall to 2: a third of it in.
    assert_eq!(wait, Duration::from_millis(MINUTE_MS - 10 + 20_000));
}

#[test]
fn the_order_of_the_checks_is_streams_requests_minute_day() {
    let limits = Limits {
        counts: Counts::Total,
        tokens_per_minute: Some(10),
        tokens_per_day: Some(10),
        requests_per_minute: Some(1),
        concurrent_streams: Some(1),
    };
    let full = Counted {
        tokens: [0, 10],
        requests: [0, 1],
        day_tokens: 10,
        streams: 1,
    };
    let now = Now(T0);
    assert_eq!(full.over(&limits, 1, now), Some(Limit::ConcurrentStreams));
    let counted = Counted { streams: 0, ..full };
    assert_eq!(
        counted.over(&limits, 1, now),
        Some(Limit::RequestsPerMinute)
    );
    let counted = Counted {
        requests: [0, 0],
        ..counted
    };
    assert_eq!(counted.over(&limits, 1, now), Some(Limit::TokensPerMinute));
    let counted = Counted {
        tokens: [0, 0],
        ..counted
    };
    assert_eq!(counted.over(&limits, 1, now), Some(Limit::TokensPerDay));
    assert_eq!(Counted::default().over(&limits, 10, now), None);
}

#[test]
fn a_request_larger_than_the_limit_is_told_waiting_will_not_help() {
    let limits = limits();
    let counted = Counted::default();
    assert_eq!(
        counted.wait(Limit::TokensPerMinute, &limits, 1_001, Now(T0)),
        None
    );
    let message = refusal(
        Limit::TokensPerMinute,
        &limits,
        &counted,
        1_001,
        Now(T0),
        None,
    );
    assert_eq!(
        message,
        "this request needs 1001 tokens, more than the tenant's tokens_per_minute limit of 1000; lower max_tokens or the prompt"
    );
    let message = refusal(
        Limit::TokensPerMinute,
        &limits,
        &Counted {
            tokens: [0, 900],
            ..Counted::default()
        },
        200,
        Now(T0),
        Some(Duration::from_millis(61_500)),
    );
    assert_eq!(
        message,
        "tenant budget exceeded: tokens_per_minute limit 1000, used 900, this request needs 200 tokens; retry in 61.5s"
    );
}

#[test]
fn idle_accounts_are_swept_so_many_names_stay_bounded() {
    let store = MemoryStore::default();
    let limits = Limits {
        requests_per_minute: Some(10),
        ..Limits::default()
    };
    for id in 0..20_000u64 {
        let name = format!("tenant-{id}");
        assert!(matches!(
            store.admit(&ask(&limits, &name, 0, id, T0)),
            Verdict::Admitted(_)
        ));
        store.settle(&settlement(&name, T0, 0, 0, id), Now(T0 + 1));
    }
    assert!(
        store.accounts() <= 20_000,
        "every name of this minute is counted"
    );
    // Two minutes later nobody counts anything (no stream, no request in the window): the next
    // admission sweeps them all.
    assert!(matches!(
        store.admit(&ask(&limits, "late", 0, 1, T0 + 2 * MINUTE_MS)),
        Verdict::Admitted(_)
    ));
    assert_eq!(store.accounts(), 1, "only the account in use is kept");
}

#[test]
fn a_hold_settles_its_difference_or_its_whole_usage_when_it_was_let_through_unchecked() {
    let store = Store::Memory(MemoryStore::default());
    let limits = limits();
    let Store::Memory(memory) = &store else {
        unreachable!()
    };
    let now = Now::wall();
    assert!(matches!(
        memory.admit(&ask(&limits, "a", 600, 1, now.0)),
        Verdict::Admitted(_)
    ));
    let hold = BudgetHold {
        tenant: Arc::from("a"),
        counts: Counts::Output,
        reserved: 600,
        in_store: true,
        minute: now.minute(),
        day: now.day(),
        id: 1,
    };
    // Counts output only: 20 input tokens do not count, 100 output do.
    settle_with(&store, &hold, 20, 100, None);
    let Verdict::Admitted(counted) = memory.admit(&ask(&limits, "a", 0, 2, now.0)) else {
        panic!("admitted");
    };
    // (Summed: the wall clock may cross a minute between the calls.)
    assert_eq!(counted.tokens.iter().sum::<u64>(), 100);
    let unchecked = BudgetHold {
        in_store: false,
        id: 3,
        ..hold
    };
    settle_with(&store, &unchecked, 20, 100, None);
    let Verdict::Admitted(counted) = memory.admit(&ask(&limits, "a", 0, 4, now.0)) else {
        panic!("admitted");
    };
    assert_eq!(
        counted.tokens.iter().sum::<u64>(),
        200,
        "the unchecked request's whole usage"
    );
}

/// The `tokens_per_day` used ratio of `tenant` in `metrics`.
fn day_ratio(metrics: &crate::metrics::Metrics, tenant: &str) -> Option<f64> {
    crate::metrics::exposition::samples(&metrics.render())
        .into_iter()
        .find(|sample| {
            sample.name == series::USED_RATIO
                && sample.labels.get("tenant").map(String::as_str) == Some(tenant)
                && sample.labels.get("limit").map(String::as_str) == Some("tokens_per_day")
        })
        .map(|sample| sample.value)
}

#[test]
fn a_settlement_reports_the_tenants_day_as_charged() {
    let metrics =
        Arc::new(crate::metrics::Metrics::new(&crate::config::Config::default()).expect("metrics"));
    let series = Arc::new(BudgetSeries::new(Arc::clone(&metrics), false));
    let store = MemoryStore::reporting(Arc::clone(&series));
    let limits = Limits {
        counts: Counts::Output,
        tokens_per_day: Some(200),
        ..Limits::default()
    };
    let report = DayReport {
        label: Arc::from("team-a"),
        limit: 200,
    };
    // Three requests reserve 50 each and use 62: the day's count after each settlement is the
    // exact usage so far, whatever was reserved.
    for id in 0..3u64 {
        assert!(matches!(
            store.admit(&ask(&limits, "team-a", 50, id, T0 + id)),
            Verdict::Admitted(_)
        ));
        let settled = Settlement {
            report: Some(report.clone()),
            ..settlement("team-a", T0 + id, 62, 50, id)
        };
        assert_eq!(
            store.settle(&settled, Now(T0 + id)),
            Some(62 * (id + 1)),
            "the day's tokens after settlement {id}"
        );
        assert_eq!(
            day_ratio(&metrics, "team-a"),
            Some(62.0 * (id + 1) as f64 / 200.0),
            "reported after settlement {id}"
        );
    }
    // A settlement without a report (a revision without a day limit) leaves the gauge alone.
    assert!(matches!(
        store.admit(&ask(&limits, "team-a", 0, 9, T0 + 10)),
        Verdict::Admitted(_)
    ));
    store.settle(&settlement("team-a", T0 + 10, 1, 0, 9), Now(T0 + 10));
    assert_eq!(day_ratio(&metrics, "team-a"), Some(186.0 / 200.0));
}
