//! The TLS tables of the configuration: `[server.tls]` / `[server.admin_tls]` (serving clients)
//! and `[upstream.tls]` / `[[pools]] tls` (talking to `https://` backends).
//!
//! Only the shape and the pairing of keys is checked here; the files are read when the server
//! starts ([`crate::tls`]), and a file that cannot be used stops it with the key named
//! (`server.tls.cert: cannot read /etc/...: No such file or directory`).
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// TLS on a listener. Absent: plain HTTP (as a sidecar on localhost needs).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA bundle: when set, every client must present a certificate it signed (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// How often the three files are read again; changed files are loaded for new connections
    /// (cert-manager rotates a Secret in place). `"0s"` = never.
    #[serde(
        default = "default_reload_interval",
        with = "super::spelling::human_duration"
    )]
    pub reload_interval: Duration,
}

fn default_reload_interval() -> Duration {
    Duration::from_secs(10)
}

/// TLS to `https://` upstreams; every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTlsConfig {
    /// PEM CA bundle trusted instead of the system's roots (a private CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain, for mTLS to the backend (with `key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// The name sent in SNI and verified against the backend's certificate, when it differs
    /// from the URL's host (a backend addressed by IP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

impl ServerTlsConfig {
    /// The files' paths must be given (an empty string is a typo, not "none").
    pub(super) fn validate(&self, table: &str) -> Result<(), ConfigError> {
        let empty = [("cert", Some(&self.cert)), ("key", Some(&self.key))]
            .into_iter()
            .chain([("client_ca", self.client_ca.as_ref())])
            .find(|(_, path)| path.is_some_and(|p| p.as_os_str().is_empty()));
        match empty {
            Some((name, _)) => Err(invalid(format!("{table}.{name}"), "must be a file path")),
            None => Ok(()),
        }
    }
}

/// The files of a TLS client (an upstream's, the budget store's) under `table`: `cert` and `key`
/// come together, and no path is empty.
pub(super) fn check_client_files(
    table: &str,
    ca: &Option<PathBuf>,
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
) -> Result<(), ConfigError> {
    match (cert, key) {
        (Some(_), None) => {
            return Err(invalid(
                format!("{table}.key"),
                "is required with `cert` (the client certificate's private key)",
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                format!("{table}.cert"),
                "is required with `key` (the client certificate chain)",
            ))
        }
        _ => {}
    }
    for (name, path) in [("ca", ca), ("cert", cert), ("key", key)] {
        if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(invalid(format!("{table}.{name}"), "must be a file path"));
        }
    }
    Ok(())
}

impl UpstreamTlsConfig {
    /// The files as [`check_client_files`] wants them; `server_name` must be a DNS name or an
    /// IP address.
    pub(super) fn validate(&self, table: &str) -> Result<(), ConfigError> {
        check_client_files(table, &self.ca, &self.cert, &self.key)?;
        if let Some(name) = &self.server_name {
            if rustls_pki_types::ServerName::try_from(name.as_str()).is_err() {
                return Err(invalid(
                    format!("{table}.server_name"),
                    &format!("{name:?} is not a DNS name or an IP address"),
                ));
            }
        }
        Ok(())
    }
}

fn invalid(key: String, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.to_owned(),
    }
}
