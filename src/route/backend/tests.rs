use super::*;
use crate::upstream::BodyGuard;

fn backend(url: &str) -> Arc<Backend> {
    let target = Target::from_url(url).expect("a target");
    Arc::new(Backend::new(target, Arc::from("p"), None))
}

#[test]
fn load_lasts_until_the_guard_drops_and_tokens_until_the_first_frame() {
    let backend = backend("http://127.0.0.1:1");
    let guard = LoadGuard::new(Arc::clone(&backend), 3000);
    assert_eq!(backend.streams(), 1, "a stream in flight");
    assert_eq!(backend.queued_tokens(), 3000, "its prompt is queued");
    guard.first_frame();
    guard.first_frame();
    assert_eq!(
        backend.queued_tokens(),
        0,
        "prefill over at the first frame (once)"
    );
    assert_eq!(backend.streams(), 1, "still streaming");
    drop(guard);
    assert_eq!(backend.streams(), 0, "stream ended");
    let early = LoadGuard::new(Arc::clone(&backend), 10);
    drop(early);
    assert_eq!(
        (backend.streams(), backend.queued_tokens()),
        (0, 0),
        "a request that never got a byte releases both"
    );
}

#[tokio::test(start_paused = true)]
async fn the_queue_drains_at_the_learned_rate_from_when_it_last_moved() {
    let backend = backend("http://127.0.0.1:1");
    let document = LoadGuard::new(Arc::clone(&backend), 10_000);
    let start = Instant::now();
    assert_eq!(
        backend.load(start).queued_tokens,
        10_000,
        "nothing done yet"
    );
    tokio::time::advance(Duration::from_millis(50)).await;
    let chat = LoadGuard::new(Arc::clone(&backend), 400);
    tokio::time::advance(Duration::from_millis(200)).await;
    // The priors prefill 20 000 tokens/s: 250 ms since the document joined an empty queue.
    let load = backend.load(Instant::now());
    assert_eq!(
        load.queued_tokens,
        10_400 - 5_000,
        "half the document is done"
    );
    assert_eq!(load.streams, 2);
    assert_eq!(backend.queued_tokens(), 10_400, "the count itself is whole");
    // The document's first token: the queue moved, the chat's prefill starts now.
    document.first_frame();
    assert_eq!(backend.load(Instant::now()).queued_tokens, 400);
    tokio::time::advance(Duration::from_millis(10)).await;
    assert_eq!(backend.load(Instant::now()).queued_tokens, 200);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        backend.load(Instant::now()).queued_tokens,
        0,
        "never below nothing, though the chat has no first token yet"
    );
    chat.first_frame();
    let later = LoadGuard::new(Arc::clone(&backend), 1_000);
    assert_eq!(
        backend.load(Instant::now()).queued_tokens,
        1_000,
        "a request joining an empty queue starts it again"
    );
    drop(later);
}

#[test]
fn a_faster_learned_rate_drains_faster() {
    let backend = backend("http://127.0.0.1:1");
    // A replica that prefills 40 000 tokens/s: 25 ms per 1 000 tokens of its own.
    for i in 0..400u64 {
        let ask = Ask {
            prompt_tokens: 500 + (i * 997) % 8_000,
            cached_tokens: 0,
        };
        let ttft = Duration::from_secs_f64(0.010 + 0.025 * ask.uncached() as f64 / 1000.0);
        backend.learn(200, Load::default(), ask, Outcome { ttft, tpot: None });
    }
    let done = backend
        .lock_latency()
        .as_ref()
        .map(|model| model.prefilled_in(Duration::from_millis(100)));
    let done = done.expect("a model");
    assert!(done.abs_diff(4_000) < 40, "{done}");
}

#[test]
fn the_fleets_load_adds_to_its_own_drains_and_has_the_engines_floor() {
    let backend = backend("http://127.0.0.1:1");
    let start = Instant::now();
    let _own = LoadGuard::new(Arc::clone(&backend), 1_000);
    backend.set_scraped(9, 0, 0.0);
    assert_eq!(
        backend.load(start).streams,
        1,
        "alone (no fleet), its own streams: the engine's gauges only weigh p2c"
    );
    backend.set_others(2, 20_000, start, Duration::ZERO);
    let load = backend.load(start);
    assert_eq!(load.queued_tokens, 21_000, "its own queue and the others'");
    assert_eq!(
        load.streams, 9,
        "in a fleet, at least what the engine runs and queues (1 + 2 < 9)"
    );
    backend.set_scraped(0, 0, 0.0);
    assert_eq!(backend.load(start).streams, 3, "its own and the others'");
    assert_eq!(backend.own_load(start).streams, 1, "what it publishes");
    let later = backend
        .load(start + Duration::from_millis(100))
        .queued_tokens;
    assert!(
        (1_000..21_000).contains(&later),
        "the others' queue drains at the prefill rate since it was read ({later})"
    );
}

#[test]
fn another_replicas_stall_mark_holds_as_long_as_it_said_and_is_not_published_again() {
    let backend = backend("http://127.0.0.1:1");
    let start = Instant::now();
    assert!(!backend.stalling(start));
    backend.set_others(1, 0, start, Duration::from_millis(800));
    assert!(backend.stalling(start + Duration::from_millis(799)));
    assert!(!backend.stalling(start + Duration::from_millis(801)));
    assert_eq!(
        backend.own_stall_left(start),
        Duration::ZERO,
        "the others' mark is theirs to publish"
    );
    backend.stall_until(start + Duration::from_millis(300));
    assert_eq!(backend.own_stall_left(start), Duration::from_millis(300));
    assert!(
        backend.stalling(start + Duration::from_millis(500)),
        "the later of the two"
    );
    backend.set_others(1, 0, start, Duration::ZERO);
    assert!(
        !backend.stalling(start + Duration::from_millis(500)),
        "the others' mark lifted"
    );
}

#[test]
fn in_a_fleet_the_prefill_rate_is_what_every_replicas_model_learned_weighted_by_precision() {
    let backend = backend("http://127.0.0.1:1");
    assert_eq!(
        backend.fleet_prefill_rate(),
        backend.prefill_rate(),
        "alone: its own (the priors')"
    );
    // Two others: 0.05 s per thousand tokens with precision 300, 0.1 with 100.
    backend.set_others_prefill_cost(0.05 * 300.0 + 0.1 * 100.0, 400.0);
    let rate = backend.fleet_prefill_rate();
    assert!(
        (rate - 16_000.0).abs() < 1.0,
        "1 000 / 0.0625 (its own model has learned nothing: no weight): {rate}"
    );
    backend.set_others_prefill_cost(0.0, 0.0);
    assert_eq!(backend.fleet_prefill_rate(), backend.prefill_rate());
}

#[tokio::test]
async fn a_placement_or_a_stall_mark_wakes_the_fleets_desk_once_attached() {
    let backend = backend("http://127.0.0.1:1");
    drop(LoadGuard::new(Arc::clone(&backend), 100));
    assert!(!backend.take_news(), "without a fleet, nothing is marked");
    let desk = Arc::new(tokio::sync::Notify::new());
    backend.attach_news(&desk);
    let guard = LoadGuard::new(Arc::clone(&backend), 100);
    tokio::time::timeout(Duration::from_secs(1), desk.notified())
        .await
        .expect("the placement woke the desk");
    assert!(backend.take_news());
    assert!(!backend.take_news(), "told once");
    drop(guard);
    assert!(
        !backend.take_news(),
        "a stream's end is left to the next round"
    );
    backend.stall_until(Instant::now() + Duration::from_millis(300));
    assert!(backend.take_news(), "a stall mark is news");
}
