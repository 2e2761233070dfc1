//! Budgets in a Redis Cluster: three primaries on loopback (`redis-server --cluster-enabled yes`,
//! joined by `redis-cli --cluster create`), two tokenmeter replicas given the nodes' URLs with
//! `store_cluster = true`, and several tenants whose slots fall on different nodes. Each
//! tenant's budget holds across the replicas and the cluster holds, per tenant, exactly the
//! tokens and requests its clients were served.

use crate::support;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use support::backend::{replay, Backend};
use support::budget::{completion_tokens, output_per_day, send_as, RESERVATION};
use support::client::Streamed;
use support::redis::Cluster;
use support::{config_for, start_proxy, wait_for_metric};
use tokenmeter::config::{Config, Limits, OnStoreError, TenantSource};
use tokenmeter::server::ServerHandle;

const TENANTS: [&str; 4] = ["team-a", "team-b", "team-c", "team-d"];
/// team-a's day: reached within the test; the others' are not.
const BUDGET: u64 = 200;

fn replica_config(upstream: &str, cluster: &Cluster) -> Config {
    let mut config = config_for(upstream);
    config.tenants.sources = vec![TenantSource::Header];
    let budgets = &mut config.tenants.budgets;
    budgets.store = cluster.url();
    budgets.store_cluster = true;
    budgets.on_store_error = OnStoreError::Deny;
    // Long enough that a loaded machine never times out a cluster that is up.
    budgets.store_timeout = Duration::from_secs(2);
    for tenant in TENANTS {
        let day = if tenant == "team-a" {
            BUDGET
        } else {
            1_000_000
        };
        budgets.tenant.insert(
            tenant.to_owned(),
            Limits {
                requests_per_minute: Some(1_000_000),
                ..output_per_day(day)
            },
        );
    }
    config
}

/// One request as `tenant`, answered within 10 s (a request waits for the cluster at most its
/// 2 s store timeout; the rest is a zero-delay replay on loopback).
async fn send(addr: std::net::SocketAddr, tenant: &str) -> Streamed {
    send_as(addr, tenant, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_holds_each_tenants_budget_exactly() {
    let cluster = Cluster::start();
    let nodes: BTreeSet<u16> = TENANTS
        .iter()
        .map(|tenant| cluster.node_of(&format!("tokenmeter:{{{tenant}}}:slots")))
        .collect();
    assert!(
        nodes.len() >= 2,
        "the tenants' slots fall on more than one node: {nodes:?}"
    );
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let replicas: Arc<[ServerHandle; 2]> = Arc::new([
        start_proxy(replica_config(&backend.url, &cluster)).await,
        start_proxy(replica_config(&backend.url, &cluster)).await,
    ]);

    // Two clients per tenant, alternating between the replicas: team-a until refused three
    // times in a row, the others for 12 requests each.
    let mut clients = Vec::new();
    for (index, tenant) in TENANTS.iter().enumerate() {
        for client in 0..2usize {
            let replicas = Arc::clone(&replicas);
            clients.push(tokio::spawn(async move {
                let (mut served, mut tokens, mut refused, mut in_a_row) = (0u64, 0u64, 0u64, 0);
                for n in 0..100usize {
                    if *tenant != "team-a" && n == 12 {
                        break;
                    }
                    let replica = (index + client + n) % 2;
                    let streamed = send(replicas[replica].traffic_addr, tenant).await;
                    match streamed.status.as_u16() {
                        200 => {
                            served += 1;
                            tokens += completion_tokens(&streamed);
                            in_a_row = 0;
                        }
                        429 if *tenant == "team-a" => {
                            refused += 1;
                            in_a_row += 1;
                            if in_a_row == 3 {
                                break;
                            }
                        }
                        other => panic!("{tenant}: unexpected status {other}: {}", streamed.text()),
                    }
                }
                (*tenant, served, tokens, refused)
            }));
        }
    }
    let mut totals = std::collections::BTreeMap::<&str, (u64, u64, u64)>::new();
    for client in clients {
        let (tenant, served, tokens, refused) = client.await.expect("a client");
        let total = totals.entry(tenant).or_default();
        total.0 += served;
        total.1 += tokens;
        total.2 += refused;
    }
    for replica in replicas.iter() {
        wait_for_metric(replica, "tokenmeter_budget_settlements_pending", &[], 0.0).await;
    }

    for tenant in TENANTS {
        let (served, tokens, _) = totals[tenant];
        assert_eq!(
            cluster.sum(&format!("tokenmeter:{{{tenant}}}:day:*")),
            tokens as i64,
            "{tenant}: the cluster holds the tokens its clients were served"
        );
        assert_eq!(
            cluster.sum(&format!("tokenmeter:{{{tenant}}}:req:*")),
            served as i64,
            "{tenant}: and one request for each one served"
        );
    }
    let (_, team_a, refused) = totals["team-a"];
    assert!(refused >= 3, "team-a was refused at its budget");
    assert!(
        team_a <= BUDGET + 2 * RESERVATION && team_a + 7 + RESERVATION * 2 > BUDGET,
        "team-a got {team_a} tokens: its budget of {BUDGET}, within one reservation per replica"
    );
}
