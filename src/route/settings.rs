//! The `[routing]` settings (and the upstream's connect timeout) that every request's routing
//! reads, compiled once per config revision.
use std::collections::BTreeMap;
use std::time::Duration;

use super::health::EjectPolicy;
use crate::config::Config;

/// The `[routing]` settings every request's routing reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub policy: EjectPolicy,
    pub retries: u32,
    pub fallback: bool,
    pub dns_refresh: Duration,
    /// Bound on one active health check or scrape.
    pub probe_timeout: Duration,
    pub tokenize: bool,
    pub tokenize_timeout: Duration,
    pub prefix_block_bytes: usize,
    pub prefix_key_blocks: usize,
    /// What the calibrator is made from (prior, window, per-model priors): a reload that changes
    /// none keeps it, and what it learned.
    pub calibration: (f64, u32, BTreeMap<String, f64>),
}

impl Settings {
    pub fn of(config: &Config) -> Self {
        let routing = &config.routing;
        Self {
            policy: EjectPolicy::from_config(routing),
            retries: routing.retries,
            fallback: routing.fallback,
            dns_refresh: routing.dns_refresh,
            probe_timeout: config.upstream.connect_timeout + Duration::from_secs(1),
            tokenize: routing.tokenize,
            tokenize_timeout: routing.tokenize_timeout,
            prefix_block_bytes: routing.prefix_block_bytes,
            prefix_key_blocks: routing.prefix_key_blocks,
            calibration: (
                routing.prior_tokens_per_byte,
                routing.calibration_window,
                routing.model_tokens_per_byte.clone(),
            ),
        }
    }
}
