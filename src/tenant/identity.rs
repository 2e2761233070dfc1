//! Who is calling: the tenant a request names through the configured sources, in order.
//!
//! - `header`: the value of `tenants.header`, for a trusted gateway in front that has already
//!   authenticated the caller (an untrusted client could name any tenant).
//! - `api_key`: the `Authorization: Bearer <key>` key, hashed and looked up in the keys file
//!   ([`super::keys`]). The header itself passes upstream unchanged, unless
//!   `tenants.upstream_key_file` swaps it for the backend's key ([`Identity::upstream_authorization`]).
//! - `client_cert`: the `tenants.cert_field` name of the client certificate the TLS handshake
//!   verified ([`super::certificate`], read once per connection).
//!
//! A request no source names is `anonymous`, or refused (401) when `tenants.anonymous =
//! "refuse"`; the refusal says why (no key, a key the file does not know, a malformed
//! `Authorization`, a certificate without the name), never the key.
use std::path::Path;

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::certificate::CertificateNames;
use super::keys::{KeyTable, KeysError};
use crate::config::{Anonymous, CertField, TenantSource, TenantsConfig};
use crate::context::{Refusal, RefusedBy};

/// The identity sources of one config.
#[derive(Debug)]
pub struct Identity {
    sources: Vec<TenantSource>,
    header: HeaderName,
    keys: KeyTable,
    cert_field: CertField,
    anonymous: Anonymous,
    /// `Bearer <the backend's key>`, marked sensitive, when `tenants.upstream_key_file` is set.
    upstream_authorization: Option<HeaderValue>,
}

/// Why a request has no tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub enum Unnamed {
    /// No source named one.
    Nobody,
    /// A bearer key the keys file does not know.
    UnknownKey,
    /// An `Authorization` header that is not `Bearer <key>`.
    MalformedAuthorization,
    /// The `client_cert` source, on a connection without a client certificate.
    NoCertificate,
    /// The `client_cert` source: the certificate has no name in this field.
    CertificateUnnamed(CertField),
}

impl Unnamed {
    /// The refusal's message (the client's error body).
    pub fn message(self) -> &'static str {
        match self {
            Unnamed::Nobody => "no tenant: send an API key (Authorization: Bearer <key>)",
            Unnamed::UnknownKey => "unknown API key",
            Unnamed::MalformedAuthorization => {
                "malformed Authorization header (expected: Bearer <key>)"
            }
            Unnamed::NoCertificate => "no tenant: present a client certificate",
            Unnamed::CertificateUnnamed(field) => match field {
                CertField::SubjectCn => "no tenant: the client certificate has no subject CN",
                CertField::SanDns => "no tenant: the client certificate has no DNS name",
                CertField::SanUri => "no tenant: the client certificate has no URI name",
                CertField::SanEmail => "no tenant: the client certificate has no e-mail name",
            },
        }
    }
}

/// Under `tenants.anonymous = "refuse"`, a request no tenant named is answered 401 with why
/// (never the key).
impl From<Unnamed> for Refusal {
    fn from(unnamed: Unnamed) -> Self {
        Refusal::new(
            RefusedBy::Tenant,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            unnamed.message(),
        )
    }
}

impl Identity {
    /// The identity of `config`, its keys file and the backend's key file read; `None` when
    /// tenants are off.
    pub fn from_config(config: &TenantsConfig) -> Result<Option<Self>, KeysError> {
        if !config.enabled() {
            return match &config.upstream_key_file {
                // Validated with the file's keys; the environment's path comes after that.
                Some(path) => Err(upstream_key_error(
                    path,
                    "needs tenants.sources: the backend's key is lent only to callers the proxy \
                     identifies"
                        .to_owned(),
                )),
                None => Ok(None),
            };
        }
        let keys = match (
            &config.keys_file,
            config.sources.contains(&TenantSource::ApiKey),
        ) {
            (Some(path), true) => KeyTable::load(Path::new(path))?,
            (None, true) => {
                return Err(KeysError::Missing);
            }
            _ => KeyTable::default(),
        };
        // Validated with the config: a valid header name.
        let header = HeaderName::from_bytes(config.header.as_bytes())
            .unwrap_or_else(|_| HeaderName::from_static("x-tenant-id"));
        let upstream_authorization = match &config.upstream_key_file {
            Some(path) => Some(upstream_authorization(path)?),
            None => None,
        };
        Ok(Some(Self {
            sources: config.sources.clone(),
            header,
            keys,
            cert_field: config.cert_field,
            anonymous: config.anonymous,
            upstream_authorization,
        }))
    }

    /// The `Authorization` value every upstream request carries instead of the client's, when
    /// `tenants.upstream_key_file` is set.
    pub fn upstream_authorization(&self) -> Option<&HeaderValue> {
        self.upstream_authorization.as_ref()
    }

    /// The tenants of the keys file.
    pub(crate) fn known_tenants(&self) -> impl Iterator<Item = &str> {
        self.keys.tenants().map(|tenant| &**tenant)
    }

    /// The tenant a request with `headers`, on a connection with the client certificate
    /// `certificate` (`None`: no TLS or no certificate), names (`Ok(None)`: anonymous), or why it
    /// is refused.
    pub fn resolve<'a>(
        &'a self,
        headers: &'a HeaderMap,
        certificate: Option<&'a CertificateNames>,
    ) -> Result<Option<&'a str>, Unnamed> {
        let mut why = Unnamed::Nobody;
        for source in &self.sources {
            match source {
                TenantSource::Header => {
                    let named = headers
                        .get(&self.header)
                        .and_then(|value| value.to_str().ok())
                        .map(str::trim)
                        .filter(|name| !name.is_empty());
                    if named.is_some() {
                        return Ok(named);
                    }
                }
                TenantSource::ApiKey => match bearer(headers) {
                    Some(Ok(key)) => match self.keys.tenant_of(key) {
                        Some(tenant) => return Ok(Some(tenant)),
                        None => why = Unnamed::UnknownKey,
                    },
                    Some(Err(())) => why = Unnamed::MalformedAuthorization,
                    None => {}
                },
                TenantSource::ClientCert => {
                    let named = certificate.and_then(|names| names.get(self.cert_field));
                    if named.is_some() {
                        return Ok(named);
                    }
                    // A key's refusal says more than a missing certificate name.
                    if why == Unnamed::Nobody {
                        why = match certificate {
                            Some(_) => Unnamed::CertificateUnnamed(self.cert_field),
                            None => Unnamed::NoCertificate,
                        };
                    }
                }
            }
        }
        match self.anonymous {
            Anonymous::Allow => Ok(None),
            Anonymous::Refuse => Err(why),
        }
    }
}

/// `Bearer <key>` of the backend's key in the file at `path` (surrounding whitespace trimmed),
/// marked sensitive (never logged, never indexed by HPACK). An error names the file, never the key.
fn upstream_authorization(path: &Path) -> Result<HeaderValue, KeysError> {
    let text = std::fs::read(path).map_err(|err| upstream_key_error(path, err.to_string()))?;
    let key = text.trim_ascii();
    if key.is_empty() {
        return Err(upstream_key_error(path, "is empty".to_owned()));
    }
    if !key.iter().all(u8::is_ascii_graphic) {
        return Err(upstream_key_error(
            path,
            "the key must be one word of printable ASCII".to_owned(),
        ));
    }
    let mut value = b"Bearer ".to_vec();
    value.extend_from_slice(key);
    let mut value = HeaderValue::from_bytes(&value).map_err(|_| {
        upstream_key_error(
            path,
            "the key must be one word of printable ASCII".to_owned(),
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

fn upstream_key_error(path: &Path, message: String) -> KeysError {
    KeysError::UpstreamKey {
        path: path.display().to_string(),
        message,
    }
}

/// The key of an `Authorization: Bearer <key>` header: `None` without the header, `Err` when it
/// is not that shape.
fn bearer(headers: &HeaderMap) -> Option<Result<&[u8], ()>> {
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let Some(space) = value.iter().position(|&b| b == b' ') else {
        return Some(Err(()));
    };
    let (scheme, key) = (&value[..space], value[space + 1..].trim_ascii());
    if !scheme.eq_ignore_ascii_case(b"bearer") || key.is_empty() || key.contains(&b' ') {
        return Some(Err(()));
    }
    Some(Ok(key))
}

#[cfg(test)]
mod tests;
