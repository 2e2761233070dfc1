use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Admit, Cut, CutLog, Phase};
use crate::context::Outcome;

/// What this thread's subscriber wrote (WARN and above, one line per event, no colours).
#[derive(Clone, Default)]
pub(in crate::meter) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub(in crate::meter) fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().expect("lock").clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures the log of this thread (and of the tasks of a current-thread runtime on it) while the
/// guard lives.
pub(in crate::meter) fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::WARN)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

const WINDOW: Duration = Duration::from_secs(10);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A limit of the test's own (the process's is shared by every test).
fn leaked(lines: u32) -> &'static CutLog {
    Box::leak(Box::new(CutLog::new(lines, WINDOW)))
}

fn cut(log: &'static CutLog, tokens: u64) {
    log.cut(&Cut {
        backend: "10.0.0.1:8000",
        pool: "default",
        operation: "chat",
        model: "m",
        phase: Phase::MidStream,
        bytes: Some(1234),
        tokens,
        outcome: Outcome::UpstreamError,
        elapsed: Duration::from_millis(250),
        error: &"the upstream closed the connection before the end of the response body",
    });
}

fn cut_lines(lines: &[String]) -> usize {
    lines
        .iter()
        .filter(|line| line.contains("stream cut by its upstream"))
        .count()
}

fn summaries(lines: &[String]) -> Vec<&String> {
    lines
        .iter()
        .filter(|line| line.contains("were not logged"))
        .collect()
}

#[test]
fn each_window_logs_its_lines_and_counts_the_rest() {
    let log = CutLog::new(2, WINDOW);
    let t0 = Instant::now();
    assert_eq!(log.admit(t0), Admit::Log { unlogged_before: 0 }, "first");
    assert_eq!(
        log.admit(t0 + secs(1)),
        Admit::Log { unlogged_before: 0 },
        "second"
    );
    assert_eq!(
        log.admit(t0 + secs(2)),
        Admit::Count {
            summary_at: Some(t0 + WINDOW)
        },
        "the first cut over the limit schedules the summary at the window's end"
    );
    assert_eq!(
        log.admit(t0 + secs(9)),
        Admit::Count { summary_at: None },
        "the next ones are only counted"
    );
    assert_eq!(log.take_unlogged(), 2, "the summary reports both");
    assert_eq!(log.take_unlogged(), 0, "once");
    assert_eq!(
        log.admit(t0 + WINDOW),
        Admit::Log { unlogged_before: 0 },
        "a window is WINDOW long: a new one, whose lines are logged again"
    );
    assert_eq!(log.admit(t0 + secs(11)), Admit::Log { unlogged_before: 0 });
    assert_eq!(
        log.admit(t0 + secs(12)),
        Admit::Count {
            summary_at: Some(t0 + secs(20))
        },
        "that window began with its first cut"
    );
    assert_eq!(
        log.admit(t0 + secs(45)),
        Admit::Log { unlogged_before: 1 },
        "a summary that did not run: the next window's first line reports its count"
    );
    assert_eq!(log.take_unlogged(), 0, "and no summary reports it again");
}

#[tokio::test(start_paused = true)]
async fn a_flood_writes_the_limit_and_one_summary_at_the_windows_end() {
    let (captured, _guard) = capture();
    let log = leaked(3);
    for tokens in 0..10 {
        cut(log, tokens);
    }
    let lines = captured.lines();
    assert_eq!(
        cut_lines(&lines),
        3,
        "three lines in the window, the rest counted: {lines:#?}"
    );
    assert!(
        summaries(&lines).is_empty(),
        "no summary before the window's end"
    );
    let first = &lines[0];
    for field in [
        "WARN",
        "backend=\"10.0.0.1:8000\"",
        "pool=\"default\"",
        "operation=\"chat\"",
        "phase=\"mid_stream\"",
        "bytes=1234",
        "tokens=0",
        "outcome=\"upstream_error\"",
        "elapsed_ms=250",
        "error=the upstream closed the connection",
    ] {
        assert!(first.contains(field), "{field} in {first}");
    }
    // Paused time: the clock jumps to the summary's timer.
    tokio::time::sleep(WINDOW).await;
    tokio::task::yield_now().await;
    let lines = captured.lines();
    let summary = summaries(&lines);
    assert_eq!(summary.len(), 1, "one summary: {lines:#?}");
    assert!(
        summary[0].contains("7 more streams cut by their upstream were not logged")
            && summary[0].contains("streams=7"),
        "it counts the seven: {}",
        summary[0]
    );
    cut(log, 99);
    let lines = captured.lines();
    assert_eq!(cut_lines(&lines), 4, "a new window logs again: {lines:#?}");
    assert_eq!(summaries(&lines).len(), 1, "with nothing left to summarize");
    tokio::time::sleep(WINDOW * 2).await;
    assert_eq!(
        captured.lines().len(),
        5,
        "and nothing more is written: {:#?}",
        captured.lines()
    );
}
