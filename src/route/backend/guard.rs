//! A request's load on its backend, held from the pick until its response body ends.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::Backend;
use crate::upstream::BodyGuard;

/// A request's load on its backend: counted from the pick until the response body ends (the
/// guard travels in the body), its prompt tokens only until the first response byte.
#[derive(Debug)]
pub struct LoadGuard {
    backend: Arc<Backend>,
    prompt_tokens: u64,
    prefill_done: AtomicBool,
}

impl LoadGuard {
    pub fn new(backend: Arc<Backend>, prompt_tokens: u64) -> Self {
        backend.streams.fetch_add(1, Ordering::Relaxed);
        let before = backend
            .queued_tokens
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        if before == 0 && prompt_tokens > 0 {
            backend.queue_moved(Instant::now());
        }
        if let Some(m) = &backend.metrics {
            m.inflight.increment(1.0);
        }
        backend.news.mark();
        Self {
            backend,
            prompt_tokens,
            prefill_done: AtomicBool::new(false),
        }
    }

    fn end_prefill(&self) {
        if !self.prefill_done.swap(true, Ordering::Relaxed) {
            self.backend
                .queued_tokens
                .fetch_sub(self.prompt_tokens, Ordering::Relaxed);
            if self.prompt_tokens > 0 {
                self.backend.queue_moved(Instant::now());
            }
        }
    }
}

impl BodyGuard for LoadGuard {
    fn first_frame(&self) {
        self.end_prefill();
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.end_prefill();
        self.backend.streams.fetch_sub(1, Ordering::Relaxed);
        if let Some(m) = &self.backend.metrics {
            m.inflight.decrement(1.0);
        }
    }
}
