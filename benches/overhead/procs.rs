//! Starting and stopping the processes of a run: the benchmark's own roles, the proxies under
//! test. Each started process is a [`Proc`], stopped when dropped, so an error anywhere in the
//! orchestrator leaves nothing running.
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::self_exe;

pub type Error = Box<dyn std::error::Error>;

/// A started process, killed on drop.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
}

impl Drop for Proc {
    /// SIGTERM first, so that nginx's master stops its workers (a SIGKILLed master leaves them
    /// running, orphaned, into the next runs); SIGKILL after 3 s.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("stopped {}", self.name);
    }
}

pub fn free_port() -> Result<SocketAddr, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

pub fn wait_for_port(addr: SocketAddr) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nothing listens on {addr}").into())
}

pub fn log_file(out: &Path, name: &str) -> Result<Stdio, Error> {
    Ok(Stdio::from(std::fs::File::create(out.join(name))?))
}

/// Starts one of this binary's own server roles (`args`, listening on port 0) and reads the
/// addresses it prints (`listening <addr> [<addr>...]`: the backend also names its TLS port);
/// its stderr goes to `<out>/<log>.log`.
pub fn start_role(
    out: &Path,
    name: &'static str,
    log: &str,
    args: &[String],
) -> Result<(Proc, Vec<SocketAddr>), Error> {
    let mut child = Command::new(self_exe()?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log_file(out, &format!("{log}.log"))?)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("role stdout")?;
    // Owned from here: a parse error below still stops the process.
    let proc = Proc { name, child };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addrs = line
        .trim()
        .strip_prefix("listening ")
        .ok_or_else(|| format!("{name} did not say where it listens"))?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<Vec<SocketAddr>, _>>()?;
    if addrs.is_empty() {
        return Err(format!("{name} named no address").into());
    }
    Ok((proc, addrs))
}

/// The pids of a process's children (nginx's workers).
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let ppid: u32 = rest.split(' ').nth(1)?.parse().ok()?;
        (ppid == parent).then_some(pid)
    })
    .collect()
}

/// The soft `RLIMIT_NOFILE` this process (and so every proxy it starts) runs under.
pub fn nofile_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
