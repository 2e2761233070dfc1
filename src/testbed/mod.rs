//! The testbed: what tokenmeter needs around it to be tried, measured and demonstrated without a
//! GPU, kept apart from the proxy so that the sidecar can be built without it.
//!
//! - [`sim`]: a simulated vLLM replica (`tokenmeter sim`), whose timing comes from a model of
//!   vLLM's continuous-batching engine.
//! - [`mod@bench`]: a load generator (`tokenmeter bench`): arrivals, workload classes, the client
//!   that times each stream, the SLO report.
//! - [`demo`]: the one-command demo (`tokenmeter demo`): simulated replicas, the proxy in front of
//!   them and a mixed load in one process, then the SLO table.
//!
//! The proxy never depends on this module; the dependencies point from here to the proxy
//! (`demo` runs [`crate::server`] and reads [`crate::exposition`]).
pub mod bench;
pub mod demo;
pub mod sim;
