//! Upstream backends: where a request is sent ([`Target`], and the label it is metered under)
//! and what it holds there while its answer streams ([`InFlight`]).
//!
//! Shared vocabulary: the router chooses a target and makes the guard (its per-backend load
//! accounting implements [`BodyGuard`]); the proxy sends to the target and carries the guard in
//! the response body, which tells it of the first frame and drops it at the end (or when the
//! client goes away); the meter labels with the target. Defining both here keeps the dependencies
//! pointing one way: the router uses the proxy, never the reverse.
use std::sync::Arc;

use http::uri::{Authority, Scheme};

use crate::tls::{TlsClient, UpstreamTls};

/// One upstream backend: scheme and authority to send to, and its `backend` label value.
#[derive(Debug, Clone)]
pub struct Target {
    pub scheme: Scheme,
    pub authority: Authority,
    pub label: Arc<str>,
    /// How to speak TLS to it: `Some` exactly for `https://` targets.
    pub tls: Option<Arc<UpstreamTls>>,
}

/// Errors turning configured URLs into targets (the config validates them first, so this is a
/// second line of defence for programmatic use).
#[derive(Debug, thiserror::Error)]
#[error("upstream URL {url:?}: {reason}")]
pub struct UpstreamError {
    url: String,
    reason: String,
}

impl Target {
    /// A plain `http://` target; see [`Target::from_url_with_tls`] for `https://`.
    pub fn from_url(url: &str) -> Result<Self, UpstreamError> {
        Self::from_url_with_tls(url, None)
    }

    /// A target for `url`; an `https://` one is connected with `tls` (required for it).
    pub fn from_url_with_tls(url: &str, tls: Option<&TlsClient>) -> Result<Self, UpstreamError> {
        let fail = |reason: &str| UpstreamError {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: http::Uri = url.parse().map_err(|_| fail("not a URL"))?;
        let scheme = uri.scheme().cloned().ok_or_else(|| fail("no scheme"))?;
        let authority = uri.authority().cloned().ok_or_else(|| fail("no host"))?;
        let label = Arc::from(authority.as_str());
        let tls = if scheme == Scheme::HTTPS {
            let client = tls.ok_or_else(|| fail("https:// without a TLS client configuration"))?;
            Some(Arc::new(
                client
                    .for_host(authority.host())
                    .map_err(|reason| fail(&reason))?,
            ))
        } else if scheme == Scheme::HTTP {
            None
        } else {
            return Err(fail("only http:// and https:// are supported"));
        };
        Ok(Self {
            scheme,
            authority,
            label,
            tls,
        })
    }
}

/// Accounting that must live as long as a response body (the router's per-backend counts).
/// Dropping the last handle ends the accounting.
pub trait BodyGuard: Send + Sync + std::fmt::Debug {
    /// The first body frame arrived: the backend finished the prompt's prefill (or, with a
    /// handoff, the prompt is prefilled on another backend).
    fn first_frame(&self);
}

/// A request's [`BodyGuard`], carried in its context to the forwarder, which moves it into the
/// response body.
#[derive(Debug, Clone)]
pub struct InFlight(pub Arc<dyn BodyGuard>);
