//! What one tick of a pool's headroom says.

/// One tick's signal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Requests a second offered to the pool.
    pub offered: f64,
    /// The offered load one `cold_start` ahead, from its trend (the offered load itself when it
    /// does not rise by more than its noise): what the count is asked for.
    pub forecast: f64,
    /// Requests a second the pool's available backends sustain within its targets; `None`
    /// before the models and the mix are known, or with no backend available.
    pub capacity: Option<f64>,
    /// Backends available now.
    pub ready: u32,
    /// `capacity / offered`, at most [`super::MOST_RATIO`]; `None` with the capacity.
    pub headroom: Option<f64>,
    /// What the models' capacity is multiplied by to make `capacity` ([`super::calibration`]).
    pub calibration: f64,
    /// The replicas to run.
    pub desired: u32,
}
