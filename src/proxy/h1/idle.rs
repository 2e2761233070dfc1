//! Idle upstream connections kept for reuse, per authority.
//!
//! A connection is checked in when its response body was read to the end on a keep-alive
//! exchange, and checked out by the next request to the same authority (LIFO: the most recently
//! used is the one least likely to have hit the upstream's keep-alive timeout). Idle connections
//! are not polled; a checkout looks at one first (not expired, nothing arrived on it), and a sweep
//! every second drops those the upstream closed, so they do not sit in CLOSE_WAIT.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::conn::Conn;

/// How often idle connections are looked at.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The idle-connection pool (cheap to clone).
#[derive(Clone)]
pub(crate) struct IdlePool {
    inner: Arc<Inner>,
}

struct Inner {
    idle: Mutex<HashMap<Arc<str>, Vec<Idle>>>,
    idle_timeout: Duration,
    max_idle_per_host: usize,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl std::fmt::Debug for IdlePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdlePool")
            .field("idle_timeout", &self.inner.idle_timeout)
            .field("max_idle_per_host", &self.inner.max_idle_per_host)
            .finish_non_exhaustive()
    }
}

impl IdlePool {
    pub fn new(idle_timeout: Duration, max_idle_per_host: usize) -> Self {
        let inner = Arc::new(Inner {
            idle: Mutex::new(HashMap::new()),
            idle_timeout,
            max_idle_per_host,
        });
        // Outside a runtime (a unit test building the stack) there is nothing to sweep with;
        // checkout still skips dead connections.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&inner)));
        }
        Self { inner }
    }

    /// An idle connection to `key` that is still open, if any.
    pub fn checkout(&self, key: &str) -> Option<Conn> {
        let now = Instant::now();
        loop {
            let Idle { mut conn, since } = lock(&self.inner.idle).get_mut(key)?.pop()?;
            if now.saturating_duration_since(since) < self.inner.idle_timeout && conn.is_reusable()
            {
                conn.reused = true;
                return Some(conn);
            }
        }
    }

    /// Keeps a connection whose exchange ended cleanly for the next request.
    pub fn checkin(&self, conn: Conn) {
        if self.inner.max_idle_per_host == 0 || self.inner.idle_timeout.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut idle = lock(&self.inner.idle);
        let stack = idle.entry(Arc::clone(&conn.key)).or_default();
        if stack.len() >= self.inner.max_idle_per_host {
            // The oldest goes: it is the likeliest to be closed by the upstream soon.
            stack.remove(0);
        }
        stack.push(Idle { conn, since: now });
    }

    #[cfg(test)]
    /// How many idle connections are kept for `key` (tests and diagnostics).
    pub(crate) fn idle_count(&self, key: &str) -> usize {
        lock(&self.inner.idle).get(key).map_or(0, Vec::len)
    }
}

/// Drops idle connections that expired or that the upstream closed (uvicorn's keep-alive timeout
/// is 5 s). Ends when the pool is dropped.
async fn sweep(pool: Weak<Inner>) {
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
        let mut kept = Vec::with_capacity(taken.len());
        for (key, mut stack) in taken {
            stack.retain_mut(|entry| {
                now.saturating_duration_since(entry.since) < pool.idle_timeout
                    && entry.conn.is_reusable()
            });
            kept.push((key, stack));
        }
        let mut current = lock(&pool.idle);
        for (key, mut survivors) in kept {
            let stack = current.entry(key).or_default();
            survivors.append(stack);
            let excess = survivors.len().saturating_sub(pool.max_idle_per_host);
            survivors.drain(..excess);
            *stack = survivors;
        }
        current.retain(|_, stack| !stack.is_empty());
    }
}

/// A poisoned lock only means a thread panicked mid-update; the pool stays usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
