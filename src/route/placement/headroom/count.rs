//! The replica count a pool's headroom asks for, from the load forecast and the capacity: the
//! least count that keeps `headroom` times the load, rising at once, falling only to a count that
//! keeps the tolerance's margin too and only once it has been lower for `scale_down_after`.
use std::collections::VecDeque;

use tokio::time::Instant;

use crate::config::AutoscaleConfig;

/// The counts a pool asked for, and the rules they follow.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// The counts asked for within `scale_down_after`, oldest first.
    asked: VecDeque<(Instant, u32)>,
    /// The count asked for last: what a tick that knows nothing holds to.
    held: Option<u32>,
}

impl Asked {
    /// The count to ask for at `now`: from `forecast` requests a second against `capacity` over
    /// `ready` replicas; with no capacity known (or none sustained: every backend misses even
    /// idle), the count asked last (at first, the replicas available).
    pub fn ask(
        &mut self,
        settings: &AutoscaleConfig,
        forecast: f64,
        capacity: Option<f64>,
        ready: u32,
        now: Instant,
    ) -> u32 {
        let held = self.held.unwrap_or_else(|| bounded(settings, ready));
        let asked = match capacity {
            Some(capacity) if capacity > 0.0 => {
                let headroom = settings.headroom;
                let asked = needed(settings, forecast, capacity, ready, headroom);
                // Down only as far as keeps the tolerance's margin too.
                let spare = headroom * (1.0 + settings.tolerance);
                asked.max(needed(settings, forecast, capacity, ready, spare).min(held))
            }
            _ => held,
        };
        let desired = self.stabilised(settings, now, asked);
        self.held = Some(desired);
        desired
    }

    /// The highest count asked within `scale_down_after`, `asked` now included.
    fn stabilised(&mut self, settings: &AutoscaleConfig, now: Instant, asked: u32) -> u32 {
        while let Some(&(at, _)) = self.asked.front() {
            if now.saturating_duration_since(at) <= settings.scale_down_after {
                break;
            }
            self.asked.pop_front();
        }
        self.asked.push_back((now, asked));
        self.asked
            .iter()
            .map(|&(_, count)| count)
            .max()
            .unwrap_or(asked)
    }
}

/// The least replica count whose capacity, at `capacity / ready` a replica, is `headroom` times
/// `load`; within the bounds.
fn needed(settings: &AutoscaleConfig, load: f64, capacity: f64, ready: u32, headroom: f64) -> u32 {
    let per_replica = capacity / f64::from(ready.max(1));
    let replicas = (load * headroom / per_replica).ceil();
    // A float beyond u32 saturates in the cast.
    bounded(settings, replicas as u32)
}

fn bounded(settings: &AutoscaleConfig, replicas: u32) -> u32 {
    replicas.clamp(settings.min_replicas, settings.max_replicas)
}
