//! A real Redis (Debian's `redis-server`, installed by scripts/install-test-deps.sh) on a loopback
//! port of its own, with its data in a temp directory: an append-only file synced on every write,
//! so that a Redis killed and started again comes back with its counts (as a Redis with
//! persistence does in production).
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::tls::{Ca, TempDir};

/// A running redis-server, killed when dropped.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
    tls: Option<Tls>,
    /// Started as a node of a cluster ([`Cluster`]).
    cluster: bool,
}

/// TLS on a second port: the server's certificate and key, the CA it verifies clients with, and
/// whether it requires a client certificate.
pub struct Tls {
    pub port: u16,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    pub auth_clients: bool,
}

/// A CA, Redis's certificate signed by it, and a client certificate signed by it, on disk.
pub struct Certificates {
    pub dir: TempDir,
    pub ca: std::path::PathBuf,
    pub server: (std::path::PathBuf, std::path::PathBuf),
    pub client: (std::path::PathBuf, std::path::PathBuf),
}

impl Certificates {
    pub fn new() -> Self {
        let dir = TempDir::new("redis-certs");
        let ca = Ca::new("redis test CA");
        let ca_path = dir.write("ca.crt", &ca.pem);
        let server = ca.server().write(&dir, "server");
        let client = ca.client("tokenmeter").write(&dir, "client");
        Self {
            dir,
            ca: ca_path,
            server,
            client,
        }
    }

    /// A Redis serving TLS with these certificates, asking clients for one when `auth_clients`.
    pub fn redis(&self, auth_clients: bool) -> Redis {
        Redis::start_tls(Tls {
            port: super::ports::free_port(),
            cert: self.server.0.clone(),
            key: self.server.1.clone(),
            ca: self.ca.clone(),
            auth_clients,
        })
    }
}

impl Redis {
    /// Starts redis-server on a free port and waits until it answers.
    pub fn start() -> Self {
        let mut redis = Self {
            child: None,
            port: super::ports::free_port(),
            dir: TempDir::new("redis"),
            tls: None,
            cluster: false,
        };
        redis.launch();
        redis
    }

    /// Starts redis-server with a plain port (what the tests read counts through) and a TLS
    /// port (what tokenmeter is given, [`Redis::tls_url`]).
    pub fn start_tls(tls: Tls) -> Self {
        let mut redis = Self {
            child: None,
            port: super::ports::free_port(),
            dir: TempDir::new("redis-tls"),
            tls: Some(tls),
            cluster: false,
        };
        redis.launch();
        redis
    }

    /// The `rediss://` URL of the TLS port, by the address the test certificates name.
    pub fn tls_url(&self) -> String {
        let tls = self.tls.as_ref().expect("started with TLS");
        format!("rediss://127.0.0.1:{}/0", tls.port)
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
        let mut command = Command::new(binary);
        if self.cluster {
            // The cluster bus would be on port + 10 000, which can land in the kernel's
            // ephemeral range and be taken by anyone's connection: its own port from the
            // allocator instead (a restarted node gets another; the others learn it by gossip).
            command
                .args(["--cluster-port", &super::ports::free_port().to_string()])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "5000"]);
        }
        if let Some(tls) = &self.tls {
            command
                .args(["--tls-port", &tls.port.to_string()])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args([
                    "--tls-auth-clients",
                    if tls.auth_clients { "yes" } else { "no" },
                ]);
        }
        let child = command
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

    /// `redis-cli` with `args`: its whole output.
    pub fn cli_all(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
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

    /// The integers at the keys matching `pattern`, summed (a count over the windows a test
    /// spans: `tokenmeter:{team-a}:day:*`).
    pub fn sum(&self, pattern: &str) -> i64 {
        self.keys(pattern).iter().map(|key| self.int(key)).sum()
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

/// A Redis Cluster of three primaries on loopback (no replicas), its slots assigned by
/// `redis-cli --cluster create`; every node killed when dropped.
pub struct Cluster {
    pub nodes: Vec<Redis>,
}

impl Cluster {
    /// Starts three nodes, joins them, and waits until every node says the cluster is ok.
    pub fn start() -> Self {
        let nodes: Vec<Redis> = (0..3)
            .map(|_| {
                let mut node = Redis {
                    child: None,
                    port: super::ports::free_port(),
                    dir: TempDir::new("redis-node"),
                    tls: None,
                    cluster: true,
                };
                node.launch();
                node
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            output.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        // Each node learns the others' slots by gossip: wait until all say ok.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            while !node
                .cli(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the cluster's node on port {} did not reach cluster_state:ok",
                    node.port
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Self { nodes }
    }

    /// The seed URLs tokenmeter is given: every node.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("redis://127.0.0.1:{}/", node.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The integer at `key`, read from whichever node holds it (`redis-cli -c` follows the
    /// redirection).
    pub fn int(&self, key: &str) -> i64 {
        let output = Command::new("redis-cli")
            .args(["-c", "-p", &self.nodes[0].port.to_string(), "GET", key])
            .output()
            .expect("redis-cli runs");
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if text.is_empty() {
            0
        } else {
            text.parse().expect("an integer")
        }
    }

    /// The keys matching `pattern` on every node.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.nodes
            .iter()
            .flat_map(|node| node.keys(pattern))
            .collect()
    }

    /// [`Redis::sum`] over every node.
    pub fn sum(&self, pattern: &str) -> i64 {
        self.keys(pattern).iter().map(|key| self.int(key)).sum()
    }

    /// The node holding `key`'s slot (by `CLUSTER KEYSLOT` and each node's `CLUSTER NODES`
    /// line for itself).
    pub fn node_of(&self, key: &str) -> u16 {
        let slot: u16 = self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .expect("keyslot")
            .parse()
            .expect("a slot");
        for node in &self.nodes {
            let nodes = node.cli_all(&["CLUSTER", "NODES"]);
            let myself = nodes
                .lines()
                .find(|line| line.contains("myself"))
                .expect("its own line");
            let owns = myself.split_whitespace().skip(8).any(|range| {
                let (from, to) = range.split_once('-').unwrap_or((range, range));
                match (from.parse::<u16>(), to.parse::<u16>()) {
                    (Ok(from), Ok(to)) => (from..=to).contains(&slot),
                    _ => false,
                }
            });
            if owns {
                return node.port;
            }
        }
        panic!("no node owns slot {slot}");
    }
}
