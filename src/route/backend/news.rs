//! Whether this replica's load on the backend changed since it last told its fleet, and whom to
//! wake when it does (`[fleet]`'s news, [`crate::route::fleet`]). Without a fleet nothing is
//! attached, and marking costs one atomic load.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(super) struct News {
    /// The fleet's sync task, woken to tell the others.
    desk: ArcSwapOption<Notify>,
    changed: AtomicBool,
}

impl News {
    /// Says the load changed: marked, and the sync task woken, when a fleet listens.
    pub fn mark(&self) {
        if let Some(desk) = self.desk.load().as_ref() {
            self.changed.store(true, Ordering::Relaxed);
            desk.notify_one();
        }
    }

    /// Whether it changed since the last call (and forgets it).
    pub fn take(&self) -> bool {
        self.changed.swap(false, Ordering::Relaxed)
    }

    /// Wakes `desk` at every change from now on (a reload's sync task replaces the last one's).
    pub fn attach(&self, desk: &Arc<Notify>) {
        let attached = self.desk.load();
        if !attached.as_ref().is_some_and(|a| Arc::ptr_eq(a, desk)) {
            self.desk.store(Some(Arc::clone(desk)));
        }
    }
}
