//! Who is calling: the tenant a request names through the configured sources, in order.
//!
//! - `header`: the value of `tenants.header`, for a trusted gateway in front that has already
//!   authenticated the caller (an untrusted client could name any tenant).
//! - `api_key`: the `Authorization: Bearer <key>` key, hashed and looked up in the keys file
//!   ([`super::keys`]). The header itself passes upstream unchanged.
//!
//! A request no source names is `anonymous`, or refused (401) when `tenants.anonymous =
//! "refuse"`; the refusal says why (no key, a key the file does not know, a malformed
//! `Authorization`), never the key.
use std::path::Path;

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName};

use super::keys::{KeyTable, KeysError};
use crate::config::{Anonymous, TenantSource, TenantsConfig};

/// The identity sources of one config.
#[derive(Debug)]
pub struct Identity {
    sources: Vec<TenantSource>,
    header: HeaderName,
    keys: KeyTable,
    anonymous: Anonymous,
}

/// Why a request has no tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unnamed {
    /// No source named one.
    Nobody,
    /// A bearer key the keys file does not know.
    UnknownKey,
    /// An `Authorization` header that is not `Bearer <key>`.
    MalformedAuthorization,
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
        }
    }
}

impl Identity {
    /// The identity of `config`, its keys file read; `None` when tenants are off.
    pub fn from_config(config: &TenantsConfig) -> Result<Option<Self>, KeysError> {
        if !config.enabled() {
            return Ok(None);
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
        Ok(Some(Self {
            sources: config.sources.clone(),
            header,
            keys,
            anonymous: config.anonymous,
        }))
    }

    /// The tenants of the keys file.
    pub fn known_tenants(&self) -> impl Iterator<Item = &str> {
        self.keys.tenants().map(|tenant| &**tenant)
    }

    /// The tenant `headers` name (`Ok(None)`: anonymous), or why the request is refused.
    pub fn resolve<'a>(&'a self, headers: &'a HeaderMap) -> Result<Option<&'a str>, Unnamed> {
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
            }
        }
        match self.anonymous {
            Anonymous::Allow => Ok(None),
            Anonymous::Refuse => Err(why),
        }
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
