//! Budgets charged exactly once, in any order: each of a request's scripts (its admission, its
//! settlement, a withdrawal) may reach Redis late, twice, or before the others — a paused Redis
//! runs what waited in its sockets when it resumes, and a settlement that timed out is sent
//! again — and each request's tokens and its request count are applied once.
//!
//! Each ordering is driven through the Redis store itself against a real `redis-server`, so it is
//! deterministic: "late" is a call made after the other's (which is what Redis sees). Then the
//! whole: two replicas, `allow` and `deny`, in front of a Redis paused (SIGSTOP) and resumed
//! under concurrent clients, after which Redis holds what the clients were served, to the token
//! and to the request.

use crate::support;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::backend::{replay, Backend};
use support::budget::{completion_tokens, output_per_day, send_as};
use support::client::Streamed;
use support::redis::Redis;
use support::{config_for, start_proxy, wait_for_metric};
use tokenmeter::config::{BudgetsConfig, Config, Limits, OnStoreError, TenantSource};
use tokenmeter::metrics::Metrics;
use tokenmeter::server::ServerHandle;
use tokenmeter::tenant::budget::redis::RedisStore;
use tokenmeter::tenant::budget::series::BudgetSeries;
use tokenmeter::tenant::budget::window::Now;
use tokenmeter::tenant::budget::{Ask, Limit, Settlement, StoreError, Verdict};

/// What one test tenant holds in Redis after the calls: tokens of its minute and of its day,
/// requests of its minute, streams in its set.
#[derive(Debug, PartialEq, Eq)]
struct Held {
    minute_tokens: i64,
    day_tokens: i64,
    requests: i64,
    streams: i64,
}

/// A store over `redis` and the one instant every call of a case uses (so its keys are the
/// same whatever the wall clock does meanwhile).
struct Case<'a> {
    redis: &'a Redis,
    store: RedisStore,
    tenant: &'static str,
    limits: Limits,
    now: Now,
}

impl<'a> Case<'a> {
    fn new(redis: &'a Redis, tenant: &'static str, limits: Limits) -> Self {
        let metrics = Arc::new(Metrics::new(&Config::default()).expect("metrics"));
        let series = Arc::new(BudgetSeries::new(metrics, true));
        let config = BudgetsConfig {
            store_timeout: Duration::from_secs(5),
            ..BudgetsConfig::default()
        };
        let store = RedisStore::open(&redis.url(), &config, series).expect("the store opens");
        Self {
            redis,
            store,
            tenant,
            limits,
            now: Now::wall(),
        }
    }

    async fn admit(&self, id: u64, reserve: u64) -> Result<Verdict, StoreError> {
        let ask = Ask {
            tenant: self.tenant,
            limits: &self.limits,
            reserve,
            id,
            now: self.now,
        };
        self.store.admit(&ask).await
    }

    /// Sends a settlement and waits until the store's task has it in Redis.
    async fn settle(&self, id: u64, used: u64, reserved: u64, in_store: bool, withdrawn: bool) {
        self.store.settle(Settlement {
            tenant: Arc::from(self.tenant),
            minute: self.now.minute(),
            day: self.now.day(),
            used,
            reserved,
            in_store,
            withdrawn,
            id,
            report: None,
        });
        assert_eq!(
            self.store.flush(Duration::from_secs(10)).await,
            0,
            "the settlement reached Redis"
        );
    }

    fn held(&self) -> Held {
        let key =
            |kind: &str, window: u64| format!("tokenmeter:{{{}}}:{kind}:{window}", self.tenant);
        let streams = self
            .redis
            .cli(&["ZCARD", &format!("tokenmeter:{{{}}}:slots", self.tenant)])
            .map_or(0, |text| text.parse().expect("a count"));
        Held {
            minute_tokens: self.redis.int(&key("tok", self.now.minute())),
            day_tokens: self.redis.int(&key("day", self.now.day())),
            requests: self.redis.int(&key("req", self.now.minute())),
            streams,
        }
    }
}

fn admitted(verdict: &Result<Verdict, StoreError>) -> bool {
    matches!(verdict, Ok(Verdict::Admitted(_)))
}

#[tokio::test]
async fn each_ordering_of_a_requests_scripts_applies_it_once() {
    let redis = Redis::start();
    let served = |tokens: i64| Held {
        minute_tokens: tokens,
        day_tokens: tokens,
        requests: 1,
        streams: 0,
    };
    let nothing = Held {
        minute_tokens: 0,
        day_tokens: 0,
        requests: 0,
        streams: 0,
    };

    // `allow`: the admission timed out and waited in Redis; the request was served unchecked
    // (30 tokens); Redis resumed and ran the admission, the settlement, and the settlement's
    // retry, in that order (the MONITOR trace: the retry used to charge 30 again).
    let case = Case::new(&redis, "late-admission", output_per_day(1_000));
    assert!(
        admitted(&case.admit(1, 50).await),
        "the late admission runs"
    );
    case.settle(1, 30, 50, false, false).await;
    case.settle(1, 30, 50, false, false).await;
    assert_eq!(case.held(), served(30), "charged its usage once");

    // `allow`, the other way round: the settlement first, then the admission that was late.
    let case = Case::new(&redis, "late-after-settlement", output_per_day(1_000));
    case.settle(2, 30, 50, false, false).await;
    assert!(
        matches!(case.admit(2, 50).await, Err(StoreError::Reply(_))),
        "an admission after its settlement does nothing"
    );
    case.settle(2, 30, 50, false, false).await;
    assert_eq!(case.held(), served(30), "its usage and its request, once");

    // `deny`: refused with a 503 when the admission timed out, so withdrawn; the admission ran
    // later (it used to count toward requests_per_minute), or before the withdrawal.
    let case = Case::new(&redis, "withdrawn-first", output_per_day(1_000));
    case.settle(3, 0, 50, true, true).await;
    assert!(
        case.admit(3, 50).await.is_err(),
        "the late admission does nothing"
    );
    case.settle(3, 0, 50, true, true).await;
    assert_eq!(case.held(), nothing, "a refused request counts nothing");
    let case = Case::new(&redis, "withdrawn-after", output_per_day(1_000));
    assert!(admitted(&case.admit(4, 50).await));
    case.settle(4, 0, 50, true, true).await;
    case.settle(4, 0, 50, true, true).await;
    assert_eq!(
        case.held(),
        nothing,
        "the reservation and the request taken back, once"
    );

    // An admission sent twice is charged once; so is the settlement of what it admitted.
    let case = Case::new(&redis, "twice", output_per_day(1_000));
    assert!(admitted(&case.admit(5, 50).await));
    assert!(
        admitted(&case.admit(5, 50).await),
        "the copy answers as the first did"
    );
    assert_eq!(
        case.held(),
        Held {
            minute_tokens: 50,
            day_tokens: 50,
            requests: 1,
            streams: 1
        },
        "one reservation, one request, one stream"
    );
    case.settle(5, 30, 50, true, false).await;
    case.settle(5, 30, 50, true, false).await;
    assert_eq!(case.held(), served(30));

    // A refused admission sent again is refused again, though the budget has room by then.
    let case = Case::new(&redis, "refused", output_per_day(60));
    assert!(admitted(&case.admit(6, 40).await));
    assert!(matches!(
        case.admit(7, 40).await,
        Ok(Verdict::Over(Limit::TokensPerDay, _))
    ));
    case.settle(6, 10, 40, true, false).await;
    assert!(
        matches!(
            case.admit(7, 40).await,
            Ok(Verdict::Over(Limit::TokensPerDay, _))
        ),
        "the copy answers as the first did"
    );
    assert_eq!(
        case.held(),
        served(10),
        "the refused request counts nothing"
    );
    assert!(
        admitted(&case.admit(8, 40).await),
        "a new request is admitted in the room"
    );
}

/// Each replica's store timeout: what a request waits for a paused Redis.
const STORE_TIMEOUT: Duration = Duration::from_millis(300);

fn replica_config(upstream: &str, redis: &Redis, policy: OnStoreError) -> Config {
    let mut config = config_for(upstream);
    config.tenants.sources = vec![TenantSource::Header];
    let budgets = &mut config.tenants.budgets;
    budgets.store = redis.url();
    budgets.on_store_error = policy;
    budgets.store_timeout = STORE_TIMEOUT;
    budgets.tenant.insert(
        "team-a".to_owned(),
        Limits {
            requests_per_minute: Some(1_000_000),
            ..output_per_day(1_000_000_000)
        },
    );
    config
}

/// One request as team-a, answered within 10 s: a request waits for Redis at most its store
/// timeout, and the rest is a zero-delay replay on loopback; the seconds are for a loaded machine.
async fn send(addr: std::net::SocketAddr) -> Streamed {
    send_as(addr, "team-a", Duration::from_secs(10)).await
}

/// What the clients saw, summed.
#[derive(Default)]
struct Seen {
    answered: AtomicU64,
    served: AtomicU64,
    tokens: AtomicU64,
    refused: AtomicU64,
    /// Answers while Redis was paused: served (allow) and refused (deny).
    served_paused: AtomicU64,
    refused_paused: AtomicU64,
}

async fn answered_at_least(seen: &Seen, count: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.answered.load(Ordering::SeqCst) < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the clients were answered {} times, expected {count}",
            seen.answered.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_resumed_under_load_holds_what_was_served_to_the_token() {
    let redis = Redis::start();
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let replicas: Arc<[ServerHandle; 2]> = Arc::new([
        start_proxy(replica_config(&backend.url, &redis, OnStoreError::Allow)).await,
        start_proxy(replica_config(&backend.url, &redis, OnStoreError::Deny)).await,
    ]);
    let seen = Arc::new(Seen::default());
    let paused = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    // Four clients alternating between the replicas until told to stop.
    let mut clients = Vec::new();
    for client in 0..4usize {
        let (replicas, seen) = (Arc::clone(&replicas), Arc::clone(&seen));
        let (paused, stop) = (Arc::clone(&paused), Arc::clone(&stop));
        clients.push(tokio::spawn(async move {
            let mut n = client;
            while !stop.load(Ordering::SeqCst) {
                let was_paused = paused.load(Ordering::SeqCst);
                let streamed = send(replicas[n % 2].traffic_addr).await;
                n += 1;
                // Paused for the whole request: it certainly met the outage.
                let during = was_paused && paused.load(Ordering::SeqCst);
                match streamed.status.as_u16() {
                    200 => {
                        seen.served.fetch_add(1, Ordering::SeqCst);
                        seen.tokens
                            .fetch_add(completion_tokens(&streamed), Ordering::SeqCst);
                        if during {
                            seen.served_paused.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    503 => {
                        assert!(
                            streamed.text().contains("budget store"),
                            "deny's refusal names the store: {}",
                            streamed.text()
                        );
                        seen.refused.fetch_add(1, Ordering::SeqCst);
                        if during {
                            seen.refused_paused.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    other => panic!("unexpected status {other}: {}", streamed.text()),
                }
                seen.answered.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }

    answered_at_least(&seen, 40).await;
    redis.pause();
    paused.store(true, Ordering::SeqCst);
    // Long enough that both replicas answer several requests without Redis, and the `allow`
    // replica's settlements time out and are sent again.
    let before = seen.answered.load(Ordering::SeqCst);
    answered_at_least(&seen, before + 24).await;
    paused.store(false, Ordering::SeqCst);
    redis.resume();
    let after = seen.answered.load(Ordering::SeqCst);
    answered_at_least(&seen, after + 40).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.expect("a client");
    }
    for replica in replicas.iter() {
        wait_for_metric(replica, "tokenmeter_budget_settlements_pending", &[], 0.0).await;
    }

    let (served, tokens) = (
        seen.served.load(Ordering::SeqCst),
        seen.tokens.load(Ordering::SeqCst),
    );
    assert!(
        seen.served_paused.load(Ordering::SeqCst) > 0
            && seen.refused_paused.load(Ordering::SeqCst) > 0,
        "the outage was met: allow served and deny refused while Redis was paused"
    );
    assert_eq!(
        redis.sum("tokenmeter:{team-a}:day:*"),
        tokens as i64,
        "Redis holds the tokens the clients were served"
    );
    assert_eq!(
        redis.sum("tokenmeter:{team-a}:req:*"),
        served as i64,
        "and one request for each one served ({} refused)",
        seen.refused.load(Ordering::SeqCst)
    );
    assert_eq!(
        redis
            .cli(&["ZCARD", "tokenmeter:{team-a}:slots"])
            .as_deref(),
        Some("0"),
        "no stream is left in flight"
    );
}
