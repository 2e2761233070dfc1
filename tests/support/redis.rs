//! A real Redis (Debian's `redis-server`, installed by scripts/install-test-deps.sh) on a loopback
//! port of its own, with its data in a temp directory: an append-only file synced on every write,
//! so that a Redis killed and started again comes back with its counts (as a Redis with
//! persistence does in production).
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::tls::TempDir;

/// A running redis-server, killed when dropped.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
}

impl Redis {
    /// Starts redis-server on a free port and waits until it answers.
    pub fn start() -> Self {
        let mut redis = Self {
            child: None,
            port: super::ports::free_port(),
            dir: TempDir::new("redis"),
        };
        redis.launch();
        redis
    }

    /// The URL tokenmeter is given.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn launch(&mut self) {
        let binary = ["/usr/bin/redis-server", "/usr/sbin/redis-server"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect("redis-server is installed (scripts/install-test-deps.sh installs Debian's)");
        let child = Command::new(binary)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(&self.dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not answer on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it (SIGKILL: no goodbye to its clients; a paused one too).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Pauses it (SIGSTOP): connections stay open and what clients send waits in their sockets,
    /// to be run, late, by [`Redis::resume`], as a Redis stalled by a long fork or a VM pause.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused Redis (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("redis-server is running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} redis-server");
    }

    /// Starts it again on the same port, from its append-only file.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// `redis-cli` with `args`: its output's first line, `None` when it failed.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !text.contains("Could not connect")).then_some(text)
    }

    /// The keys matching `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--scan", "--pattern", pattern])
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The integer at `key` (0 when absent).
    pub fn int(&self, key: &str) -> i64 {
        self.cli(&["GET", key])
            .filter(|text| !text.is_empty())
            .map_or(0, |text| text.parse().expect("an integer"))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
