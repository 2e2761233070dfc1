//! A raw-TCP upstream whose every connection is handed to the test after the request was read: it
//! can write any bytes (broken framing, resets, silence), which a well-behaved server cannot.
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the upstream read it: the head text and the content-length body.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub head: String,
    pub body: Vec<u8>,
}

/// A running raw upstream.
pub struct RawUpstream {
    pub url: String,
    /// Requests read so far (over all connections).
    pub requests: Arc<AtomicUsize>,
}

impl RawUpstream {
    /// Each connection: read one request, then `respond(request, stream)` owns the socket.
    pub async fn start<F, Fut>(respond: F) -> Self
    where
        F: Fn(RawRequest, TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind raw");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&requests);
        let respond = Arc::new(respond);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let respond = Arc::clone(&respond);
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    if let Some(request) = read_request(&mut stream).await {
                        counter.fetch_add(1, Ordering::SeqCst);
                        respond(request, stream).await;
                    }
                });
            }
        });
        Self { url, requests }
    }

    pub fn request_count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<RawRequest> {
    let seen = super::backend::read_request(stream, &mut Vec::new()).await?;
    Some(RawRequest {
        head: seen.head,
        body: seen.body,
    })
}

/// A chunked response head.
pub fn chunked_head(status: u16, content_type: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    .into_bytes()
}

/// One HTTP chunk.
pub fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut frame = format!("{:x}\r\n", bytes.len()).into_bytes();
    frame.extend_from_slice(bytes);
    frame.extend_from_slice(b"\r\n");
    frame
}

/// The terminating chunk.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Writes, ignoring a peer that went away (the proxy may hang up first, which tests check elsewhere).
pub async fn write(stream: &mut TcpStream, bytes: &[u8]) -> bool {
    stream.write_all(bytes).await.is_ok()
}

/// Stays silent until the peer hangs up (or `at_most` passes), so a hang holds no socket after the
/// proxy gave up on it.
pub async fn hold(stream: &mut TcpStream, at_most: std::time::Duration) {
    let mut byte = [0u8; 1];
    let _ = tokio::time::timeout(at_most, async {
        while matches!(stream.read(&mut byte).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Open file descriptors of this process (`/proc/self/fd`).
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count())
}

/// What each open file descriptor points at (for a failure message).
pub fn fd_targets() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|entry| std::fs::read_link(entry.path()).ok())
                .map(|target| target.display().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Resident set size of a process in KiB (`VmRSS` of `/proc/PID/status`; `self` for this one).
pub fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}
