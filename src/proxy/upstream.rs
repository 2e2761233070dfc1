//! Upstream backends: where a request can be sent, and the label it is metered under.
use std::sync::Arc;

use http::uri::{Authority, Scheme};

use crate::config::UpstreamConfig;

/// One upstream backend: scheme and authority to send to, and its `backend` label value.
#[derive(Debug, Clone)]
pub struct Target {
    pub scheme: Scheme,
    pub authority: Authority,
    pub label: Arc<str>,
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
    pub fn from_url(url: &str) -> Result<Self, UpstreamError> {
        let fail = |reason: &str| UpstreamError {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: http::Uri = url.parse().map_err(|_| fail("not a URL"))?;
        let scheme = uri.scheme().cloned().ok_or_else(|| fail("no scheme"))?;
        let authority = uri.authority().cloned().ok_or_else(|| fail("no host"))?;
        let label = Arc::from(authority.as_str());
        Ok(Self {
            scheme,
            authority,
            label,
        })
    }
}

/// The configured upstreams, in order.
#[derive(Debug, Clone)]
pub struct Upstreams {
    pub targets: Arc<[Target]>,
}

impl Upstreams {
    pub fn from_config(config: &UpstreamConfig) -> Result<Self, UpstreamError> {
        let targets = config
            .urls
            .iter()
            .map(|url| Target::from_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            targets: targets.into(),
        })
    }
}
