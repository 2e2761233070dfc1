//! The TLS paths' certificates, generated with rcgen when the orchestrator starts and written to
//! `<out>/tls/`: a CA, and one server certificate it signs for `localhost` and 127.0.0.1 (ECDSA
//! P-256, rcgen's default key). Every TLS server of the benchmark — tokenmeter, nginx and the
//! backend — presents the same certificate, so their handshakes sign with the same key type; the
//! load client and both proxies trust the CA (and verify the name `localhost`).
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

type Error = Box<dyn std::error::Error>;

/// The files every TLS path is configured with.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA the clients trust (PEM).
    pub ca: PathBuf,
    /// The server certificate (PEM, leaf only: the CA is trusted directly).
    pub cert: PathBuf,
    /// Its private key (PKCS#8 PEM).
    pub key: PathBuf,
}

/// The name every TLS client verifies and sends in SNI (the certificate also holds 127.0.0.1).
pub const SERVER_NAME: &str = "localhost";

/// Generates a fresh CA and server certificate into `dir` (created if missing); the paths it
/// returns are absolute (nginx resolves relative ones against its prefix, not our directory).
pub fn generate(dir: &Path) -> Result<Pki, Error> {
    std::fs::create_dir_all(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tokenmeter bench CA");
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned(), "127.0.0.1".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, SERVER_NAME);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;

    let pki = Pki {
        ca: dir.join("ca.crt"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    };
    std::fs::write(&pki.ca, ca_cert.pem())?;
    std::fs::write(&pki.cert, cert.pem())?;
    std::fs::write(&pki.key, key.serialize_pem())?;
    Ok(pki)
}
