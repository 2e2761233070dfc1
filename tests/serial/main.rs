//! The tests that must run alone: they count this process's allocations (a counting global
//! allocator is installed for the whole binary), sample its RSS or open file descriptors, or
//! hold a simulated replica to its timing model. Every test here starts with
//! `let _alone = crate::alone().await;` (`alone_blocking()` in a test without a runtime), so no
//! other test of the binary runs beside it; `every_test_runs_alone` checks that each does.
//!
//! Cargo runs test binaries one after another, so nothing of `tests/e2e/` runs beside them either.
#[path = "../alloc_support/mod.rs"]
mod alloc_support;
#[cfg(feature = "testbed")]
#[path = "../sim_support/mod.rs"]
mod sim_support;
#[path = "../support/mod.rs"]
mod support;

mod alloc_meter;
mod alloc_upstream;
#[cfg(feature = "testbed")]
mod bench_e2e;
#[cfg(feature = "testbed")]
mod bench_sessions;
mod dialect_alloc;
mod http2_abuse;
mod reliability_clients;
mod reliability_faults;
#[cfg(feature = "testbed")]
mod sim_disagg;
#[cfg(feature = "testbed")]
mod sim_timing;

/// The one lock every test here holds for its whole run.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until no other test of this binary runs, and keeps it so while the guard lives.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// [`alone`] for a test without a runtime.
pub fn alone_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.blocking_lock()
}

/// Every test function in this binary's files takes the lock first: one that did not would run
/// beside another and disturb (or be disturbed by) what it measures.
#[test]
fn every_test_runs_alone() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serial");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/serial") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name == "main.rs" || !name.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let line = line.trim();
            if !(line.starts_with("#[test]") || line.starts_with("#[tokio::test")) {
                continue;
            }
            // The function's first statement, past any further attributes and its signature.
            let first = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .skip_while(|l| !l.ends_with('{'))
                .nth(1)
                .unwrap_or_default();
            assert!(
                first.starts_with("let _alone = crate::alone"),
                "{name}:{}: a test here must start with `let _alone = crate::alone().await;` \
                 (or `crate::alone_blocking()`), not `{first}`",
                i + 1
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "found only {checked} tests in tests/serial");
}
