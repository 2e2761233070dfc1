//! `[tenants.budgets]`: each tenant's token budgets and rate limits, and the store that keeps
//! them (see [`crate::tenant::budget`]).
//!
//! Off until a limit is set (in `[tenants.budgets.default]` or for one tenant under
//! `[tenants.budgets.tenant."name"]`). The limits are re-read at every reload (new requests take
//! them); the store (`memory` or a Redis URL) takes effect on restart.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::spelling::redacted;
use super::ConfigError;

/// The `[tenants.budgets]` table. Its `Debug` and its `Serialize` hide the store URL's password
/// (`serve --check` prints the config).
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// Where the budgets are kept: `memory` (this replica alone) or `redis://[user:password@]host:port[/db]`
    /// (every replica that names the same Redis enforces one budget; `rediss://` for TLS, with
    /// `store_tls`). Also
    /// `TOKENMETER_BUDGET_STORE`, which wins, so that a URL with a password can come from a
    /// Secret. Takes effect on restart.
    #[serde(serialize_with = "super::spelling::secret_url")]
    pub store: String,
    /// TLS to a `rediss://` store: the CA to trust instead of the system's roots, and a client
    /// certificate for a Redis that asks for one. Takes effect on restart.
    pub store_tls: StoreTlsConfig,
    /// `store` is a Redis Cluster: one or more of its nodes' URLs, comma-separated (the rest and
    /// the slots are learned from them). Takes effect on restart.
    pub store_cluster: bool,
    /// When the store does not answer within `store_timeout` (Redis down or slow): `allow` (the
    /// request goes on unchecked; its usage is still settled once the store is back) or `deny`
    /// (503 with `retry-after`).
    pub on_store_error: OnStoreError,
    /// How long an admission waits for the store, at most.
    #[serde(with = "super::spelling::human_duration")]
    pub store_timeout: Duration,
    /// Redis keys start with this (`<prefix>:{tenant}:...`).
    pub key_prefix: String,
    /// The output a request reserves when it names no `max_tokens` (nor `max_completion_tokens`,
    /// `max_output_tokens`, `n_predict`).
    pub default_max_tokens: u64,
    /// Redis only: a concurrent-stream slot whose replica died without releasing it is freed
    /// after this long (a stream that outlives it stops being counted).
    #[serde(with = "super::spelling::human_duration")]
    pub stream_lease: Duration,
    /// Settlements waiting for the store, at most (Redis only): past it one is dropped and
    /// counted, never waited for.
    pub settle_queue: usize,
    /// The limits of every tenant that has none of its own (each tenant gets its own budget of
    /// this size; `anonymous` is one tenant).
    pub default: Limits,
    /// Limits of named tenants, replacing `default` for them.
    pub tenant: BTreeMap<String, Limits>,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        Self {
            store: "memory".to_owned(),
            store_tls: StoreTlsConfig::default(),
            store_cluster: false,
            on_store_error: OnStoreError::Allow,
            store_timeout: Duration::from_millis(100),
            key_prefix: "tokenmeter".to_owned(),
            default_max_tokens: 1024,
            stream_lease: Duration::from_secs(15 * 60),
            settle_queue: 65_536,
            default: Limits::default(),
            tenant: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for BudgetsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            store,
            store_tls,
            store_cluster,
            on_store_error,
            store_timeout,
            key_prefix,
            default_max_tokens,
            stream_lease,
            settle_queue,
            default,
            tenant,
        } = self;
        f.debug_struct("BudgetsConfig")
            .field("store", &redacted(store))
            .field("store_tls", store_tls)
            .field("store_cluster", store_cluster)
            .field("on_store_error", on_store_error)
            .field("store_timeout", store_timeout)
            .field("key_prefix", key_prefix)
            .field("default_max_tokens", default_max_tokens)
            .field("stream_lease", stream_lease)
            .field("settle_queue", settle_queue)
            .field("default", default)
            .field("tenant", tenant)
            .finish()
    }
}

/// `[tenants.budgets.store_tls]`: TLS to a `rediss://` store; every key is optional. The name
/// verified against Redis's certificate is the URL's host (a DNS name, or an IP address the
/// certificate lists).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreTlsConfig {
    /// PEM CA bundle trusted instead of the system's roots (a private CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain, for a Redis that verifies its clients (with `key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl StoreTlsConfig {
    fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

/// One tenant's limits; an absent limit does not apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Which tokens `tokens_per_minute` and `tokens_per_day` count.
    pub counts: Counts,
    /// Tokens in any 60 s (a sliding window: the current minute plus the share of the last one
    /// still inside it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    /// Tokens in the current UTC day.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// Requests in any 60 s (sliding, as `tokens_per_minute`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    /// Requests in flight at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrent_streams: Option<u64>,
}

impl Limits {
    /// Any limit is set.
    pub fn any(&self) -> bool {
        let Self {
            counts: _,
            tokens_per_minute,
            tokens_per_day,
            requests_per_minute,
            concurrent_streams,
        } = self;
        tokens_per_minute.is_some()
            || tokens_per_day.is_some()
            || requests_per_minute.is_some()
            || concurrent_streams.is_some()
    }

    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        let limits = [
            ("tokens_per_minute", self.tokens_per_minute),
            ("tokens_per_day", self.tokens_per_day),
            ("requests_per_minute", self.requests_per_minute),
            ("concurrent_streams", self.concurrent_streams),
        ];
        for (name, limit) in limits {
            if limit == Some(0) {
                return Err(ConfigError::Invalid {
                    key: format!("{key}.{name}"),
                    message: "must be greater than zero (leave it out for no limit)".to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// Which tokens a token limit counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Counts {
    Input,
    Output,
    #[default]
    Total,
}

/// What an admission does when the store does not answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    #[default]
    Allow,
    Deny,
}

/// The environment variable naming the store (it wins over the file's `store`).
pub(crate) const ENV_BUDGET_STORE: &str = "TOKENMETER_BUDGET_STORE";

/// Where the budgets are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Memory,
    /// A `redis://` URL (it may carry a password: never log it).
    Redis(String),
}

impl BudgetsConfig {
    /// Some tenant has a limit.
    pub fn enabled(&self) -> bool {
        self.default.any() || self.tenant.values().any(Limits::any)
    }

    /// The limits of `tenant`: its own, else the default; `None` when nothing limits it.
    pub fn limits_for(&self, tenant: &str) -> Option<&Limits> {
        let limits = self.tenant.get(tenant).unwrap_or(&self.default);
        limits.any().then_some(limits)
    }

    /// Copies the restart-only keys of `running` into `self`.
    pub fn keep_store(&mut self, running: &Self) {
        self.store.clone_from(&running.store);
        self.store_tls.clone_from(&running.store_tls);
        self.store_cluster = running.store_cluster;
        self.store_timeout = running.store_timeout;
        self.key_prefix.clone_from(&running.key_prefix);
        self.stream_lease = running.stream_lease;
        self.settle_queue = running.settle_queue;
    }

    /// The store `store` names.
    pub fn store_url(&self) -> StoreUrl {
        let store = self.store.trim();
        if store == "memory" {
            StoreUrl::Memory
        } else {
            StoreUrl::Redis(store.to_owned())
        }
    }

    /// What serde cannot check, each refusal naming its key (never repeating a URL: it may carry
    /// a password).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: format!("tenants.budgets.{key}"),
            message: message.to_owned(),
        };
        check_store(
            "tenants.budgets",
            &self.store,
            self.store_cluster,
            &self.store_tls,
            true,
        )?;
        if self.store_timeout.is_zero() {
            return Err(invalid("store_timeout", "must be greater than zero"));
        }
        if self.stream_lease < Duration::from_secs(1) {
            return Err(invalid("stream_lease", "must be at least 1s"));
        }
        if self.settle_queue == 0 {
            return Err(invalid("settle_queue", "must be greater than zero"));
        }
        if self.default_max_tokens == 0 {
            return Err(invalid("default_max_tokens", "must be greater than zero"));
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(invalid(
                "key_prefix",
                "must be non-empty and hold no '{' or '}' (they mark the tenant's hash tag)",
            ));
        }
        self.default.validate("tenants.budgets.default")?;
        for (name, limits) in &self.tenant {
            limits.validate(&format!("tenants.budgets.tenant.{name:?}"))?;
        }
        Ok(())
    }
}

/// Checks a store's URLs and TLS files, each refusal naming its key under `table`
/// (`tenants.budgets`, `fleet`); `"memory"` passes where `memory` says it may be. Never repeats a
/// URL: it may carry a password.
pub(super) fn check_store(
    table: &str,
    store: &str,
    cluster: bool,
    tls_files: &StoreTlsConfig,
    memory: bool,
) -> Result<(), ConfigError> {
    let invalid = |key: &str, message: &str| ConfigError::Invalid {
        key: format!("{table}.{key}"),
        message: message.to_owned(),
    };
    let store = store.trim();
    let urls: Vec<&str> = store.split(',').map(str::trim).collect();
    let tls = urls.iter().all(|url| url.starts_with("rediss://"));
    let redis = urls
        .iter()
        .all(|url| url.starts_with("redis://") || url.starts_with("rediss://"));
    if !(redis || memory && store == "memory") {
        return Err(invalid(
            "store",
            if memory {
                "must be \"memory\", a redis:// URL, or a rediss:// URL (Redis over TLS)"
            } else {
                "must be a redis:// URL, or a rediss:// URL (Redis over TLS)"
            },
        ));
    }
    if urls.len() > 1 && !cluster {
        return Err(invalid(
            "store",
            "names several URLs: that is a Redis Cluster's nodes, with store_cluster = true",
        ));
    }
    if cluster && store == "memory" {
        return Err(invalid(
            "store_cluster",
            "needs the store to be the cluster's node URLs (redis:// or rediss://)",
        ));
    }
    if redis && !tls && urls.iter().any(|url| url.starts_with("rediss://")) {
        return Err(invalid(
            "store",
            "mixes redis:// and rediss:// nodes: a cluster is all TLS or none",
        ));
    }
    if tls_files.any() && !tls {
        return Err(invalid(
            "store_tls",
            "applies to a rediss:// store only (the store is not one)",
        ));
    }
    super::tls::check_client_files(
        &format!("{table}.store_tls"),
        &tls_files.ca,
        &tls_files.cert,
        &tls_files.key,
    )?;
    Ok(())
}
