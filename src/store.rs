//! The Redis the replicas of one fleet share: the budgets' (`[tenants.budgets] store`) and the
//! routing load's (`[fleet] store`). One server or the nodes of a Redis Cluster, over TLS
//! (`rediss://`) with a CA and client certificate of the config's `store_tls`; connected on
//! first use, so a store that is down at start is one more store error, not a failed start.
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::StoreTlsConfig;
pub use connection::Connection;
pub use error::OpenError;

mod client;
mod connection;
mod error;

/// The longest pause between two attempts: a single Redis's reconnections, the budgets'
/// settlements.
pub const RETRY_MAX: Duration = Duration::from_secs(2);

/// Where a store is and how it is reached, from a config table.
pub struct StoreSettings<'a> {
    /// The table, for errors (`tenants.budgets`, `fleet`).
    pub table: &'a str,
    pub url: &'a str,
    pub tls: &'a StoreTlsConfig,
    pub cluster: bool,
    /// How long a connection and a reply may take.
    pub timeout: Duration,
}

/// Opens the store of `settings` without connecting: a single Redis's client (for the caller's
/// own connection checks; `None` for a cluster) and the shared connection.
pub fn open(
    settings: &StoreSettings<'_>,
) -> Result<(Option<redis::Client>, Connection), OpenError> {
    let StoreSettings {
        table,
        url,
        tls,
        cluster,
        timeout,
    } = *settings;
    if cluster {
        let cluster = client::cluster_client(url, tls, timeout, table)?;
        return Ok((None, Connection::cluster(cluster)));
    }
    let client = client::client(url, tls, table)?;
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_max_delay(RETRY_MAX)
        .set_number_of_retries(usize::MAX);
    let manager = ConnectionManager::new_lazy_with_config(client.clone(), manager_config)
        .map_err(|err| OpenError::Config(format!("cannot use the Redis URL ({:?})", err.kind())))?;
    Ok((Some(client), Connection::Single(manager)))
}
