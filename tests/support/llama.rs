//! A real inference engine for the tests: llama.cpp's `llama-server` with the random-weight test
//! model, both built by `scripts/llama/build.sh` into `target/llama/` (`TOKENMETER_LLAMA_DIR`
//! overrides). Where they are missing the tests that need them say so and pass, unless
//! `TOKENMETER_REQUIRE_LLAMA=1` (set by `scripts/test.sh`, so CI never skips them silently).
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// A running `llama-server`; killed on drop.
pub struct LlamaServer {
    pub url: String,
    pub addr: std::net::SocketAddr,
    child: Child,
}

/// Where the server and model are, if built.
fn installed() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::var_os("TOKENMETER_LLAMA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/llama"));
    let server = dir.join("bin/llama-server");
    let model = dir.join("model.gguf");
    (server.is_file() && model.is_file()).then_some((server, model))
}

impl LlamaServer {
    /// Starts a server with `slots` parallel slots of `slot_context` tokens each, on a free
    /// loopback port, and waits until `/health` answers 200. `None` (with a note) when the server
    /// is not built and not required.
    pub async fn start(slots: u32, slot_context: u32) -> Option<Self> {
        Self::start_with(slots, slot_context, &[]).await
    }

    /// [`LlamaServer::start`] with more command-line arguments (e.g. `--slot-save-path DIR`).
    pub async fn start_with(slots: u32, slot_context: u32, extra: &[&str]) -> Option<Self> {
        let Some((server, model)) = installed() else {
            let required = std::env::var("TOKENMETER_REQUIRE_LLAMA").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "llama-server is required but not built: run scripts/llama/build.sh"
            );
            eprintln!("SKIPPED: llama-server not built (scripts/llama/build.sh builds it)");
            return None;
        };
        let port = super::ports::free_port();
        let child = Command::new(server)
            .arg("--model")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--threads", "1", "--threads-batch", "1"])
            .args(["--parallel", &slots.to_string()])
            .args(["--ctx-size", &(slots * slot_context).to_string()])
            .arg("--metrics")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("llama-server starts");
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let server = Self {
            url: format!("http://{addr}"),
            addr,
            child,
        };
        server.wait_healthy(Duration::from_secs(60)).await;
        Some(server)
    }

    async fn wait_healthy(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // The port opens before the model is loaded (then /health answers 503).
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                let (status, _) = super::client::get(self.addr, "/health").await;
                if status == 200 {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "llama-server did not become healthy within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the server (a backend that died).
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}
