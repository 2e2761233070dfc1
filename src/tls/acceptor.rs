//! TLS on a listener: the acceptor built from `[server.tls]` (or `[server.admin_tls]`), read
//! again every `reload_interval` and swapped when its files changed.
//!
//! Why by content: cert-manager renews a certificate by rewriting the Secret, which the kubelet
//! publishes by swapping a symlink; the files' bytes are what changed, whatever the timestamps
//! say. Each check reads three small files; a change is loaded into a new `rustls::ServerConfig`
//! that new connections get. Open connections keep the session they negotiated, so nothing is
//! dropped. A change that does not load (a key written before its certificate, a truncated file)
//! keeps the running certificate, and is reported once per distinct failure, not every interval.
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::pem::{invalid, PemFile};
use super::provider;
use crate::config::{ConfigError, ServerTlsConfig};

/// ALPN of the traffic listener: HTTP/2 preferred, HTTP/1.1 otherwise.
pub const ALPN_TRAFFIC: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN of the admin listener (HTTP/1.1 only).
pub const ALPN_ADMIN: &[&[u8]] = &[b"http/1.1"];

/// A listener's TLS: the current acceptor and what it was loaded from.
pub struct ServerTls {
    table: String,
    /// The table's paths and interval; replaced by a config reload.
    config: RwLock<ServerTlsConfig>,
    alpn: Vec<Vec<u8>>,
    current: RwLock<Loaded>,
    /// The last failure reported, so an unchanged broken file is reported once.
    last_failure: Mutex<Option<String>>,
}

struct Loaded {
    files: Files,
    acceptor: TlsAcceptor,
}

/// The files a listener's TLS is loaded from, as read.
#[derive(PartialEq, Eq)]
struct Files {
    cert: PemFile,
    key: PemFile,
    client_ca: Option<PemFile>,
}

/// A listener TLS table loaded by a config reload, not yet in use.
pub struct PreparedTls {
    config: ServerTlsConfig,
    loaded: Loaded,
}

/// What a reload check found.
#[derive(Debug)]
pub enum Reload {
    /// The files are what is loaded (or fail as they did last time).
    Unchanged,
    /// New files were loaded; new connections get them.
    Reloaded,
    /// The files changed and do not load; the running certificate stays.
    Failed(ConfigError),
}

impl ServerTls {
    /// Reads and loads the files of `table` (`server.tls`); errors name the key.
    pub fn load(
        table: &str,
        config: &ServerTlsConfig,
        alpn: &[&[u8]],
    ) -> Result<Self, ConfigError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let files = read_files(table, config)?;
        let acceptor = build(&files, &alpn)?;
        Ok(Self {
            table: table.to_owned(),
            config: RwLock::new(config.clone()),
            alpn,
            current: RwLock::new(Loaded { files, acceptor }),
            last_failure: Mutex::new(None),
        })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        let current = self
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        current.acceptor.clone()
    }

    /// How often [`ServerTls::reload`] should run (zero: never).
    pub fn reload_interval(&self) -> Duration {
        self.settings().reload_interval
    }

    fn settings(&self) -> ServerTlsConfig {
        self.config
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Loads a reloaded config's table (other paths, another interval) without using it yet:
    /// a reload commits every part only once every part has loaded.
    pub fn prepare(&self, config: &ServerTlsConfig) -> Result<PreparedTls, ConfigError> {
        let files = read_files(&self.table, config)?;
        let acceptor = build(&files, &self.alpn)?;
        Ok(PreparedTls {
            config: config.clone(),
            loaded: Loaded { files, acceptor },
        })
    }

    /// Uses what [`ServerTls::prepare`] loaded for new connections.
    pub fn commit(&self, prepared: PreparedTls) {
        let PreparedTls { config, loaded } = prepared;
        *self
            .config
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = loaded;
    }

    /// Reads the files again and loads them if they changed.
    pub fn reload(&self) -> Reload {
        let loaded = read_files(&self.table, &self.settings()).and_then(|files| {
            let unchanged = {
                let current = self
                    .current
                    .read()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                current.files == files
            };
            if unchanged {
                return Ok(None);
            }
            let acceptor = build(&files, &self.alpn)?;
            Ok(Some(Loaded { files, acceptor }))
        });
        let mut last_failure = self
            .last_failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match loaded {
            Ok(None) => {
                *last_failure = None;
                Reload::Unchanged
            }
            Ok(Some(loaded)) => {
                *self
                    .current
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = loaded;
                *last_failure = None;
                Reload::Reloaded
            }
            Err(err) => {
                let message = err.to_string();
                if last_failure.as_deref() == Some(message.as_str()) {
                    return Reload::Unchanged;
                }
                *last_failure = Some(message);
                Reload::Failed(err)
            }
        }
    }

    /// Runs [`ServerTls::reload`] every `reload_interval`, logging and passing each change or
    /// failure to `counted` (`"ok"` / `"error"`).
    /// The interval is read each time, so a config reload that changes it applies (zero: the
    /// files are looked at again every second in case a reload turns checks back on).
    pub async fn watch(self: Arc<Self>, counted: impl Fn(&'static str)) {
        loop {
            let every = self.reload_interval();
            if every.is_zero() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            tokio::time::sleep(every).await;
            if self.reload_interval().is_zero() {
                continue;
            }
            match self.reload() {
                Reload::Unchanged => {}
                Reload::Reloaded => {
                    tracing::info!(table = %self.table, "TLS certificate reloaded");
                    counted("ok");
                }
                Reload::Failed(err) => {
                    tracing::error!(error = %err, "TLS files changed but do not load; keeping the running certificate");
                    counted("error");
                }
            }
        }
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("table", &self.table)
            .field("config", &self.settings())
            .finish_non_exhaustive()
    }
}

fn read_files(table: &str, config: &ServerTlsConfig) -> Result<Files, ConfigError> {
    let client_ca = match &config.client_ca {
        Some(ca) => Some(PemFile::read(format!("{table}.client_ca"), ca)?),
        None => None,
    };
    Ok(Files {
        cert: PemFile::read(format!("{table}.cert"), &config.cert)?,
        key: PemFile::read(format!("{table}.key"), &config.key)?,
        client_ca,
    })
}

fn build(files: &Files, alpn: &[Vec<u8>]) -> Result<TlsAcceptor, ConfigError> {
    let Files {
        cert,
        key,
        client_ca,
    } = files;
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| invalid(cert.key.clone(), err.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(ca.roots()?),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|err| invalid(ca.key.clone(), err.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(cert.certificates()?, key.private_key()?)
        .map_err(|err| {
            invalid(
                key.key.clone(),
                format!("does not fit the certificate of {}: {err}", cert.key),
            )
        })?;
    config.alpn_protocols = alpn.to_vec();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Why a client's TLS handshake failed, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// No complete handshake within the head timeout.
    Timeout,
    /// The client's certificate was missing or refused (mTLS), or it refused ours.
    Certificate,
    /// Not TLS, or a TLS the server does not speak (version, ciphers, ALPN).
    Protocol,
    /// The connection broke off.
    Io,
}

impl HandshakeFailure {
    pub const ALL: [HandshakeFailure; 4] = [
        HandshakeFailure::Timeout,
        HandshakeFailure::Certificate,
        HandshakeFailure::Protocol,
        HandshakeFailure::Io,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Certificate => "certificate",
            HandshakeFailure::Protocol => "protocol",
            HandshakeFailure::Io => "io",
        }
    }
}

/// Completes the server side of a handshake within `timeout`.
pub async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, (HandshakeFailure, std::io::Error)> {
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Err(_) => Err((
            HandshakeFailure::Timeout,
            std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"),
        )),
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err)) => Err((classify(&err), err)),
    }
}

/// The leaf certificate the client presented and the verifier of `client_ca` accepted; `None`
/// without client authentication.
pub fn client_certificate(stream: &TlsStream<TcpStream>) -> Option<&[u8]> {
    let (_, connection) = stream.get_ref();
    connection
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.as_ref())
}

fn classify(err: &std::io::Error) -> HandshakeFailure {
    let Some(tls) = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return HandshakeFailure::Io;
    };
    match tls {
        rustls::Error::InvalidCertificate(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::AlertReceived(
            rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::CertificateExpired
            | rustls::AlertDescription::CertificateUnknown
            | rustls::AlertDescription::CertificateRequired,
        ) => HandshakeFailure::Certificate,
        _ => HandshakeFailure::Protocol,
    }
}

#[cfg(test)]
mod tests;
