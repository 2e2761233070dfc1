//! One Redis, or the nodes of a Redis Cluster: the store speaks to either through the same
//! connection.
//!
//! A single Redis is a multiplexed connection that reconnects by itself (`ConnectionManager`).
//! A cluster is redis-rs's cluster connection, which follows `MOVED` and `ASK` redirections and
//! refreshes the slot map when a failover moves a slot; it is made on first use (as the single
//! one is), so a cluster that is down at start is one more store error, not a failed start, and
//! a use that fails to make it tries again next time. Every key of one tenant shares the hash
//! tag `{tenant}`, so each script runs on the one node that holds its tenant's slot; a pipeline
//! must stay within one slot, so the settlement task sends a cluster one pipeline per tenant.
use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::OnceCell;

/// The store's connection (cheap to clone).
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

/// A cluster connection made on first use.
pub struct LazyCluster {
    client: ClusterClient,
    connection: OnceCell<ClusterConnection>,
}

impl Connection {
    pub fn cluster(client: ClusterClient) -> Self {
        Connection::Cluster(Arc::new(LazyCluster {
            client,
            connection: OnceCell::new(),
        }))
    }

    /// Pipelines must stay within one slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }
}

impl LazyCluster {
    async fn get(&self) -> RedisResult<ClusterConnection> {
        self.connection
            .get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(lazy) => Box::pin(async move {
                let mut connection = lazy.get().await?;
                connection.req_packed_command(cmd).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(lazy) => Box::pin(async move {
                let mut connection = lazy.get().await?;
                connection
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            // A cluster has one database.
            Connection::Cluster(_) => 0,
        }
    }
}
