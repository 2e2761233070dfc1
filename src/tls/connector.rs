//! TLS to `https://` upstreams: one `rustls::ClientConfig` per TLS table (`[upstream.tls]`, or a
//! pool's own `tls`), and per backend the name it is verified as.
//!
//! Trust: the CA bundle of `ca` when given (a private CA), else the system's roots
//! (`/etc/ssl/certs` on Debian, or `SSL_CERT_FILE` / `SSL_CERT_DIR`). ALPN offers only
//! `http/1.1`, the protocol tokenmeter speaks upstream. Session resumption is rustls's default
//! (an in-memory cache), so a new pooled connection to a backend seen before skips a round trip.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::pem::{invalid, PemFile};
use super::provider;
use crate::config::{ConfigError, UpstreamTlsConfig};

/// One TLS table, loaded: what every `https://` backend it covers is connected with.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
    /// What it was loaded from (the table, and the files' bytes), so a reload that changes
    /// neither keeps it, and with it the pooled connections and backends it made.
    source: (UpstreamTlsConfig, Vec<PemFile>),
    /// Unique per loaded table: pooled connections made with one table's trust and client
    /// certificate are never handed to a backend of another.
    id: u64,
}

/// TLS to one backend: the table's connector and the name its certificate must carry.
#[derive(Clone)]
pub struct UpstreamTls {
    pub connector: TlsConnector,
    pub server_name: ServerName<'static>,
    /// The connection-pool key prefix: connections are only reused for the same table and name.
    pub pool_tag: Arc<str>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl TlsClient {
    /// Loads `table` (`upstream.tls`, `pools[2].tls`); errors name the key.
    pub fn load(table: &str, config: &UpstreamTlsConfig) -> Result<Self, ConfigError> {
        Self::reload(table, config, None)
    }

    /// [`TlsClient::load`], or `previous` itself when neither the table nor its files changed.
    pub fn reload(
        table: &str,
        config: &UpstreamTlsConfig,
        previous: Option<&TlsClient>,
    ) -> Result<Self, ConfigError> {
        let read = |name: &str, path: &Option<std::path::PathBuf>| match path {
            Some(path) => PemFile::read(format!("{table}.{name}"), path).map(Some),
            None => Ok(None),
        };
        let (ca, cert, key) = (
            read("ca", &config.ca)?,
            read("cert", &config.cert)?,
            read("key", &config.key)?,
        );
        let files: Vec<PemFile> = [&ca, &cert, &key].into_iter().flatten().cloned().collect();
        let source = (config.clone(), files);
        if let Some(previous) = previous.filter(|p| p.source == source) {
            return Ok(previous.clone());
        }
        let provider = provider();
        let roots = match &ca {
            Some(ca) => ca.roots()?,
            None => system_roots(),
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| invalid(format!("{table}.ca"), err.to_string()))?
            .with_root_certificates(roots);
        let mut client = match (&cert, &key) {
            (Some(cert), Some(key_file)) => builder
                .with_client_auth_cert(cert.certificates()?, key_file.private_key()?)
                .map_err(|err| {
                    invalid(
                        format!("{table}.key"),
                        format!("does not fit the certificate of {table}.cert: {err}"),
                    )
                })?,
            _ => builder.with_no_client_auth(),
        };
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let server_name = match &config.server_name {
            Some(name) => Some(ServerName::try_from(name.clone()).map_err(|err| {
                invalid(format!("{table}.server_name"), format!("{name:?}: {err}"))
            })?),
            None => None,
        };
        Ok(Self {
            connector: TlsConnector::from(Arc::new(client)),
            server_name,
            source,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// TLS to a backend whose URL names `host` (verified as `server_name` when the table sets it).
    pub fn for_host(&self, host: &str) -> Result<UpstreamTls, String> {
        let server_name = match &self.server_name {
            Some(name) => name.clone(),
            None => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(host.to_owned())
                    .map_err(|err| format!("{host:?} cannot be verified by TLS: {err}"))?
            }
        };
        let pool_tag = Arc::from(format!("tls{}:{}", self.id, server_name.to_str()));
        Ok(UpstreamTls {
            connector: self.connector.clone(),
            server_name,
            pool_tag,
        })
    }
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("server_name", &self.server_name)
            .field("pool_tag", &self.pool_tag)
            .finish_non_exhaustive()
    }
}

impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        self.pool_tag == other.pool_tag
    }
}

impl Eq for UpstreamTls {}

/// The system's trust roots. None found is not an error here (a config may name `https://`
/// backends that all use `ca`); each such backend then fails verification with a clear message.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for err in &found.errors {
        tracing::warn!(error = %err, "reading the system's trust roots");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::warn!(
            ignored,
            "no system trust roots found: https:// upstreams without `ca` will fail verification"
        );
    }
    roots
}
