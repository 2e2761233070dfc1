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
        Ok(())
    }
}
