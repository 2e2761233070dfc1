//! Child processes that die with the test (even when it panics), scratch folders, free ports, and
//! bounded waiting.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The tokenmeter binary under test.
pub const TOKENMETER: &str = env!("CARGO_BIN_EXE_tokenmeter");

/// A scratch folder under Cargo's per-target temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback address no other caller in this test process gets (see `support/ports.rs`).
pub use crate::support::ports::free_addr;

/// A running child process, killed and reaped on drop; its output goes to `<log>`.
pub struct Proc {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Spawns `command` with stdout and stderr appended to `dir/<name>.log`.
    pub fn spawn(name: &str, mut command: Command, dir: &Path) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("create log file");
        let err = file.try_clone().expect("clone log handle");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({command:?}): {e}"));
        Proc {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the process's output, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(30);
        format!("--- {} log ---\n{}", self.name, lines[from..].join("\n"))
    }

    /// Waits for the process to exit by itself, at most `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} still running after {limit:?}\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `probe` until it returns `Some`, every 50 ms, at most `limit`; panics with `what` after.
pub fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
