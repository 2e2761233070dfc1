//! The gate's waits, on paused time: the gate reads `tokio::time::Instant` and its release task
//! sleeps on tokio's timer, so with the clock paused it moves only when every task waits. A wait is
//! then exactly what the gate decided (its deadline, rounded up to the release tick), a backend's
//! queue drains only as far as the clock says (`Backend::load`), and a loaded machine can stretch
//! neither.
use std::time::Duration;

use http::HeaderMap;

use super::*;
use crate::config::{BalanceLoad, Config, PoolConfig};
use crate::request::PromptSize;
use crate::route::placement::designate::{DEMAND_WINDOW, REFRESH};
use crate::route::placement::tests::teach_curve;
use crate::route::record::Estimate;
use crate::tenant::record::TenantRecord;

/// How long a test waits for the release task before it calls a wait lost (on the paused clock:
/// it passes in no time once nothing else can happen).
const PATIENCE: Duration = Duration::from_secs(5);

struct Fixture {
    gate: Arc<Gate>,
    pool: Arc<Members>,
    metrics: Metrics,
}

/// A gate over one backend taught to prefill 10 000 tokens/s after 20 ms, and to decode at
/// `10 ms + 2 ms` per stream in its batch (so 12 streams meet a 35 ms TPOT target and 13 miss).
fn fixture(ttft_target: Duration, queue: QueueConfig) -> Fixture {
    fixture_of(ttft_target, queue, false)
}

/// [`fixture`], its placement designating prefill-heavy replicas when `designates`.
fn fixture_of(ttft_target: Duration, queue: QueueConfig, designates: bool) -> Fixture {
    let pool_config = PoolConfig {
        name: "p".to_owned(),
        urls: vec!["http://127.0.0.1:9".to_owned()],
        balance: BalanceLoad::Slo,
        ..PoolConfig::default()
    };
    let pool = Arc::new(Members::new(&pool_config, None, None).expect("valid pool"));
    let mut config = Config::default();
    config.slo.ttft = ttft_target;
    config.slo.tpot = Duration::from_millis(35);
    let metrics = Metrics::new(&config).expect("default buckets");
    let slo = Arc::new(PoolSlo::new(0, "p", &config, designates, None));
    teach_curve(&pool.backends()[0], 10_000.0, 0.020, 13, |streams| {
        0.010 + 0.002 * (streams + 1) as f64
    });
    let gate = Arc::new(Gate::new(
        Arc::clone(&pool),
        slo,
        None,
        queue,
        Some(&metrics),
    ));
    Fixture {
        gate,
        pool,
        metrics,
    }
}

impl Fixture {
    /// `n` streams on the backend, each with `prompt_tokens` not yet prefilled.
    fn load(&self, n: usize, prompt_tokens: u64) -> Vec<LoadGuard> {
        let backend = &self.pool.backends()[0];
        (0..n)
            .map(|_| LoadGuard::new(Arc::clone(backend), prompt_tokens))
            .collect()
    }

    /// `tokenmeter_queue_exits_total{exit}` of the pool.
    fn exits(&self, exit: &str) -> u64 {
        let text = self.metrics.render();
        let wanted = format!("exit=\"{exit}\"");
        text.lines()
            .filter(|line| {
                line.starts_with("tokenmeter_queue_exits_total") && line.contains(&wanted)
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    fn depth(&self) -> usize {
        self.gate.lock().len()
    }
}

fn request(prompt_tokens: u64) -> RequestContext {
    let mut context = RequestContext::new(Instant::now(), None);
    context.route.estimate = Some(Estimate {
        size: PromptSize::default(),
        tokens: prompt_tokens,
    });
    context
}

/// The admission of a request that entered, within [`PATIENCE`].
async fn answer(entered: tokio::task::JoinHandle<Admission>) -> Admission {
    tokio::time::timeout(PATIENCE, entered)
        .await
        .expect("answered")
        .expect("no panic")
}

/// A request head with one header.
fn header(name: &'static str, value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(name, value.parse().expect("a header value"));
    headers
}

fn enter(
    gate: &Arc<Gate>,
    prompt_tokens: u64,
    headers: HeaderMap,
) -> tokio::task::JoinHandle<Admission> {
    let gate = Arc::clone(gate);
    tokio::spawn(async move {
        let context = request(prompt_tokens);
        gate.enter(&context, AffinityKeys::default(), &headers)
            .await
    })
}

/// Lets `n` release ticks pass. The clock is paused: it moves to the next timer only once every
/// task waits, so when this returns the release task has run at each of those ticks (this is the
/// clock advancing, not a wait for another task).
async fn ticks(n: u32) {
    tokio::time::sleep(TICK * n).await;
}

/// Lets a few release ticks pass and checks that `waiting`, the one request in the gate, still
/// waits there unanswered (`why` says why it should).
async fn waits_on(fixture: &Fixture, waiting: &tokio::task::JoinHandle<Admission>, why: &str) {
    ticks(4).await;
    assert!(still_waiting(fixture, 1), "{why}");
    assert!(!waiting.is_finished(), "no answer while it waits");
}

/// The first release tick at or after `deadline` from a request's arrival: when the release task
/// (ticking every [`TICK`] from the arrival, which started it) sees the deadline passed.
fn first_tick_at(deadline: Duration) -> Duration {
    let ticks = deadline.as_nanos().div_ceil(TICK.as_nanos());
    TICK * u32::try_from(ticks).expect("a few ticks")
}

/// What the gate gives a request of `prompt_tokens` arriving now to wait: half its slack,
/// `(target - alone) / 2`, from the placement the gate makes at its arrival.
fn budget_of(fixture: &Fixture, prompt_tokens: u64) -> Duration {
    let now = Instant::now();
    let context = request(prompt_tokens);
    let placed = fixture
        .gate
        .place(&AffinityKeys::default(), Demand::of(&context, now), now)
        .expect("one backend");
    placed.ttft_target.saturating_sub(placed.alone) / 2
}

/// Waits until `n` entries wait in the gate.
async fn queued(fixture: &Fixture, n: usize) {
    let deadline = Instant::now() + PATIENCE;
    while fixture.depth() != n {
        assert!(
            Instant::now() < deadline,
            "{} queued, not {n}",
            fixture.depth()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_that_can_meet_its_targets_goes_at_once() {
    let fixture = fixture(Duration::from_millis(800), QueueConfig::default());
    let _streams = fixture.load(5, 0);
    let admission = enter(&fixture.gate, 1_000, HeaderMap::new())
        .await
        .expect("no panic");
    let Admission::Placed { placed, guard, .. } = admission else {
        panic!("not placed: {admission:?}");
    };
    assert!(placed.met, "predicted to meet both targets");
    assert!(
        guard.is_none(),
        "the dispatch counts a direct request's load"
    );
    // 20 ms + 1 000 tokens at 10 000/s.
    let ttft = placed.prediction.ttft.as_secs_f64();
    assert!((ttft - 0.120).abs() < 0.005, "predicted {ttft}");
    assert_eq!(fixture.exits("direct"), 1, "it went at once");
    assert_eq!(fixture.depth(), 0, "nothing queued");
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_while_the_streams_there_would_miss_then_goes_when_they_end() {
    let fixture = fixture(Duration::from_secs(5), QueueConfig::default());
    let mut streams = fixture.load(13, 0);
    let waiting = enter(&fixture.gate, 500, HeaderMap::new());
    queued(&fixture, 1).await;
    // Still waiting a few ticks later, and after a release of our own: a 14th stream would decode
    // at 38 ms.
    waits_on(
        &fixture,
        &waiting,
        "not released where it would miss its TPOT target",
    )
    .await;
    streams.truncate(11);
    let admission = answer(waiting).await;
    let Admission::Placed { placed, guard, .. } = admission else {
        panic!("not placed: {admission:?}");
    };
    assert!(placed.met, "released where it meets both targets");
    assert_eq!(
        placed.prediction.streams, 11,
        "predicted beside the 11 left"
    );
    let backend = &fixture.pool.backends()[0];
    assert!(
        guard.is_some(),
        "the gate counted its load when it released it"
    );
    assert_eq!(backend.streams(), 12, "its stream counted at once");
    assert_eq!(backend.queued_tokens(), 500, "its prompt counted at once");
    drop(guard);
    assert_eq!(backend.streams(), 11, "the guard takes its stream back");
    assert_eq!(fixture.exits("placed"), 1, "one release");
    assert_eq!(fixture.depth(), 0, "nothing queued");
}

#[tokio::test(start_paused = true)]
async fn a_request_no_backend_serves_in_time_waits_until_it_cannot_then_is_shed_or_sent() {
    for (on_deadline, expected) in [
        (OnDeadline::Shed, "shed_deadline"),
        (OnDeadline::Send, "late"),
    ] {
        let queue = QueueConfig {
            on_deadline,
            ..QueueConfig::default()
        };
        let fixture = fixture(Duration::from_millis(300), queue);
        // 9 000 tokens queued ahead: 20 ms + 0.95 s to a 500-token prompt's first token, which
        // alone would take 70 ms. It waits for the backend to drain for half its slack,
        // (300 - 70) / 2 ms, not less.
        let _streams = fixture.load(1, 9_000);
        let budget = budget_of(&fixture, 500);
        assert!(
            budget.abs_diff(Duration::from_millis(115)) < Duration::from_millis(1),
            "(300 - 70) / 2 ms by the learned model: {budget:?}"
        );
        let started = Instant::now();
        let admission = enter(&fixture.gate, 500, HeaderMap::new())
            .await
            .expect("no panic");
        let waited = started.elapsed();
        // The backend drains with the clock, but to 1 150 queued tokens (a first token within
        // (300 + 70) / 2 ms) only after 0.78 s: the deadline comes first.
        assert_eq!(
            waited,
            first_tick_at(budget),
            "it waits out its deadline, {budget:?}, to the release tick, and no longer"
        );
        match on_deadline {
            OnDeadline::Shed => assert!(
                matches!(admission, Admission::Shed("deadline")),
                "shed at its deadline: {admission:?}"
            ),
            OnDeadline::Send => assert!(
                matches!(admission, Admission::Late),
                "sent late at its deadline: {admission:?}"
            ),
        }
        assert_eq!(fixture.exits(expected), 1, "its exit is counted");
        assert_eq!(fixture.depth(), 0, "nothing queued");
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_is_released_only_into_half_its_slack() {
    let fixture = fixture(Duration::from_millis(800), QueueConfig::default());
    // 13 streams (a 14th would decode at 38 ms), two of them with 2 500 tokens to prefill.
    let mut streams = fixture.load(11, 0);
    let prefilling = fixture.load(2, 2_500);
    let started = Instant::now();
    let waiting = enter(&fixture.gate, 500, HeaderMap::new());
    queued(&fixture, 1).await;
    // Two streams end: it would decode at 34 ms, and a fresh request would meet 800 ms (0.57 s
    // to its first token). A waiting one is held to (0.8 + 0.07) / 2 = 0.435 s: it waits on.
    // (The prefills drain with the clock, to 3 650 tokens, which a waiting request meets, only
    // after 135 ms; a few ticks pass here.)
    streams.truncate(9);
    waits_on(
        &fixture,
        &waiting,
        "not released into room for a fresh request",
    )
    .await;
    // The prefills finish (0.07 s): released, and whatever it waited (at most (0.8 - 0.07) / 2)
    // it is predicted to meet its target.
    drop(prefilling);
    let admission = answer(waiting).await;
    let waited = started.elapsed();
    let Admission::Placed { placed, .. } = admission else {
        panic!("not placed: {admission:?}");
    };
    assert!(placed.met, "predicted to meet its targets where it went");
    assert_eq!(
        placed.prediction.queued_tokens, 0,
        "released onto the drained backend"
    );
    let budget = placed.ttft_target.saturating_sub(placed.alone) / 2;
    assert!(
        waited <= budget,
        "it waited {waited:?}, within half its slack ({budget:?})"
    );
    let first_token = waited + placed.prediction.ttft;
    assert!(
        first_token < Duration::from_millis(800),
        "its wait and its predicted first token meet the target: {waited:?} + {:?}",
        placed.prediction.ttft
    );
    assert_eq!(fixture.exits("placed"), 1, "one release");
}

#[tokio::test(start_paused = true)]
async fn a_long_prompt_is_held_to_its_own_prefill_not_shed() {
    let fixture = fixture(Duration::from_millis(800), QueueConfig::default());
    // 12 000 tokens take 1.22 s alone: held to 1.83 s, which 4 000 queued tokens (1.62 s) meet.
    let _streams = fixture.load(1, 4_000);
    let admission = enter(&fixture.gate, 12_000, HeaderMap::new())
        .await
        .expect("no panic");
    let Admission::Placed { placed, .. } = admission else {
        panic!("not placed: {admission:?}");
    };
    assert!(placed.met, "placed: its own prefill sets its target");
    let target = placed.ttft_target.as_secs_f64();
    assert!((target - 1.83).abs() < 0.01, "held to {target}");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_whose_deadline_passes_is_shed() {
    let fixture = fixture(Duration::from_millis(200), QueueConfig::default());
    let _streams = fixture.load(13, 0);
    // Its own first token takes 20 ms + 50 ms for its 500 tokens, so its slack to a 200 ms target
    // is 130 ms: it leaves after half of it, 65 ms of waiting, not before, and not at 130 ms.
    let budget = budget_of(&fixture, 500);
    assert!(
        budget.abs_diff(Duration::from_millis(65)) < Duration::from_millis(1),
        "(200 - 70) / 2 ms by the learned model: {budget:?}"
    );
    let started = Instant::now();
    let admission = answer(enter(&fixture.gate, 500, HeaderMap::new())).await;
    assert!(
        matches!(admission, Admission::Shed("deadline")),
        "shed at its deadline: {admission:?}"
    );
    let waited = started.elapsed();
    assert_eq!(
        waited,
        first_tick_at(budget),
        "it leaves at the release tick that finds its deadline ({budget:?}) passed"
    );
    assert_eq!(fixture.exits("shed_deadline"), 1, "its exit is counted");
    assert_eq!(fixture.depth(), 0, "nothing queued");
}

/// Enters a request of `prompt_tokens` and checks the gate sheds it at its deadline.
async fn shed_at_deadline(fixture: &Fixture, prompt_tokens: u64) {
    let admission = answer(enter(&fixture.gate, prompt_tokens, HeaderMap::new())).await;
    assert!(
        matches!(admission, Admission::Shed("deadline")),
        "shed: {admission:?}"
    );
}

/// The designation's demand once the next placement due a refresh has folded in what came.
async fn demand_after_refresh(fixture: &Fixture) -> crate::route::placement::designate::Demand {
    tokio::time::sleep(REFRESH).await;
    budget_of(fixture, 500);
    let designation = fixture.gate.slo.designation.as_ref().expect("designates");
    designation.demand()
}

#[tokio::test(start_paused = true)]
async fn a_long_prompt_shed_at_its_deadline_counts_in_the_designations_demand() {
    let fixture = fixture_of(Duration::from_millis(800), QueueConfig::default(), true);
    // 13 streams: a 14th misses the TPOT target, so the document waits until its deadline.
    let _streams = fixture.load(13, 0);
    let arrived = Instant::now();
    shed_at_deadline(&fixture, 6_000).await;
    // The next placement due a refresh folds it in: 6 000 tokens over the time since the first
    // look (the document's arrival), into the 2 s moving rate.
    let demand = demand_after_refresh(&fixture).await;
    let span = arrived.elapsed().as_secs_f64();
    let expected = 6_000.0 / span * (1.0 - (-span / DEMAND_WINDOW.as_secs_f64()).exp());
    assert!(
        (demand.tokens - expected).abs() < 1.0,
        "the shed document is demand: {} tokens/s, not {expected}",
        demand.tokens
    );
    assert_eq!(
        demand.chat_tokens, 0.0,
        "a placement the gate only predicts is not"
    );
}

#[tokio::test(start_paused = true)]
async fn a_chat_no_replica_serves_in_time_counts_as_a_miss_for_the_designation() {
    let fixture = fixture_of(Duration::from_millis(800), QueueConfig::default(), true);
    let admission = answer(enter(&fixture.gate, 100, HeaderMap::new())).await;
    assert!(
        matches!(admission, Admission::Placed { .. }),
        "placed at once: {admission:?}"
    );
    let demand = demand_after_refresh(&fixture).await;
    assert_eq!(demand.chat_misses, 0.0, "served in time");
    // 13 streams: a 14th misses the TPOT target, so the next chat waits until its deadline.
    let _streams = fixture.load(13, 0);
    shed_at_deadline(&fixture, 100).await;
    let demand = demand_after_refresh(&fixture).await;
    // One miss, folded at one of the refreshes since into the 2 s moving rate: more than none,
    // less than one per refresh.
    assert!(
        demand.chat_misses > 0.0 && demand.chat_misses < 1.0 / REFRESH.as_secs_f64(),
        "the chat that waited is a miss: {} a second",
        demand.chat_misses
    );
    assert_eq!(demand.tokens, 0.0, "a chat is not a long prompt");
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_sheds_the_next_request() {
    let queue = QueueConfig {
        capacity: 2,
        ..QueueConfig::default()
    };
    let fixture = fixture(Duration::from_secs(5), queue);
    let _streams = fixture.load(13, 0);
    let first = enter(&fixture.gate, 100, HeaderMap::new());
    let second = enter(&fixture.gate, 100, HeaderMap::new());
    queued(&fixture, 2).await;
    let third = enter(&fixture.gate, 100, HeaderMap::new())
        .await
        .expect("no panic");
    assert!(
        matches!(third, Admission::Shed("full")),
        "a full queue sheds: {third:?}"
    );
    assert_eq!(fixture.exits("shed_full"), 1, "its exit is counted");
    first.abort();
    second.abort();
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_takes_its_entry_out() {
    let fixture = fixture(Duration::from_secs(5), QueueConfig::default());
    let mut streams = fixture.load(13, 0);
    let leaving = enter(&fixture.gate, 100, HeaderMap::new());
    queued(&fixture, 1).await;
    leaving.abort();
    assert!(
        leaving.await.is_err_and(|e| e.is_cancelled()),
        "the waiting task was cancelled"
    );
    assert_eq!(fixture.depth(), 0, "its entry left with it");
    assert_eq!(fixture.exits("cancelled"), 1, "its exit is counted");
    // The capacity it held is not given to anyone: the next request goes alone.
    streams.truncate(11);
    let next = enter(&fixture.gate, 100, HeaderMap::new())
        .await
        .expect("no panic");
    assert!(
        matches!(next, Admission::Placed { guard: None, .. }),
        "it goes at once: {next:?}"
    );
    assert_eq!(
        fixture.pool.backends()[0].streams(),
        11,
        "nothing was released for the one that left"
    );
}

#[tokio::test(start_paused = true)]
async fn the_queue_releases_by_priority_and_only_as_capacity_frees() {
    let queue = QueueConfig {
        priority_header: Some(http::HeaderName::from_static("x-priority")),
        ..QueueConfig::default()
    };
    let fixture = fixture(Duration::from_secs(5), queue);
    let mut streams = fixture.load(13, 0);
    let with_priority = |p: &str| header("x-priority", p);
    let low = enter(&fixture.gate, 100, with_priority("1"));
    queued(&fixture, 1).await;
    let high = enter(&fixture.gate, 100, with_priority("9"));
    queued(&fixture, 2).await;
    // Room for one: the later, higher-priority request goes; the other waits on.
    streams.truncate(11);
    let admission = answer(high).await;
    assert!(released(&admission));
    waits_on(
        &fixture,
        &low,
        "no room for the lower priority while the other holds it",
    )
    .await;
    drop(admission);
    let admission = answer(low).await;
    assert!(released(&admission));
}

#[test]
fn the_tenant_is_the_named_one_else_the_header_else_shared() {
    let queue = by_team();
    let fixture = fixture(Duration::from_secs(1), queue);
    let mut headers = HeaderMap::new();
    let mut context = request(10);
    assert_eq!(&*fixture.gate.tenant(&context, &headers), "anonymous");
    headers.insert("x-team", "search".parse().expect("a header value"));
    assert_eq!(&*fixture.gate.tenant(&context, &headers), "search");
    context.tenant = Some(TenantRecord {
        label: Arc::from("other"),
        name: Some(Arc::from("tenant-9999")),
        tracked: false,
    });
    assert_eq!(&*fixture.gate.tenant(&context, &headers), "tenant-9999");
    let long = "x".repeat(1_000);
    headers.insert("x-team", long.parse().expect("a header value"));
    context.tenant = Some(TenantRecord {
        label: Arc::from("other"),
        name: None,
        tracked: false,
    });
    assert_eq!(fixture.gate.tenant(&context, &headers).len(), 256);
}

#[tokio::test(start_paused = true)]
async fn a_tenant_that_floods_does_not_go_before_a_quiet_one() {
    let queue = by_team();
    let fixture = fixture(Duration::from_secs(5), queue);
    let mut streams = fixture.load(13, 0);
    let flood: Vec<_> = (0..6)
        .map(|_| enter(&fixture.gate, 200, team("flood")))
        .collect();
    queued(&fixture, 6).await;
    let quiet = enter(&fixture.gate, 200, team("quiet"));
    queued(&fixture, 7).await;
    // Room for two: one of each tenant, though six of the flood's arrived first.
    streams.truncate(10);
    let admission = answer(quiet).await;
    assert!(released(&admission));
    queued(&fixture, 5).await;
    // A few ticks, then a release of our own: nothing more goes, and the one of the flood that
    // went has its answer (its task ran while the clock waited for it).
    ticks(4).await;
    assert!(still_waiting(&fixture, 5), "no room for a third");
    assert_eq!(
        flood.iter().filter(|task| task.is_finished()).count(),
        1,
        "one of the flood went, with the quiet one"
    );
    for task in flood {
        task.abort();
    }
}

/// A gate holding equal shares between `x-team`s at an 800 ms TTFT target, over a backend with
/// 3 000 tokens to prefill (a 200-token request's first token in 0.34 s: room, not ample room),
/// and the share slots of three 200-token requests placed there at once: `quiet`'s, then two of
/// `flood`'s.
async fn shared_with_a_flood() -> (Fixture, Vec<LoadGuard>, Vec<ShareSlot>) {
    let queue = QueueConfig {
        equal_shares: true,
        ..by_team()
    };
    let fixture = fixture(Duration::from_millis(800), queue);
    let prefill = fixture.load(1, 3_000);
    let mut held = Vec::new();
    for tenant in ["quiet", "flood", "flood"] {
        let admission = answer(enter(&fixture.gate, 200, team(tenant))).await;
        let Admission::Placed { slot, .. } = admission else {
            panic!("{tenant} not placed: {admission:?}");
        };
        held.push(slot.expect("a share slot"));
    }
    (fixture, prefill, held)
}

/// A queue whose tenants are named by `x-team`.
fn by_team() -> QueueConfig {
    QueueConfig {
        tenant_header: Some(http::HeaderName::from_static("x-team")),
        ..QueueConfig::default()
    }
}

fn team(name: &str) -> HeaderMap {
    header("x-team", name)
}

/// Whether `admission` is a placement the gate released from its queue (those carry the load
/// guard the gate took for the request when it released it).
fn released(admission: &Admission) -> bool {
    matches!(admission, Admission::Placed { guard: Some(_), .. })
}

/// Runs a release now; whether `n` entries still wait after it.
fn still_waiting(fixture: &Fixture, n: usize) -> bool {
    fixture.gate.release(Instant::now());
    fixture.depth() == n
}

#[tokio::test(start_paused = true)]
async fn a_tenant_over_its_share_goes_only_into_ample_room() {
    let (fixture, prefill, held) = shared_with_a_flood().await;
    // 200 prompt tokens and 256 output tokens each.
    assert_eq!(fixture.gate.shares.of("flood"), 912);
    assert_eq!(fixture.gate.shares.of("quiet"), 456);
    // The flood holds 912 of 1 824 tokens with a third request: its half already, so over its
    // share, it goes only to a backend with no prefill queued and its TPOT within 17.5 ms.
    let waiting = enter(&fixture.gate, 200, team("flood"));
    queued(&fixture, 1).await;
    assert!(still_waiting(&fixture, 1), "0.34 s is room, not ample room");
    // The prefill ends (nothing queued), but four streams decode there: a TPOT of 10 + 2 x 5 = 20 ms.
    let mut decoding = fixture.load(4, 0);
    drop(prefill);
    assert!(
        still_waiting(&fixture, 1),
        "20 ms is within 35, not within half of it"
    );
    // Two of them end: 16 ms.
    decoding.truncate(2);
    let admission = answer(waiting).await;
    assert!(
        matches!(
            admission,
            Admission::Placed {
                guard: Some(_),
                slot: Some(_),
                ..
            }
        ),
        "{admission:?}"
    );
    assert_eq!(fixture.gate.shares.of("flood"), 1_368);
    assert_eq!(fixture.exits("direct"), 3);
    assert_eq!(fixture.exits("placed"), 1);
    drop(admission);
    drop(held);
    assert_eq!(
        fixture.gate.shares.of("flood"),
        0,
        "slots end with the streams"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tenant_under_its_share_goes_at_once_while_the_flood_waits() {
    // (Without shares, a quiet tenant's request queues behind whatever waits: see
    // a_tenant_that_floods_does_not_go_before_a_quiet_one.)
    let (fixture, _prefill, _held) = shared_with_a_flood().await;
    // Over its share, the flood's third waits for ample room.
    let waiting = enter(&fixture.gate, 200, team("flood"));
    queued(&fixture, 1).await;
    // Under its share, the quiet tenant goes at once though the flood waits.
    let quiet = answer(enter(&fixture.gate, 200, team("quiet"))).await;
    assert!(
        matches!(quiet, Admission::Placed { guard: None, .. }),
        "{quiet:?}"
    );
    assert_eq!(fixture.exits("direct"), 4);
    assert_eq!(fixture.gate.shares.of("quiet"), 912);
    // Now the flood holds 912 of 1 824 tokens: under half with its next, which is released.
    let admission = answer(waiting).await;
    assert!(released(&admission), "{admission:?}");
    assert_eq!(fixture.exits("placed"), 1);
    assert_eq!(fixture.gate.shares.of("flood"), 1_368);
}

/// A gate over two backends taught as [`fixture`]'s, the first designated prefill-heavy when
/// `designated` (by hand: no designation runs to undo it); the first full of streams (a 14th
/// misses the TPOT target) and the second with 4 000 prompt tokens queued (a chat's first token
/// in about 430 ms, a 6 000-token document's in about 1 s, past its target).
fn crowded_pair(designated: bool) -> (Fixture, Vec<LoadGuard>) {
    let pool_config = PoolConfig {
        name: "p".to_owned(),
        urls: vec![
            "http://127.0.0.1:9".to_owned(),
            "http://127.0.0.1:10".to_owned(),
        ],
        balance: BalanceLoad::Slo,
        ..PoolConfig::default()
    };
    let pool = Arc::new(Members::new(&pool_config, None, None).expect("valid pool"));
    let mut config = Config::default();
    config.slo.ttft = Duration::from_millis(800);
    config.slo.tpot = Duration::from_millis(35);
    let metrics = Metrics::new(&config).expect("default buckets");
    let slo = Arc::new(PoolSlo::new(0, "p", &config, false, None));
    for backend in pool.backends().iter() {
        teach_curve(backend, 10_000.0, 0.020, 13, |streams| {
            0.010 + 0.002 * (streams + 1) as f64
        });
    }
    let backends = pool.backends();
    backends[0].designate(designated, Duration::ZERO);
    let mut load: Vec<LoadGuard> = (0..13)
        .map(|_| LoadGuard::new(Arc::clone(&backends[0]), 0))
        .collect();
    load.push(LoadGuard::new(Arc::clone(&backends[1]), 4_000));
    let gate = Arc::new(Gate::new(
        Arc::clone(&pool),
        slo,
        None,
        QueueConfig::default(),
        Some(&metrics),
    ));
    let fixture = Fixture {
        gate,
        pool,
        metrics,
    };
    (fixture, load)
}

#[tokio::test(start_paused = true)]
async fn a_chat_does_not_wait_behind_a_long_prompt_that_waits_for_a_designated_replica() {
    let (fixture, _load) = crowded_pair(true);
    let document = enter(&fixture.gate, 6_000, HeaderMap::new());
    queued(&fixture, 1).await;
    // The designated replica has no room for the document's streams, and the other must not take
    // it: it waits, in the long prompts' lane.
    let chat = answer(enter(&fixture.gate, 100, HeaderMap::new())).await;
    let Admission::Placed { placed, .. } = chat else {
        panic!("the chat goes at once: {chat:?}");
    };
    assert!(
        Arc::ptr_eq(&placed.backend, &fixture.pool.backends()[1]),
        "to the replica with room"
    );
    assert_eq!(fixture.exits("direct"), 1, "past the waiting document");
    assert!(still_waiting(&fixture, 1), "the document still waits");
    assert!(!document.is_finished());
    document_shed_at_its_deadline(document).await;
}

#[tokio::test(start_paused = true)]
async fn with_no_replica_designated_a_chat_waits_behind_the_long_prompt_before_it() {
    let (fixture, _load) = crowded_pair(false);
    let document = enter(&fixture.gate, 6_000, HeaderMap::new());
    queued(&fixture, 1).await;
    // The document waits for room on either replica: a chat let past it would take that room.
    let chat = enter(&fixture.gate, 100, HeaderMap::new());
    queued(&fixture, 2).await;
    ticks(4).await;
    assert!(!chat.is_finished(), "the chat waits behind the document");
    document_shed_at_its_deadline(document).await;
    let chat = answer(chat).await;
    assert!(
        matches!(chat, Admission::Placed { .. }),
        "released once the document left: {chat:?}"
    );
    assert_eq!(fixture.exits("direct"), 0);
    assert_eq!(fixture.exits("placed"), 1);
}

/// The document of [`crowded_pair`] leaves the gate: shed at its deadline (no replica makes room
/// for it meanwhile).
async fn document_shed_at_its_deadline(document: tokio::task::JoinHandle<Admission>) {
    let admission = answer(document).await;
    assert!(
        matches!(admission, Admission::Shed("deadline")),
        "shed at its deadline: {admission:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_flood_let_through_by_the_fleets_other_gateways_is_over_its_share_here() {
    let queue = QueueConfig {
        equal_shares: true,
        ..by_team()
    };
    let fixture = fixture(Duration::from_millis(800), queue);
    // 3 000 prompt tokens queued on the backend: room for a 200-token request, not ample room.
    let _prefill = fixture.load(1, 3_000);
    let quiet = answer(enter(&fixture.gate, 200, team("quiet"))).await;
    assert!(matches!(quiet, Admission::Placed { guard: None, .. }));
    let published = fixture.gate.tenants(Instant::now());
    assert_eq!(
        (
            &*published[0].tenant,
            published[0].in_flight,
            published[0].admitted
        ),
        ("quiet", 456, 456),
        "what the fleet's others read of this gateway"
    );
    // The other gateways hold 4 000 tokens of the flood's: here, its first request is over its
    // share of the fleet's work (4 000 of 4 456 tokens, two tenants), and waits for ample room.
    let others = HashMap::from([(Arc::from("flood"), 4_000)]);
    fixture.gate.take_fleet(others, &[("flood", 4_000)]);
    let flood = enter(&fixture.gate, 200, team("flood"));
    queued(&fixture, 1).await;
    assert!(
        still_waiting(&fixture, 1),
        "over its share: ample room only"
    );
    // The store unanswered: this gateway's own view, where the flood holds nothing.
    fixture.gate.take_fleet(HashMap::new(), &[]);
    assert!(released(&answer(flood).await));
}
