//! The one pooled HTTP client shared by every request to every upstream.
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Uri;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower::ServiceExt;

use super::RequestBody;
use crate::config::UpstreamConfig;

/// The client type: HTTP/1.1 to upstreams (what vLLM's uvicorn speaks), keep-alive pooled.
pub type UpstreamClient = Client<HttpConnector, RequestBody>;

/// Builds the shared client: `TCP_NODELAY` (a token chunk must not wait for Nagle), the connect
/// timeout, and an idle timeout on pooled connections driven by a tokio timer.
pub fn build(config: &UpstreamConfig) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(config.connect_timeout));
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(config.pool_idle_timeout)
        .pool_max_idle_per_host(config.pool_max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}

/// Upstream connections for the token path, each driven by the task that forwards its response.
///
/// hyper-util's pooled client runs every connection as a task of its own and hands each body
/// frame to the response's task through a one-slot channel: per chunk, a read in one task, a
/// wake-up, and a write in the other (often on the other core). Measured, that hand-off and the
/// second task's wake-ups were the largest user-space cost of forwarding a chunk
/// (docs/performance.md). Here the connection future ([`Driver`]) travels with the request and then
/// the response body, and is polled by whoever polls the body: the chunk is read, decoded and
/// written by one task, and several chunks that arrived together go out in one `writev`.
///
/// Idle connections wait in a per-authority LIFO stack. They are not polled while idle, so a
/// connection is checked when taken: not expired, and one poll (which reads the peer's FIN if it
/// came) leaves it open and ready.
#[derive(Clone)]
pub struct ConnPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    connector: HttpConnector,
    idle: Mutex<HashMap<Arc<str>, Vec<Idle>>>,
    idle_timeout: Duration,
    max_idle_per_host: usize,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl std::fmt::Debug for ConnPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnPool").finish_non_exhaustive()
    }
}

/// The connection future of one upstream connection: it must be polled for anything to move.
pub type Driver = Connection<TokioIo<TcpStream>, RequestBody>;

/// One upstream HTTP/1.1 connection: the request handle and its driver.
pub struct Conn {
    pub sender: SendRequest<RequestBody>,
    pub driver: Driver,
    /// The pool key (the authority) it returns to.
    pub key: Arc<str>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("key", &self.key).finish()
    }
}

/// Why no connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect: {0}")]
    Connect(String),
    #[error("handshake: {0}")]
    Handshake(#[from] hyper::Error),
}

impl ConnPool {
    pub fn new(config: &UpstreamConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.enforce_http(true);
        let inner = Arc::new(PoolInner {
            connector,
            idle: Mutex::new(HashMap::new()),
            idle_timeout: config.pool_idle_timeout,
            max_idle_per_host: config.pool_max_idle_per_host,
        });
        // Outside a runtime (a unit test building the stack) there is nothing to sweep with;
        // checkout still skips dead connections.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&inner)));
        }
        Self { inner }
    }

    /// An idle connection to `key` that is still open and ready, if any.
    pub fn checkout(&self, key: &str) -> Option<Conn> {
        let now = Instant::now();
        loop {
            let idle = {
                let mut idle = lock(&self.inner.idle);
                idle.get_mut(key)?.pop()?
            };
            let Idle { mut conn, since } = idle;
            if now.saturating_duration_since(since) >= self.inner.idle_timeout {
                continue;
            }
            // One poll reads a FIN (or a stray byte) that arrived while the connection sat idle.
            let mut cx = std::task::Context::from_waker(noop_waker());
            if Pin::new(&mut conn.driver).poll(&mut cx).is_ready() {
                continue;
            }
            if conn.sender.is_ready() {
                return Some(conn);
            }
        }
    }

    /// A new connection to `uri`'s authority.
    pub async fn connect(&self, uri: &Uri, key: Arc<str>) -> Result<Conn, ConnectError> {
        let io = self
            .inner
            .connector
            .clone()
            .oneshot(uri.clone())
            .await
            .map_err(|err| ConnectError::Connect(error_chain(&err)))?;
        let (sender, driver) = hyper::client::conn::http1::handshake(io).await?;
        Ok(Conn {
            sender,
            driver,
            key,
        })
    }

    /// Returns a connection whose exchange finished cleanly, so the next request can reuse it.
    pub fn checkin(&self, conn: Conn) {
        if !conn.sender.is_ready() {
            return;
        }
        let now = Instant::now();
        let mut idle = lock(&self.inner.idle);
        let stack = idle.entry(Arc::clone(&conn.key)).or_default();
        // Expired ones sit at the bottom of the LIFO stack.
        let timeout = self.inner.idle_timeout;
        stack.retain(|entry| now.saturating_duration_since(entry.since) < timeout);
        if stack.len() < self.inner.max_idle_per_host {
            stack.push(Idle { conn, since: now });
        }
    }
}

/// How often idle connections are looked at.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Drops idle connections that expired or that the upstream closed (a server's keep-alive
/// timeout, uvicorn's is 5 s), so they do not sit in CLOSE_WAIT holding a descriptor until the
/// next request for that backend. Ends when the pool is dropped.
async fn sweep(pool: std::sync::Weak<PoolInner>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        // Looked at outside the lock, so requests never wait on a sweep: the stacks are taken
        // out, and the survivors go back under whatever was checked in meanwhile (LIFO kept).
        let taken: Vec<(Arc<str>, Vec<Idle>)> = lock(&pool.idle).drain().collect();
        let now = Instant::now();
        let mut cx = std::task::Context::from_waker(noop_waker());
        let mut idle = Vec::with_capacity(taken.len());
        for (key, mut stack) in taken {
            stack.retain_mut(|entry| {
                now.saturating_duration_since(entry.since) < pool.idle_timeout
                    && Pin::new(&mut entry.conn.driver).poll(&mut cx).is_pending()
            });
            idle.push((key, stack));
        }
        let mut current = lock(&pool.idle);
        for (key, mut survivors) in idle {
            let stack = current.entry(key).or_default();
            survivors.append(stack);
            let excess = survivors.len().saturating_sub(pool.max_idle_per_host);
            survivors.drain(..excess);
            *stack = survivors;
        }
        current.retain(|_, stack| !stack.is_empty());
    }
}

/// A waker for the one look at an idle connection: nobody waits on that poll.
pub(super) fn noop_waker() -> &'static std::task::Waker {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static WAKER: std::sync::OnceLock<std::task::Waker> = std::sync::OnceLock::new();
    WAKER.get_or_init(|| std::task::Waker::from(Arc::new(Noop)))
}

/// A poisoned lock only means a thread panicked mid-update; the pool stays usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An error and its sources on one line ("tcp connect error: Connection refused (os error 111)").
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
