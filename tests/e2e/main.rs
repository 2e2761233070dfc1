//! The end-to-end suite in one test binary (one link of the crate, not sixty): the proxy, the
//! testbed and the real servers (nginx, Redis, Prometheus, llama-server, the OpenAI SDK) over
//! loopback, and the checks of the repository's own files (docs/architecture.md's map,
//! dashboards, manifests).
//!
//! Tests here run in parallel with each other, so none may depend on the machine being idle or
//! measure the process as a whole: a timing bound is causal or generous (`support/timeline.rs`),
//! and every port a test releases and reuses comes from `support/ports.rs`. What measures the
//! whole process (allocations, RSS, open fds) or holds a model to its timing is in
//! `tests/serial/`, one test at a time.
#[path = "../prometheus_support/mod.rs"]
mod prometheus_support;
#[cfg(feature = "testbed")]
#[path = "../sim_support/mod.rs"]
mod sim_support;
#[path = "../support/mod.rs"]
mod support;

mod architecture_map;
#[cfg(feature = "testbed")]
mod bench_report;
mod budget_cluster;
mod budget_e2e;
mod budget_once;
mod budget_redis;
mod budget_tls;
mod config_reload;
#[cfg(feature = "testbed")]
mod crosscheck;
mod deploy_manifests;
mod dialect_fixtures;
mod dialect_routing;
mod dialect_skim;
mod docs_config;
#[cfg(feature = "testbed")]
mod embedder;
mod file_length;
mod finish_point;
#[cfg(feature = "testbed")]
mod fleet_designation;
mod fleet_llama;
mod fleet_redis;
mod llama_handoff;
mod llama_server;
mod metrics_protobuf;
mod module_graph;
mod otlp_receiver;
mod perf_upstream_reuse;
mod prometheus_dashboard;
#[cfg(feature = "testbed")]
mod prometheus_e2e;
mod prometheus_native;
mod prometheus_outcomes;
mod prometheus_rules;
mod protobuf_schema;
#[cfg(feature = "testbed")]
mod proxy_dialects;
mod proxy_faults;
mod proxy_http;
mod proxy_loop;
#[cfg(feature = "testbed")]
mod proxy_nonstream;
mod proxy_stream;
#[cfg(feature = "testbed")]
mod real_clients;
mod reliability_binary;
mod reliability_hostile;
mod reliability_props;
mod reliability_soak;
#[cfg(feature = "testbed")]
mod route_affinity;
#[cfg(feature = "testbed")]
mod route_e2e;
mod route_handoff;
#[cfg(feature = "testbed")]
mod route_headroom;
mod route_health;
#[cfg(feature = "testbed")]
mod route_slo;
#[cfg(feature = "testbed")]
mod route_tokenize;
mod serve_binary;
mod server_sniff;
#[cfg(feature = "testbed")]
mod sim_dialects;
#[cfg(feature = "testbed")]
mod sim_lifecycle;
#[cfg(feature = "testbed")]
mod sim_stream;
mod sse_fixtures;
mod tenant_e2e;
mod tenant_mtls;
mod tenant_upstream_key;
mod tls_server;
mod tls_upstream;
mod trace_e2e;
