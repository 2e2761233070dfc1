//! Reading PEM files named by the configuration, with errors that name the key.
//!
//! Files are read whole as bytes first: the certificate reloader compares those bytes with what
//! it loaded last, which catches every way a file can change (rewritten in place, or a Kubernetes
//! Secret volume swapping its `..data` symlink) without trusting modification times.
use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::ConfigError;

/// A configured file's bytes, and the key that named it (for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFile {
    pub key: String,
    pub bytes: Vec<u8>,
}

impl PemFile {
    /// Reads the file `key` names.
    pub fn read(key: String, path: &Path) -> Result<Self, ConfigError> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Self { key, bytes }),
            Err(err) => Err(invalid(
                key,
                format!("cannot read {}: {err}", path.display()),
            )),
        }
    }

    /// Every `CERTIFICATE` block, in order; at least one.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| invalid(self.key.clone(), format!("not a PEM certificate: {err}")))?;
        if certs.is_empty() {
            return Err(invalid(
                self.key.clone(),
                "holds no PEM CERTIFICATE block".to_owned(),
            ));
        }
        Ok(certs)
    }

    /// The first private key block (PKCS#8, PKCS#1 or SEC1).
    pub fn private_key(&self) -> Result<PrivateKeyDer<'static>, ConfigError> {
        PrivateKeyDer::from_pem_slice(&self.bytes).map_err(|err| {
            invalid(
                self.key.clone(),
                format!("holds no usable PEM private key: {err}"),
            )
        })
    }

    /// The certificates as trust anchors; at least one must be usable.
    pub fn roots(&self) -> Result<RootCertStore, ConfigError> {
        let mut roots = RootCertStore::empty();
        let (added, _ignored) = roots.add_parsable_certificates(self.certificates()?);
        if added == 0 {
            return Err(invalid(
                self.key.clone(),
                "holds no certificate usable as a trust anchor".to_owned(),
            ));
        }
        Ok(roots)
    }
}

pub(super) fn invalid(key: String, message: String) -> ConfigError {
    ConfigError::Invalid { key, message }
}
