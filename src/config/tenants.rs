//! `[tenants]`: who is calling, and the bound on the tenant label (see [`crate::tenant`]).
//!
//! Off by default (`sources = []`): no identity is read and no per-tenant series exist.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, ServerTlsConfig};

/// The `[tenants]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantsConfig {
    /// Where a request's tenant comes from, tried in this order: `header` (the value of
    /// `tenants.header`), `api_key` (the `Authorization: Bearer` key, looked up in `keys_file`),
    /// `client_cert` (the `cert_field` of the client certificate `[server.tls]` verified).
    /// Empty: tenants are off.
    pub sources: Vec<TenantSource>,
    /// The header that names the tenant, for the `header` source (set by a trusted gateway in
    /// front, never by an untrusted client).
    pub header: String,
    /// The API keys file of the `api_key` source: one `sha256:<64 hex digits> <tenant>` per line
    /// (the SHA-256 of the key, never the key), `#` comments. Also
    /// `TOKENMETER_TENANT_KEYS_FILE`, so that it can come from a mounted secret. Read at start
    /// and at each reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_file: Option<PathBuf>,
    /// Which name of the client certificate names the tenant, for the `client_cert` source.
    pub cert_field: CertField,
    /// A file holding the backend's API key: when set, the proxy sends `Authorization: Bearer
    /// <that key>` upstream in place of the client's header (tenants authenticate to the proxy
    /// with their own keys; the backend sees only the platform's). Also
    /// `TOKENMETER_UPSTREAM_KEY_FILE`. Read at start and at each reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_key_file: Option<PathBuf>,
    /// A request no source names: `allow` (counted as tenant `anonymous`) or `refuse` (401, an
    /// OpenAI-style error).
    pub anonymous: Anonymous,
    /// Tenants that get a label value of their own, at most, besides the tenants of the keys file
    /// and `tracked`; the rest are `other`, so a client cannot create series without bound.
    pub max_tenant_labels: usize,
    /// Tenants whose TTFT, TPOT and inter-token gaps are also histograms of their own.
    pub tracked: Vec<String>,
    /// Usage records: one JSON line per finished request (`[tenants.usage]`).
    pub usage: UsageConfig,
    /// Token budgets and rate limits per tenant (`[tenants.budgets]`).
    pub budgets: super::BudgetsConfig,
}

/// `[tenants.usage]`: where usage records go. Takes effect on restart.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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
    #[serde(with = "super::spelling::human_duration")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantSource {
    Header,
    ApiKey,
    ClientCert,
}

/// The name of a client certificate that names the tenant (the first of its kind in the
/// certificate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CertField {
    /// The subject's common name (`CN=team-a`).
    #[default]
    SubjectCn,
    /// A DNS name of the subject alternative names (`team-a.clients.example`).
    SanDns,
    /// A URI of the subject alternative names (a SPIFFE ID:
    /// `spiffe://example.org/ns/search/sa/indexer`).
    SanUri,
    /// An e-mail address of the subject alternative names.
    SanEmail,
}

impl CertField {
    /// The name as the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            CertField::SubjectCn => "subject_cn",
            CertField::SanDns => "san_dns",
            CertField::SanUri => "san_uri",
            CertField::SanEmail => "san_email",
        }
    }
}

/// What becomes of a request without a tenant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
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
            cert_field: CertField::SubjectCn,
            upstream_key_file: None,
            anonymous: Anonymous::Allow,
            max_tenant_labels: 100,
            tracked: Vec::new(),
            usage: UsageConfig::default(),
            budgets: super::BudgetsConfig::default(),
        }
    }
}

/// The environment variable naming the keys file (it wins over the file's key: a secret's mount
/// path is the deployment's to say).
pub(crate) const ENV_TENANT_KEYS_FILE: &str = "TOKENMETER_TENANT_KEYS_FILE";
/// The environment variable naming the backend's key file (it wins over the file's key, as
/// [`ENV_TENANT_KEYS_FILE`] does).
pub(crate) const ENV_UPSTREAM_KEY_FILE: &str = "TOKENMETER_UPSTREAM_KEY_FILE";

impl TenantsConfig {
    /// Tenants are on.
    pub fn enabled(&self) -> bool {
        !self.sources.is_empty()
    }

    /// The environment's file paths (a mounted Secret's), which win over the file's keys.
    pub(super) fn apply_env(&mut self, lookup: impl Fn(&'static str) -> Option<String>) {
        if let Some(path) = lookup(ENV_UPSTREAM_KEY_FILE).filter(|path| !path.trim().is_empty()) {
            self.upstream_key_file = Some(path.trim().into());
        }
    }

    /// What serde cannot check, each refusal naming its key; `server_tls` is the traffic
    /// listener's `[server.tls]` (the `client_cert` source needs its client certificates).
    pub(super) fn validate(&self, server_tls: Option<&ServerTlsConfig>) -> Result<(), ConfigError> {
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
        if self.sources.contains(&TenantSource::ClientCert)
            && !server_tls.is_some_and(|tls| tls.client_ca.is_some())
        {
            return Err(invalid(
                "sources",
                "client_cert needs [server.tls] with client_ca (client certificates required)",
            ));
        }
        if let Some(path) = &self.upstream_key_file {
            if path.as_os_str().is_empty() {
                return Err(invalid("upstream_key_file", "must be a file path"));
            }
            if !self.enabled() {
                return Err(invalid(
                    "upstream_key_file",
                    "needs tenants.sources: the backend's key is lent only to callers the proxy \
                     identifies",
                ));
            }
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
        self.budgets.validate()
    }
}
