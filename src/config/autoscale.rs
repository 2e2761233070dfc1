//! `[pools.autoscale]`: how a `balance = "slo"` pool turns its SLO headroom into the replica
//! count an autoscaler reads (`tokenmeter_pool_desired_replicas`; the signal itself is
//! [`crate::route::placement::headroom`]). Every `balance = "slo"` pool exports the signal; the
//! table only tunes it, and a pool that sets it places by `slo` under `balance = "auto"`.
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The largest `headroom` a pool may ask for: ten times its load is not a margin but a
/// different fleet.
const MOST_HEADROOM: f64 = 10.0;

/// The longest `cold_start`: a forecast an hour ahead from a minute's trend is a guess.
const MOST_COLD_START: Duration = Duration::from_secs(3600);

/// A pool's autoscaling signal.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoscaleConfig {
    /// The capacity to keep, as a multiple of the load offered: the replica count asked for is
    /// the least whose predicted capacity is `headroom` times the offered load (1.25: a quarter
    /// spare, for the minutes a new replica takes to start).
    pub headroom: f64,
    /// The fewest replicas ever asked for (at least 1: a missing signal or an idle pool never
    /// asks for none).
    pub min_replicas: u32,
    /// The most replicas ever asked for.
    pub max_replicas: u32,
    /// How long the offered load, the mix and the capacity are averaged over (an exponential
    /// moving average's time constant): shorter follows a ramp sooner, longer shrugs off a burst.
    #[serde(with = "super::spelling::human_duration")]
    pub window: Duration,
    /// How long the count asked for stays at the highest it was asked within (as Kubernetes' HPA
    /// stabilises a scale-down): it rises at once, and falls only after the load has stayed
    /// lower this long, so a count does not flap with the load's noise.
    #[serde(with = "super::spelling::human_duration")]
    pub scale_down_after: Duration,
    /// How long a replica takes from being asked for to serving (pulling its image, loading its
    /// weights): the count is asked for the offered load forecast this far ahead, from its
    /// trend when the load rises by more than its noise (0: asked for the load now).
    #[serde(with = "super::spelling::human_duration")]
    pub cold_start: Duration,
    /// How far the load must fall below the count's before the count follows it down: a lower
    /// count is asked only while it keeps `headroom × (1 + tolerance)` times the load (as an
    /// HPA's 10 % tolerance), so a load at the edge between two counts does not move it.
    pub tolerance: f64,
    /// The share of the pool's requests that must meet their SLO targets for the pool to count
    /// as within its capacity. The models' capacity is calibrated by what the requests measured:
    /// a minute below this share at a load lowers it, a minute at or above raises it to that load
    /// (see `route::placement::headroom`).
    pub objective: f64,
}

impl Default for AutoscaleConfig {
    fn default() -> Self {
        Self {
            headroom: 1.25,
            min_replicas: 1,
            max_replicas: 64,
            window: Duration::from_secs(15),
            scale_down_after: Duration::from_secs(300),
            cold_start: Duration::from_secs(60),
            tolerance: 0.1,
            objective: 0.95,
        }
    }
}

impl AutoscaleConfig {
    /// Checks the values' ranges; `key` names the table (`pools[i].autoscale`).
    pub(crate) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: &str| ConfigError::Invalid {
            key: format!("{key}.{field}"),
            message: message.to_owned(),
        };
        if !(self.headroom >= 1.0 && self.headroom <= MOST_HEADROOM) {
            return Err(invalid(
                "headroom",
                "must be a number from 1 to 10 (the capacity to keep, as a multiple of the load)",
            ));
        }
        if self.min_replicas == 0 {
            return Err(invalid(
                "min_replicas",
                "must be at least 1 (the signal never asks for no replica)",
            ));
        }
        if self.max_replicas < self.min_replicas {
            return Err(invalid("max_replicas", "must be at least min_replicas"));
        }
        if !(self.objective >= 0.5 && self.objective < 1.0) {
            return Err(invalid(
                "objective",
                "must be a share from 0.5 to below 1 (of the requests that meet their targets)",
            ));
        }
        if !(self.tolerance >= 0.0 && self.tolerance <= 1.0) {
            return Err(invalid(
                "tolerance",
                "must be a share from 0 to 1 (of the headroom kept before a count falls)",
            ));
        }
        if self.cold_start > MOST_COLD_START {
            return Err(invalid(
                "cold_start",
                "must be at most 1h (how long a replica takes from being asked to serving)",
            ));
        }
        if self.window.is_zero() {
            return Err(invalid("window", "must be greater than zero"));
        }
        Ok(())
    }
}
