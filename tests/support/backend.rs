//! A scripted HTTP/1.1 upstream on raw TCP: exact frames, exact delays, and a report of what it saw.
//!
//! Raw TCP (not hyper) so a test controls every byte and chunk boundary, can crash mid-body, and sees
//! the moment the proxy closes the connection (a concurrent read returns EOF).
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One step of a response body.
#[derive(Debug, Clone)]
pub enum Step {
    /// Wait, then write these bytes as one HTTP chunk.
    Chunk(Duration, Vec<u8>),
    /// Wait this long without writing.
    Pause(Duration),
    /// Close the connection abruptly (no terminating chunk): an upstream crash.
    Crash,
}

/// How the backend answers one request.
#[derive(Debug, Clone)]
pub struct Script {
    pub status: u16,
    pub content_type: String,
    pub steps: Vec<Step>,
}

impl Script {
    /// An SSE response whose events come with the given delays (each event one chunk).
    pub fn sse(events: Vec<(Duration, Vec<u8>)>) -> Self {
        Self {
            status: 200,
            content_type: "text/event-stream".to_owned(),
            steps: events
                .into_iter()
                .map(|(delay, bytes)| Step::Chunk(delay, bytes))
                .collect(),
        }
    }

    pub fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            content_type: "application/json".to_owned(),
            steps: vec![Step::Chunk(Duration::ZERO, body.as_bytes().to_vec())],
        }
    }
}

/// Answers every request with the events of the OpenAI stream fixture `name`, `gap` apart (each
/// event one chunk), whatever the request asked.
pub fn replay(name: &str, gap: Duration) -> impl Fn(&Seen) -> Script + Send + Sync + 'static {
    let events = super::events_of(&super::fixture(name));
    move |_seen: &Seen| Script::sse(events.iter().map(|e| (gap, e.clone())).collect())
}

/// What the backend saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub head: String,
    pub body: Vec<u8>,
    /// When the whole request had been read: the proxy started metering it before this.
    pub at: Instant,
}

/// One write of a response body: an HTTP chunk's payload, or the end of the body (empty).
#[derive(Debug, Clone)]
pub struct Wrote {
    /// Just before the write began: the proxy cannot have read these bytes earlier.
    pub at: Instant,
    pub bytes: Vec<u8>,
}

impl Seen {
    /// A header value (case-insensitive name), if present.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }
}

/// Events the backend reports to the test.
#[derive(Debug)]
pub enum Report {
    Request(Seen),
    /// The peer closed the connection (read EOF or error) at this instant.
    Closed(Instant),
}

/// A running scripted backend.
pub struct Backend {
    pub url: String,
    pub reports: mpsc::UnboundedReceiver<Report>,
    writes: Arc<Mutex<Vec<Wrote>>>,
}

impl Backend {
    /// Starts a backend that answers each request with `script(request)`.
    pub async fn start<F>(script: F) -> Self
    where
        F: Fn(&Seen) -> Script + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind backend");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, reports) = mpsc::unbounded_channel();
        let script = Arc::new(script);
        let writes = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&writes);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(
                    stream,
                    Arc::clone(&script),
                    tx.clone(),
                    Arc::clone(&log),
                ));
            }
        });
        Self {
            url,
            reports,
            writes,
        }
    }

    /// Every body write so far, over all connections in the order they began: each chunk, and
    /// an empty write for each body's end (see `support::timeline`).
    pub fn writes(&self) -> Vec<Wrote> {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The next request the backend received (waits up to 10 s).
    pub async fn next_request(&mut self) -> Seen {
        let deadline = Duration::from_secs(10);
        loop {
            match tokio::time::timeout(deadline, self.reports.recv()).await {
                Ok(Some(Report::Request(seen))) => return seen,
                Ok(Some(Report::Closed(_))) => continue,
                other => panic!("no request reached the backend: {other:?}"),
            }
        }
    }

    /// The instant the next connection close was seen (waits up to `within`).
    pub async fn next_close(&mut self, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.reports.recv()).await {
                Ok(Some(Report::Closed(at))) => return Some(at),
                Ok(Some(Report::Request(_))) => continue,
                _ => return None,
            }
        }
    }
}

async fn serve<F>(
    stream: TcpStream,
    script: Arc<F>,
    tx: mpsc::UnboundedSender<Report>,
    writes: Arc<Mutex<Vec<Wrote>>>,
) where
    F: Fn(&Seen) -> Script + Send + Sync + 'static,
{
    let (mut read, mut write) = stream.into_split();
    let mut buffer = Vec::new();
    loop {
        let Some(seen) = read_request(&mut read, &mut buffer).await else {
            let _ = tx.send(Report::Closed(Instant::now()));
            return;
        };
        let script = script(&seen);
        let _ = tx.send(Report::Request(seen));
        // While the response is written, watch the read half: EOF there is the proxy hanging up.
        let watcher_tx = tx.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut watch = tokio::spawn(async move {
            let mut byte = [0u8; 1];
            tokio::select! {
                _ = read.read(&mut byte) => {
                    let _ = watcher_tx.send(Report::Closed(Instant::now()));
                    None
                }
                _ = stop_rx => Some(read),
            }
        });
        let finished = tokio::select! {
            finished = write_response(&mut write, &script, &writes) => finished,
            _ = &mut watch => return,
        };
        let _ = stop_tx.send(());
        match watch.await {
            // Keep-alive: the read half comes back for the next request.
            Ok(Some(r)) if finished => read = r,
            _ => return,
        }
    }
}

/// Reads one request head and its content-length body (bytes past it stay in `buffer` for the next
/// request on the connection). `None` at EOF.
pub async fn read_request<R: AsyncRead + Unpin>(
    read: &mut R,
    buffer: &mut Vec<u8>,
) -> Option<Seen> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = read.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = read.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some(Seen {
        head,
        body,
        at: Instant::now(),
    })
}

/// Writes the scripted response, logging each write in `writes`; `false` if the connection must
/// close afterwards.
async fn write_response(
    write: &mut tokio::net::tcp::OwnedWriteHalf,
    script: &Script,
    writes: &Mutex<Vec<Wrote>>,
) -> bool {
    let log = |bytes: &[u8]| {
        writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Wrote {
                at: Instant::now(),
                bytes: bytes.to_vec(),
            });
    };
    let head = format!(
        "HTTP/1.1 {} X\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\n\r\n",
        script.status, script.content_type
    );
    if write.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    for step in &script.steps {
        match step {
            Step::Chunk(delay, bytes) => {
                tokio::time::sleep(*delay).await;
                log(bytes);
                let mut frame = format!("{:x}\r\n", bytes.len()).into_bytes();
                frame.extend_from_slice(bytes);
                frame.extend_from_slice(b"\r\n");
                if write.write_all(&frame).await.is_err() {
                    return false;
                }
            }
            Step::Pause(delay) => tokio::time::sleep(*delay).await,
            Step::Crash => {
                let _ = write.shutdown().await;
                return false;
            }
        }
    }
    log(&[]);
    write.write_all(b"0\r\n\r\n").await.is_ok()
}
