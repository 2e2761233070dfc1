use super::*;

fn pool(urls: &[&str]) -> Pool {
    let config = PoolConfig {
        name: "p".to_owned(),
        urls: urls.iter().map(|u| (*u).to_owned()).collect(),
        ..PoolConfig::default()
    };
    Pool::new(&config, None, None).expect("valid pool")
}

#[test]
fn load_lasts_until_the_guard_drops_and_tokens_until_the_first_frame() {
    let pool = pool(&["http://127.0.0.1:1"]);
    let backend = Arc::clone(&pool.backends()[0]);
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

#[test]
fn re_resolution_keeps_known_backends_and_their_load() {
    let pool = pool(&["http://127.0.0.1:1"]);
    let a: SocketAddr = "10.0.0.1:8000".parse().expect("addr");
    let b: SocketAddr = "10.0.0.2:8000".parse().expect("addr");
    pool.set_resolved(&[a, b]);
    let first = pool.backends();
    let labels: Vec<&str> = first.iter().map(|b| &*b.target.label).collect();
    assert_eq!(
        labels,
        vec!["127.0.0.1:1", "10.0.0.1:8000", "10.0.0.2:8000"],
        "static plus resolved"
    );
    let _guard = LoadGuard::new(Arc::clone(&first[2]), 0);
    pool.set_resolved(&[b]);
    let second = pool.backends();
    assert_eq!(second.len(), 2, "10.0.0.1 is gone");
    assert!(
        Arc::ptr_eq(&second[1], &first[2]),
        "10.0.0.2 kept its backend object"
    );
    assert_eq!(second[1].streams(), 1, "and its load");
}
