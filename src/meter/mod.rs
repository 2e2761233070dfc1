//! Metering: request inspection, usage injection, the metered response body.
pub mod dialect;
pub mod request;
