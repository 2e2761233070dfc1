//! The tenant subsystem as the server composes it: built once from config, and a revision of it
//! per config revision.
//!
//! Why one value: the server used to open the budget store, prime its series, start the usage
//! log, read the keys file and build every tenant hook itself, naming a dozen items of this
//! module's insides. Now it builds a [`TenantSystem`] (what lives for the process: the label
//! values, the usage log, the budget store), asks it for each stack revision's part
//! ([`TenantRevision`]: the identity gate at the head, the budget phase, the finish hooks), and
//! reloads it in two steps, [`TenantSystem::prepare`] then [`TenantSystem::commit`], so that a
//! reload whose keys file does not load changes nothing.
use std::sync::Arc;
use std::time::Duration;

use super::budget::layer::Budget;
use super::budget::series::BudgetSeries;
use super::budget::settle::BudgetHook;
use super::budget::{Budgets, Store, StoreError};
use super::finish::TenantHook;
use super::keys::KeysError;
use super::usage::{UsageHook, UsageLog};
use super::{Gate, Tenants};
use crate::config::{Config, StoreUrl};
use crate::context::FinishHook;
use crate::metrics::Metrics;

/// Why the tenant subsystem cannot be built (each error names its key).
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// The tenants' keys file does not load (the error names the file and line).
    #[error(transparent)]
    Keys(#[from] KeysError),
    /// The usage records' file does not open.
    #[error("{0}")]
    Usage(String),
    /// The budgets' store cannot be used (never naming the URL).
    #[error(transparent)]
    Budgets(#[from] StoreError),
}

/// What the tenant subsystem keeps for the process's life, and its current identity gate.
pub struct TenantSystem {
    metrics: Arc<Metrics>,
    /// The tenant labels, shared by every revision.
    tenants: Arc<Tenants>,
    /// The identity sources of the current config (`None`: tenants off).
    gate: Option<Arc<Gate>>,
    /// The usage records' log (`tenants.usage.path`; restart-only).
    usage: Option<Arc<UsageLog>>,
    /// Where the budgets are kept (`tenants.budgets.store`; restart-only), and their series.
    store: Arc<Store>,
    series: Arc<BudgetSeries>,
}

/// A stack revision's part of the tenant subsystem.
pub struct TenantRevision {
    /// Who is calling, read at the head (`None`: tenants off).
    pub gate: Option<Arc<Gate>>,
    /// The budget phase, when some tenant has a limit.
    pub budget: Option<Budget>,
    /// Its finish hooks, in order: the settlement (every revision settles: a request admitted
    /// before a reload that removed its limits still holds a reservation), then the tenant
    /// counters (so that a request counted there is settled), then the usage record.
    pub hooks: Vec<Arc<dyn FinishHook>>,
}

/// A reload's gate, read before anything changes.
pub struct Prepared(Option<Arc<Gate>>);

impl TenantSystem {
    /// Builds what `config` asks for: the labels, the identity gate (its keys file read), the
    /// usage log (only checked, never created, when `check`: `serve --check` writes nothing),
    /// and the budget store (its URL and TLS files; it connects on first use).
    pub fn build(
        config: &Config,
        metrics: &Arc<Metrics>,
        check: bool,
    ) -> Result<Self, TenantError> {
        let tenants = Arc::new(Tenants::new(metrics, config));
        let gate = Gate::load(config, &tenants)?.map(Arc::new);
        tenants.reload(config, gate.as_deref().map(Gate::identity));
        let usage = match (config.tenants.usage.enabled(), check) {
            (false, _) => None,
            (true, false) => {
                Some(UsageLog::start(&config.tenants.usage, metrics).map_err(TenantError::Usage)?)
            }
            (true, true) => {
                UsageLog::check(&config.tenants.usage).map_err(TenantError::Usage)?;
                None
            }
        };
        let shared_store = config.tenants.budgets.store_url() != StoreUrl::Memory;
        let series = Arc::new(BudgetSeries::new(Arc::clone(metrics), shared_store));
        if shared_store && config.tenants.budgets.enabled() {
            series.prime();
        }
        let store = Arc::new(Store::open(&config.tenants.budgets, Arc::clone(&series))?);
        Ok(Self {
            metrics: Arc::clone(metrics),
            tenants,
            gate,
            usage,
            store,
            series,
        })
    }

    /// The part of the revision of `config`.
    pub fn revision(&self, config: &Config) -> TenantRevision {
        let budgets =
            Budgets::new(&config.tenants.budgets, &self.store, &self.series).map(Arc::new);
        let settle = Arc::new(BudgetHook::new(Arc::clone(&self.store), budgets.clone()));
        let counters = self.gate.as_ref().map(|_| {
            Arc::new(TenantHook::new(
                Arc::clone(&self.metrics),
                Arc::clone(&self.tenants),
                config.slo.defaults(),
            )) as Arc<dyn FinishHook>
        });
        let records = self
            .usage
            .as_ref()
            .map(|log| Arc::new(UsageHook::new(Arc::clone(log))) as Arc<dyn FinishHook>);
        TenantRevision {
            gate: self.gate.clone(),
            budget: budgets.map(Budget::new),
            hooks: [settle as Arc<dyn FinishHook>]
                .into_iter()
                .chain(counters)
                .chain(records)
                .collect(),
        }
    }

    /// A reload's first step: reads `config`'s keys file; nothing changes yet.
    pub fn prepare(&self, config: &Config) -> Result<Prepared, KeysError> {
        Ok(Prepared(Gate::load(config, &self.tenants)?.map(Arc::new)))
    }

    /// A reload's second step, once every subsystem prepared: `config`'s tenants from now on.
    pub fn commit(&mut self, config: &Config, prepared: Prepared) {
        let Prepared(gate) = prepared;
        self.tenants
            .reload(config, gate.as_deref().map(Gate::identity));
        self.gate = gate;
    }

    /// Before serving: a budget store over TLS that cannot make its handshake stops the start
    /// (see [`Store::verify`]); a store that is merely down does not.
    pub async fn verify(&self, config: &Config) -> Result<(), StoreError> {
        if !config.tenants.budgets.enabled() {
            return Ok(());
        }
        self.store.verify().await
    }

    /// At shutdown, once every request has ended: the settlements still queued go to the store
    /// and the usage records to disk, each within `within`.
    pub async fn shutdown(&self, within: Duration) {
        let unsettled = self.store.flush(within).await;
        if unsettled > 0 {
            tracing::warn!(unsettled, "budget settlements not in the store at exit");
        }
        if let Some(usage) = self.usage.clone() {
            let _ = tokio::task::spawn_blocking(move || usage.close(within)).await;
        }
    }
}
