//! The TLS ends of the benchmark's TLS paths: the load client's rustls configuration (towards a
//! TLS-serving proxy, or the backend directly) and the backend's (towards a proxy that speaks TLS
//! upstream).
//!
//! Both ends offer exactly one cipher suite, TLS 1.3 `TLS13_AES_256_GCM_SHA384` (what OpenSSL
//! clients — curl, Python's `ssl` under the openai SDK — prefer first), and only TLS 1.3. The
//! proxies keep their default TLS settings and still negotiate the same suite with either end,
//! whoever's preference order applies: the comparison is then of the proxies, not of two ciphers.
//! What each connection negotiated is recorded ([`describe`]) and lands in the results, so a run
//! that did not get the suite it was meant to shows it.
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::{ring, CryptoProvider};
use rustls::{ClientConfig, CommonState, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

type Error = Box<dyn std::error::Error>;

/// The response header in which the TLS backend says what the connection into it negotiated
/// (the proxies forward it untouched, so the load client learns the upstream hop's suite).
pub const BACKEND_TLS_HEADER: &str = "x-bench-backend-tls";

/// The ring provider cut down to the one suite both ends offer.
fn provider() -> Arc<CryptoProvider> {
    let mut provider = ring::default_provider();
    provider.cipher_suites = vec![ring::cipher_suite::TLS13_AES_256_GCM_SHA384];
    Arc::new(provider)
}

/// A client trusting only `ca`, offering ALPN `http/1.1` (the load client speaks HTTP/1.1).
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The backend's server configuration: `cert` (chain) and `key`, ALPN `http/1.1`.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, Error> {
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What a connection negotiated: `TLSv1_3 TLS13_AES_256_GCM_SHA384 X25519 http/1.1`.
pub fn describe(state: &CommonState) -> String {
    let version = state
        .protocol_version()
        .map_or_else(|| "?".to_owned(), |v| format!("{v:?}"));
    let suite = state
        .negotiated_cipher_suite()
        .map_or_else(|| "?".to_owned(), |s| format!("{:?}", s.suite()));
    let group = state
        .negotiated_key_exchange_group()
        .map_or_else(|| "?".to_owned(), |g| format!("{:?}", g.name()));
    let alpn = state.alpn_protocol().map_or_else(
        || "no-alpn".to_owned(),
        |p| String::from_utf8_lossy(p).into_owned(),
    );
    format!("{version} {suite} {group} {alpn}")
}
