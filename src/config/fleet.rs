//! `[fleet]`: gateway replicas that share their load through a store (see
//! [`crate::route::fleet`]). Off until `store` names one.
//!
//! Every key takes effect on restart: the store's connection and the replica's name are made
//! once.
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::budgets::{check_store, StoreTlsConfig};
use super::ConfigError;

/// The environment variable naming the fleet's store (it wins over the file's `store`, so that a
/// URL with a password can come from a Secret).
pub(crate) const ENV_FLEET_STORE: &str = "TOKENMETER_FLEET_STORE";
/// The environment variable naming this replica (Kubernetes sets `HOSTNAME` to the pod's name).
const ENV_HOSTNAME: &str = "HOSTNAME";

/// The `[fleet]` table. Its `Debug` and its `Serialize` hide the store URL's password.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// The Redis every replica of the fleet names: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` with `store_tls`; empty = off (each replica sees only its own load). Also
    /// `TOKENMETER_FLEET_STORE`, which wins. May be the budgets' Redis.
    #[serde(serialize_with = "super::spelling::secret_url")]
    pub store: String,
    /// TLS to a `rediss://` store, as for budgets.
    pub store_tls: StoreTlsConfig,
    /// `store` is a Redis Cluster: some of its nodes' URLs, comma-separated.
    pub store_cluster: bool,
    /// How often each replica publishes its load on every backend and reads the others' (one
    /// round trip each time, never one per request). A replica that stops publishing is
    /// forgotten two intervals later; one cut off from the store goes back to its own view
    /// after two intervals without an answer.
    #[serde(with = "super::spelling::human_duration")]
    pub interval: Duration,
    /// Between payloads, tell the others at once of each placement's change to this replica's
    /// load on a backend, over the store's pub/sub (at most one message per 5 ms; never through
    /// a Redis Cluster, whose payloads alone carry the load).
    pub news: bool,
    /// This replica's name in the store, unique in the fleet. Empty: `$HOSTNAME` (a pod's
    /// name), else a random one.
    pub replica: String,
    /// The store's key is `<key_prefix>:fleet:{load}`: replicas with the same prefix are one
    /// fleet.
    pub key_prefix: String,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            store: String::new(),
            store_tls: StoreTlsConfig::default(),
            store_cluster: false,
            interval: Duration::from_millis(250),
            news: true,
            replica: String::new(),
            key_prefix: "tokenmeter".to_owned(),
        }
    }
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            store,
            store_tls,
            store_cluster,
            interval,
            news,
            replica,
            key_prefix,
        } = self;
        f.debug_struct("FleetConfig")
            .field("store", &super::spelling::redacted(store))
            .field("store_tls", store_tls)
            .field("store_cluster", store_cluster)
            .field("interval", interval)
            .field("news", news)
            .field("replica", replica)
            .field("key_prefix", key_prefix)
            .finish()
    }
}

impl FleetConfig {
    /// A store is named.
    pub fn enabled(&self) -> bool {
        !self.store.trim().is_empty()
    }

    /// This replica's name: `replica`, else `$HOSTNAME`, else random (one per process).
    pub fn replica_name(&self) -> String {
        let named = self.replica.trim();
        if !named.is_empty() {
            return named.to_owned();
        }
        std::env::var(ENV_HOSTNAME)
            .ok()
            .map(|host| host.trim().to_owned())
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| format!("tokenmeter-{:016x}", rand::random::<u64>()))
    }

    /// What serde cannot check, each refusal naming its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: format!("fleet.{key}"),
            message: message.to_owned(),
        };
        if self.enabled() {
            check_store(
                "fleet",
                &self.store,
                self.store_cluster,
                &self.store_tls,
                false,
            )?;
        } else if self.store_cluster {
            return Err(invalid("store_cluster", "needs a store"));
        }
        if self.interval < Duration::from_millis(10) || self.interval > Duration::from_secs(60) {
            return Err(invalid("interval", "must be between 10ms and 60s"));
        }
        if self.replica.contains(char::is_whitespace) {
            return Err(invalid("replica", "must hold no whitespace"));
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(invalid(
                "key_prefix",
                "must be non-empty and hold no '{' or '}' (they mark the key's hash tag)",
            ));
        }
        Ok(())
    }
}
