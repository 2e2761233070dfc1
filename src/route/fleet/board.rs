//! The others' load on each backend, replica by replica: from each sync's payloads, and between
//! them from the news each replica sends as it places a request ([`super::news`]). Whichever
//! of a replica's writings is newer holds for a backend (its [`Stamp`]); the board sums the
//! others' per backend as [`crate::route::backend::Backend::set_others`] takes them.
//!
//! A payload is up to an interval old when it is read, a news a millisecond or so: with payloads
//! alone, four gated gateways each released requests into the room a backend had at the last
//! sync, and together into four times it (docs/deploying.md). A news' figures hold over a
//! payload written before it, and at most `keep` (two intervals, when the payload after it
//! must have been read): a news lost, or a replica that went quiet after it, costs no more
//! than the payloads' staleness did.
use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::payload::{Figures, Stamp};
use super::view::View;

/// One replica's load on one backend, as its last writing read said.
#[derive(Debug, Clone, Copy)]
struct Post {
    stamp: Option<Stamp>,
    streams: u64,
    queued_tokens: u64,
    /// Until when a long prefill it placed there stalls the backend's streams.
    stalls_until: Option<Instant>,
    /// When its news was heard; `None` for a payload's figures.
    heard: Option<Instant>,
}

impl Post {
    fn new(stamp: Option<Stamp>, figures: Figures, now: Instant, heard: Option<Instant>) -> Self {
        Self {
            stamp,
            streams: figures.streams,
            queued_tokens: figures.queued_tokens,
            stalls_until: (!figures.stall.is_zero()).then(|| now + figures.stall),
            heard,
        }
    }

    /// Whether it is a news that still holds over a payload stamped `payload` at `now`.
    fn holds_over(&self, payload: Option<Stamp>, now: Instant, keep: Duration) -> bool {
        let fresh = self
            .heard
            .is_some_and(|heard| now.saturating_duration_since(heard) < keep);
        let newer = match (self.stamp, payload) {
            (Some(news), Some(payload)) => news.after(payload),
            _ => false,
        };
        fresh && newer
    }
}

/// Per pool, per backend, per replica: what it last said of its load there.
type Posts = HashMap<String, HashMap<String, HashMap<String, Post>>>;

/// The others' load per backend, replica by replica.
#[derive(Debug)]
pub struct Board {
    posts: Posts,
    /// How long a news holds over the payloads read after it.
    keep: Duration,
}

impl Board {
    pub fn new(keep: Duration) -> Self {
        Self {
            posts: HashMap::new(),
            keep,
        }
    }

    /// Takes a sync's `view`, read at `now`: each replica's payload replaces what it said
    /// before, but for its news written after the payload; a replica not in the view is
    /// forgotten.
    pub fn read(&mut self, view: &View, now: Instant) {
        let mut next = Posts::new();
        for posted in &view.loads {
            let stamp = view.stamps.get(posted.replica).copied();
            next.entry(posted.pool.to_owned())
                .or_default()
                .entry(posted.backend.to_owned())
                .or_default()
                .insert(
                    posted.replica.to_owned(),
                    Post::new(stamp, posted.figures, now, None),
                );
        }
        let live = |replica: &str| view.gateways.iter().any(|&(name, _)| name == replica);
        for (pool, backends) in self.posts.drain() {
            for (backend, replicas) in backends {
                for (replica, post) in replicas {
                    let payload = view.stamps.get(replica.as_str()).copied();
                    if live(&replica) && post.holds_over(payload, now, self.keep) {
                        next.entry(pool.clone())
                            .or_default()
                            .entry(backend.clone())
                            .or_default()
                            .insert(replica, post);
                    }
                }
            }
        }
        self.posts = next;
    }

    /// Takes `replica`'s news stamped `stamp`, heard at `now`: its load on each backend named,
    /// where newer than what it said of it before. Whether anything changed.
    pub fn hear<'a>(
        &mut self,
        replica: &str,
        stamp: Stamp,
        loads: impl IntoIterator<Item = (&'a str, &'a str, Figures)>,
        now: Instant,
    ) -> bool {
        let mut changed = false;
        for (pool, backend, figures) in loads {
            let replicas = self
                .posts
                .entry(pool.to_owned())
                .or_default()
                .entry(backend.to_owned())
                .or_default();
            let stale = replicas.get(replica).and_then(|post| post.stamp);
            // A payload or news of an earlier run of the replica (another epoch) is over too.
            if stale.is_some_and(|stale| stale.epoch == stamp.epoch && !stamp.after(stale)) {
                continue;
            }
            replicas.insert(
                replica.to_owned(),
                Post::new(Some(stamp), figures, now, Some(now)),
            );
            changed = true;
        }
        changed
    }

    /// The others' load on `backend` of `pool` at `now`, summed: their streams and queues add,
    /// the longest stall holds.
    pub fn sum(&self, pool: &str, backend: &str, now: Instant) -> Figures {
        let mut sum = Figures::default();
        let Some(replicas) = self
            .posts
            .get(pool)
            .and_then(|backends| backends.get(backend))
        else {
            return sum;
        };
        for post in replicas.values() {
            let stall = post
                .stalls_until
                .map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
            sum.add(Figures {
                streams: post.streams,
                queued_tokens: post.queued_tokens,
                stall,
            });
        }
        sum
    }

    /// Forgets everything (the store unanswered: routing on this replica's own view).
    pub fn clear(&mut self) {
        self.posts.clear();
    }
}

#[cfg(test)]
mod tests;
