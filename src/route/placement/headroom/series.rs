//! A pool's headroom series: the signal each tick exports (their names and help texts are the
//! router's, [`crate::route::series`]).
use metrics::{Gauge, Label, SharedString};

use super::reading::Reading;
use crate::metrics::{Metrics, LABEL_POOL};
use crate::route::series::{
    POOL_CALIBRATION, POOL_CAPACITY, POOL_DESIRED, POOL_FORECAST, POOL_HEADROOM, POOL_OFFERED,
    POOL_READY,
};

/// A `balance = "slo"` pool's headroom handles.
#[derive(Debug, Clone)]
pub(crate) struct HeadroomMetrics {
    offered: Gauge,
    forecast: Gauge,
    capacity: Gauge,
    headroom: Gauge,
    desired: Gauge,
    ready: Gauge,
    calibration: Gauge,
}

impl HeadroomMetrics {
    pub fn new(metrics: &Metrics, pool: &str) -> Self {
        let pool = SharedString::from(pool.to_owned());
        let gauge =
            |name: &'static str| metrics.gauge(name, vec![Label::new(LABEL_POOL, pool.clone())]);
        Self {
            offered: gauge(POOL_OFFERED),
            forecast: gauge(POOL_FORECAST),
            capacity: gauge(POOL_CAPACITY),
            headroom: gauge(POOL_HEADROOM),
            desired: gauge(POOL_DESIRED),
            ready: gauge(POOL_READY),
            calibration: gauge(POOL_CALIBRATION),
        }
    }

    /// Exports one tick's reading; what is not known yet is NaN.
    pub fn show(&self, reading: &Reading) {
        self.offered.set(reading.offered);
        self.forecast.set(reading.forecast);
        self.capacity.set(reading.capacity.unwrap_or(f64::NAN));
        self.headroom.set(reading.headroom.unwrap_or(f64::NAN));
        self.desired.set(f64::from(reading.desired));
        self.ready.set(f64::from(reading.ready));
        self.calibration.set(reading.calibration);
    }
}
