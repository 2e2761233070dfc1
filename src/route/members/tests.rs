use super::*;
use crate::route::backend::LoadGuard;

fn pool(urls: &[&str]) -> Members {
    let config = PoolConfig {
        name: "p".to_owned(),
        urls: urls.iter().map(|u| (*u).to_owned()).collect(),
        ..PoolConfig::default()
    };
    Members::new(&config, None, None).expect("valid pool")
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
