use super::*;

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
