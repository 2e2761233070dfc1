//! Reverse-proxy header hygiene: hop-by-hop headers stop here, `x-forwarded-*` are added, everything
//! else (including `authorization`) passes through unchanged, unless the operator swaps the
//! client's `authorization` for the backend's key ([`authorize_upstream`]).
use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), plus the de-facto ones.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including every header the `Connection` header names.
/// `upgrade` goes too: the proxy does not tunnel protocol upgrades.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// Replaces every `authorization` header of the client's with `backend` (`Bearer <the backend's
/// key>`, already marked sensitive): `tenants.upstream_key_file`.
///
/// Done once per request, where its head comes in and after its tenant was read from the
/// client's key ([`crate::server::live`]), so every upstream request made of it carries the
/// backend's key: the forward, its retries, and a hand-off's prefill, which copies the request's
/// headers. Cloning a `HeaderValue` shares its bytes; it allocates nothing.
pub fn authorize_upstream(headers: &mut HeaderMap, backend: &HeaderValue) {
    headers.insert(header::AUTHORIZATION, backend.clone());
}

/// Appends the client address to `x-forwarded-for`, sets `x-forwarded-proto`, and moves the client's
/// `host` to `x-forwarded-host` (the upstream gets its own authority as `host`, as nginx does).
pub fn add_forwarded(headers: &mut HeaderMap, client: Option<IpAddr>, proto: &'static str) {
    if let Some(ip) = client {
        let value = match headers
            .get(HeaderName::from_static("x-forwarded-for"))
            .and_then(|v| v.to_str().ok())
        {
            Some(previous) => format!("{previous}, {ip}"),
            None => ip.to_string(),
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static("x-forwarded-for"), value);
        }
    }
    headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(proto),
    );
    if let Some(host) = headers.remove(header::HOST) {
        headers.insert(HeaderName::from_static("x-forwarded-host"), host);
    }
}

#[cfg(test)]
mod tests;
