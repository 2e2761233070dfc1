//! Reverse-proxy header hygiene: hop-by-hop headers stop here, `x-forwarded-*` are added, everything
//! else (including `authorization`) passes through unchanged, unless the operator swaps the
//! client's `authorization` for the backend's key ([`authorize_upstream`]).
//!
//! **The loop guard's hop header.** Each request tokenmeter sends upstream carries [`VIA`],
//! `x-tokenmeter-via`, with this tokenmeter's [`InstanceId`] appended to whatever ids earlier
//! tokenmeters put there (`x-tokenmeter-via: 5d0f3c2a9e81b746, 0c6e2a9b4f1d7358`): a request that
//! arrives with our own id in it has come back to us, and is refused at once
//! ([`crate::server::admission`]) instead of looping until `max_streams` is spent. A chain of
//! different tokenmeters (a gateway in front of sidecars) passes, each adding its own id.
//!
//! Why a header of its own and not `Via` (RFC 9110 §7.6.3): `Via` is acted on by what sits in
//! front of an engine (nginx with its default `gzip_proxied off` stops compressing responses to
//! any request that carries one), and an intermediary may collapse its entries into a pseudonym,
//! which would drop our id; a header nobody else reads changes nothing upstream and survives
//! every hop. The header goes upstream only, never back to the client.
use std::net::IpAddr;
use std::sync::Arc;

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
/// `upgrade` goes too: the proxy does not tunnel protocol upgrades. [`VIA`] stays whatever
/// `Connection` says: a client could otherwise name it there and take the loop guard's id off.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| *name != VIA)
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
pub(crate) fn add_forwarded(headers: &mut HeaderMap, client: Option<IpAddr>, proto: &'static str) {
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

/// The loop guard's hop header: the ids of the tokenmeters a request passed through, in order,
/// comma-separated (see the module docs).
pub const VIA: HeaderName = HeaderName::from_static("x-tokenmeter-via");

/// One tokenmeter's id in [`VIA`]: 64 random bits in hex, drawn when its server starts (each
/// server of a process has its own, so two proxies in one test process are two hops).
#[derive(Debug, Clone)]
pub struct InstanceId {
    id: Arc<str>,
}

impl InstanceId {
    pub fn random() -> Self {
        Self {
            id: Arc::from(format!("{:016x}", rand::random::<u64>())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// Whether the request already passed through this tokenmeter: its id is an entry of
    /// [`VIA`] (every line of it, each split at commas).
    pub fn seen_in(&self, headers: &HeaderMap) -> bool {
        headers.get_all(VIA).iter().any(|value| {
            value
                .as_bytes()
                .split(|&byte| byte == b',')
                .any(|entry| entry.trim_ascii() == self.id.as_bytes())
        })
    }

    /// Writes the [`VIA`] line of an upstream request's head: the ids `headers` already name
    /// (every line of it, joined with `, `), then this tokenmeter's.
    ///
    /// The upstream client writes it as it encodes the head ([`crate::proxy::h1`]) instead of
    /// the request's `HeaderMap` getting one more entry: a client's usual request fills the map
    /// hyper parsed it into, and one more entry made it grow, which cost about 1.7 KiB more per
    /// open stream (docs/performance.md, "Outcomes and the loop guard"). Written last, after
    /// hop-by-hop headers were stripped, it cannot be removed by a client's `Connection` header
    /// either.
    pub(crate) fn write_line(&self, headers: &HeaderMap, out: &mut Vec<u8>) {
        out.extend_from_slice(VIA.as_str().as_bytes());
        out.extend_from_slice(b": ");
        for value in headers.get_all(VIA) {
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(self.id.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests;
