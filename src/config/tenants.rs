//! `[tenants]`: who is calling, and the bound on the tenant label (see [`crate::tenant`]).
//!
//! Off by default (`sources = []`): no identity is read and no per-tenant series exist.
use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// The `[tenants]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantsConfig {
    /// Where a request's tenant comes from, tried in this order: `header` (the value of
    /// `tenants.header`), `api_key` (the `Authorization: Bearer` key, looked up in `keys_file`).
    /// Empty: tenants are off.
    pub sources: Vec<TenantSource>,
    /// The header that names the tenant, for the `header` source (set by a trusted gateway in
    /// front, never by an untrusted client).
    pub header: String,
    /// The API keys file of the `api_key` source: one `sha256:<64 hex digits> <tenant>` per line
    /// (the SHA-256 of the key, never the key), `#` comments. Also
    /// `TOKENMETER_TENANT_KEYS_FILE`, so that it can come from a mounted secret. Read at start
    /// and at each reload.
    pub keys_file: Option<PathBuf>,
    /// A request no source names: `allow` (counted as tenant `anonymous`) or `refuse` (401, an
    /// OpenAI-style error).
    pub anonymous: Anonymous,
    /// Tenants that get a label value of their own, at most, besides the tenants of the keys file
    /// and `tracked`; the rest are `other`, so a client cannot create series without bound.
    pub max_tenant_labels: usize,
    /// Tenants whose TTFT and TPOT are also histograms of their own.
    pub tracked: Vec<String>,
    /// Usage records: one JSON line per finished request (`[tenants.usage]`).
    pub usage: UsageConfig,
}

/// `[tenants.usage]`: where usage records go. Takes effect on restart.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// A file (rotated by size), `-` for stdout, or empty: no records.
    pub path: String,
    /// A file past this many bytes is rotated: `path` becomes `path.1`, `path.1` becomes
    /// `path.2`, ...
    pub max_file_bytes: u64,
    /// Rotated files kept (`path.1` to `path.N`).
    pub keep_files: u32,
    /// Records waiting to be written, at most: past it a record is dropped and counted, never
    /// waited for.
    pub queue_records: usize,
    /// Written records reach the file at least this often (a crash loses at most this much).
    #[serde(deserialize_with = "super::duration")]
    pub flush_interval: std::time::Duration,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            path: String::new(),
            max_file_bytes: 100 * 1024 * 1024,
            keep_files: 5,
            queue_records: 65_536,
            flush_interval: std::time::Duration::from_secs(1),
        }
    }
}

impl UsageConfig {
    /// Records are written.
    pub fn enabled(&self) -> bool {
        !self.path.trim().is_empty()
    }
}

/// An identity source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantSource {
    Header,
    ApiKey,
}

/// What becomes of a request without a tenant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anonymous {
    #[default]
    Allow,
    Refuse,
}

impl Default for TenantsConfig {
    fn default() -> Self {
        Self {
            sources: Vec::new(),
            header: "x-tenant-id".to_owned(),
            keys_file: None,
            anonymous: Anonymous::Allow,
            max_tenant_labels: 100,
            tracked: Vec::new(),
            usage: UsageConfig::default(),
        }
    }
}

/// The environment variable naming the keys file (it wins over the file's key: a secret's mount
/// path is the deployment's to say).
pub const ENV_TENANT_KEYS_FILE: &str = "TOKENMETER_TENANT_KEYS_FILE";

impl TenantsConfig {
    /// Tenants are on.
    pub fn enabled(&self) -> bool {
        !self.sources.is_empty()
    }

    /// What serde cannot check, each refusal naming its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: format!("tenants.{key}"),
            message: message.to_owned(),
        };
        if self.sources.contains(&TenantSource::Header)
            && http::HeaderName::from_bytes(self.header.as_bytes()).is_err()
        {
            return Err(invalid("header", "is not a valid header name"));
        }
        let mut seen = Vec::new();
        for source in &self.sources {
            if seen.contains(source) {
                return Err(invalid("sources", "names a source twice"));
            }
            seen.push(*source);
        }
        if self.max_tenant_labels == 0 {
            return Err(invalid("max_tenant_labels", "must be greater than zero"));
        }
        let usage = &self.usage;
        if usage.max_file_bytes < 4096 {
            return Err(invalid("usage.max_file_bytes", "must be at least 4096"));
        }
        if usage.queue_records == 0 {
            return Err(invalid("usage.queue_records", "must be greater than zero"));
        }
        if usage.flush_interval.is_zero() {
            return Err(invalid("usage.flush_interval", "must be greater than zero"));
        }
        Ok(())
    }
}
