use std::time::Duration;

use serde_json::{json, Value};

use super::*;

#[test]
fn the_prefill_runs_in_its_slot_for_one_unstreamed_token() {
    let client = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50}"#;
    let body: Value = serde_json::from_slice(&prefill_body(client, 3).unwrap()).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": false,
            "max_tokens": 1,
            "n_predict": 1,
            "id_slot": 3,
            "cache_prompt": true
        })
    );
}

#[test]
fn the_slot_is_spliced_into_the_clients_bytes() {
    assert_eq!(
        &with_slot(b"{\"prompt\": \"x\"}", 2).unwrap()[..],
        b"{\"id_slot\":2,\"prompt\": \"x\"}"
    );
    assert_eq!(&with_slot(b" {}", 0).unwrap()[..], b" {\"id_slot\":0}");
    assert!(with_slot(b"[]", 0).is_none());
    assert!(mentions_slot(br#"{"id_slot":1}"#));
    assert!(!mentions_slot(br#"{"prompt":"say id_slot"}"#));
}

#[test]
fn file_names_are_unique_and_plain() {
    let (a, b) = (file_name(), file_name());
    assert_ne!(a, b);
    assert!(a.starts_with("tokenmeter-") && a.ends_with(".bin"));
    assert!(a
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
}

/// Waits (at most 5 s of the clock) until `path` is gone.
async fn gone(path: &std::path::Path) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while path.exists() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

// On paused time: the late write must come within the linger, which on real time a loaded machine
// could let pass between the first removal and the write. (A removal is blocking file I/O on
// tokio's blocking pool, during which the paused clock does not move.)
#[tokio::test(start_paused = true)]
async fn a_transfer_file_is_removed_when_dropped_and_again_after_its_linger() {
    let dir = std::env::temp_dir().join(format!("tokenmeter-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let linger = Duration::from_millis(500);
    let file = TransferFile::new(&dir, "t.bin", linger);
    let path = file.path().to_owned();
    std::fs::write(&path, b"kv").unwrap();
    let dropped = tokio::time::Instant::now();
    drop(file);
    assert!(gone(&path).await, "removed");
    assert!(
        dropped.elapsed() < linger,
        "removed at once, not after the linger: {:?}",
        dropped.elapsed()
    );
    // A late save writes it after the first removal, within the linger.
    std::fs::write(&path, b"late").unwrap();
    assert!(gone(&path).await, "removed again");
    assert!(
        dropped.elapsed() >= linger,
        "the second removal waits out the linger: {:?}",
        dropped.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
