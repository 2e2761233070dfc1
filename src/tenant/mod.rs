//! Whose tokens: who is calling ([`identity`]: a header, an API key looked up by its hash in
//! [`keys`], or the client certificate's name, [`certificate`]), and each tenant's requests,
//! tokens and SLO attainment under a bounded `tenant` label ([`series`], counted at the finish
//! point by [`finish`]).
//!
//! The identity is read once, when the request's head is in (where its context starts,
//! `server/head.rs`, for a request refused at `server.max_connections` too): the context gets the
//! tenant's bounded label, or the reason it is refused, which the meter answers with a 401 before
//! reading the body (as it refuses conflicting framing). Nothing of it runs per chunk. Off by
//! default (`[tenants] sources = []`).
//!
//! [`usage`] writes one JSON line per finished request. [`budget`] admits each request against
//! its tenant's token budgets and rate limits, kept in process or shared through Redis.
use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use http::HeaderMap;

use crate::config::Config;
use crate::metrics::{BoundedLabels, Metrics};

pub mod budget;
pub mod certificate;
pub mod finish;
pub mod identity;
pub mod keys;
pub mod record;
pub mod series;
pub mod system;
pub mod usage;

use certificate::CertificateNames;
use identity::{Identity, Unnamed};
use keys::KeysError;
use record::TenantRecord;
use series::{ANONYMOUS, OTHER};

/// What every stack revision shares: the bounded label values (a tenant keeps its value across
/// reloads) and the tracked set.
#[derive(Debug)]
pub struct Tenants {
    labels: BoundedLabels,
    tracked: RwLock<HashSet<String>>,
}

impl Tenants {
    pub fn new(metrics: &Metrics, config: &Config) -> Self {
        series::describe(metrics, config);
        Self {
            labels: BoundedLabels::new(
                &config.tenants.tracked,
                config.tenants.max_tenant_labels,
                OTHER,
                ANONYMOUS,
            ),
            tracked: RwLock::new(config.tenants.tracked.iter().cloned().collect()),
        }
    }

    /// A reload's tenants: the keys file's and the tracked ones get their own label values.
    pub fn reload(&self, config: &Config, identity: Option<&Identity>) {
        let mut fixed: Vec<String> = config.tenants.tracked.clone();
        if let Some(identity) = identity {
            fixed.extend(identity.known_tenants().map(str::to_owned));
        }
        self.labels.set_fixed(&fixed);
        *self
            .tracked
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            config.tenants.tracked.iter().cloned().collect();
    }

    /// The tenant is tracked (its latencies get histograms of their own).
    pub(crate) fn is_tracked(&self, tenant: &str) -> bool {
        self.tracked
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(tenant)
    }

    fn label(&self, tenant: Option<&str>) -> Arc<str> {
        self.labels.label(tenant)
    }
}

/// A tenant's name in a usage record is cut at this many bytes.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// `text` cut at a character boundary at most `max` bytes in.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One stack revision's identity: its sources and keys, over the shared labels.
#[derive(Debug)]
pub struct Gate {
    identity: Identity,
    tenants: Arc<Tenants>,
}

impl Gate {
    /// The gate of `config` (its keys file read), `None` when tenants are off. Nothing changes
    /// until [`Tenants::reload`] is given it: a reload commits only once everything loaded.
    pub fn load(config: &Config, tenants: &Arc<Tenants>) -> Result<Option<Self>, KeysError> {
        let identity = Identity::from_config(&config.tenants)?;
        Ok(identity.map(|identity| Self {
            identity,
            tenants: Arc::clone(tenants),
        }))
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The tenant of the request with these headers, on a connection with this client
    /// certificate, as its bounded label and its name (at most [`MAX_NAME_BYTES`], for the usage
    /// records), or why it is refused.
    pub fn identify(
        &self,
        headers: &HeaderMap,
        certificate: Option<&CertificateNames>,
    ) -> Result<TenantRecord, Unnamed> {
        self.identity.resolve(headers, certificate).map(|tenant| {
            let label = self.tenants.label(tenant);
            TenantRecord {
                tracked: tenant.is_some() && self.tenants.is_tracked(&label),
                label,
                name: tenant.map(|name| Arc::from(truncated(name, MAX_NAME_BYTES))),
            }
        })
    }
}
