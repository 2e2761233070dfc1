use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::config::{BalanceLoad, Config, PoolConfig};
use crate::context::RequestContext;
use crate::meter::record::Generation;
use crate::metrics::Metrics;
use crate::route::backend::{Backend, LoadGuard};
use crate::route::health::{EjectPolicy, Fault};
use crate::route::record::RoutePlan;
use crate::route::Router;

use super::*;

const BACKENDS: usize = 4;

fn config(affinity: &str, edit: impl FnOnce(&mut PoolConfig)) -> Config {
    let mut pool = PoolConfig {
        name: "chat".to_owned(),
        urls: (0..BACKENDS)
            .map(|i| format!("http://127.0.0.1:{}", 9100 + i))
            .collect(),
        affinity: Affinity::parse(affinity).expect("a valid affinity"),
        // The affinity's own load bound, with power of two choices behind it; a `slo` pool
        // (`auto`'s choice here) weighs the cached tokens in its predictions instead, which
        // route::placement's tests cover.
        balance: BalanceLoad::Streams,
        ..PoolConfig::default()
    };
    edit(&mut pool);
    let config = Config {
        pools: vec![pool],
        ..Config::default()
    };
    config.validate().expect("valid config");
    config
}

/// A router (one tokenmeter instance) and its metrics.
fn instance(config: &Config) -> (Router, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(config).expect("metrics"));
    let router = Router::from_config(config, Arc::clone(&metrics)).expect("router");
    (router, metrics)
}

/// A router of one prefix-affinity pool whose load bound is `slack` streams over the least loaded
/// backend (a load factor of 1), and its metrics.
fn bounded(slack: u64) -> (Router, Arc<Metrics>) {
    instance(&config("prefix", |pool| {
        pool.affinity_load_factor = 1.0;
        pool.affinity_load_slack = slack;
    }))
}

/// Two routers (two tokenmeter replicas) of one pool with `affinity`, sharing nothing; the first
/// one's metrics.
fn two_instances(affinity: &str) -> (Router, Router, Arc<Metrics>) {
    let config = config(affinity, |_| {});
    let (a, metrics) = instance(&config);
    let (b, _) = instance(&config);
    (a, b, metrics)
}

/// The body of turn `turns` of conversation `id` (system prompt `system` of a shared few).
fn turn(id: usize, system: usize, turns: usize) -> serde_json::Value {
    let mut messages = vec![json!({"role": "system", "content": format!(
        "System prompt {system}: you are a helpful assistant for team {system}. {}",
        "Follow the house style. ".repeat(20))})];
    for t in 1..=turns {
        messages.push(json!({"role": "user", "content": format!("Conversation {id}, question {t}: {}", "why? ".repeat(8))}));
        if t < turns {
            messages.push(json!({"role": "assistant", "content": format!("Answer {t} to {id}: {}", "because. ".repeat(30))}));
        }
    }
    json!({"model": "m", "stream": true, "messages": messages})
}

fn context(body: &serde_json::Value) -> RequestContext {
    let mut context = RequestContext::new(Instant::now(), None::<SocketAddr>);
    let body = bytes::Bytes::from(body.to_string());
    context.request.generation = Some(Generation {
        read: crate::request::read_with(&body, crate::request::Read::default().with_prompt_spans()),
        body,
    });
    context.request.model = Some("m".to_owned());
    context.route.plan = RoutePlan {
        pools: vec![0],
        spill_queue_tokens: None,
    };
    context
}

/// Where `router` sends this request (and the headers it carries).
fn route(router: &Router, body: &serde_json::Value, headers: &http::HeaderMap) -> Arc<Backend> {
    route_at(router, body, headers, Instant::now())
}

fn route_at(
    router: &Router,
    body: &serde_json::Value,
    headers: &http::HeaderMap,
    now: Instant,
) -> Arc<Backend> {
    let context = context(body);
    let keys = router.affinity_keys(&context, headers);
    router
        .pick(&context.route.plan, &keys, Default::default(), &[], now)
        .expect("a backend")
        .backend
}

fn port(backend: &Backend) -> u16 {
    backend.target.authority.port_u16().expect("a port")
}

fn decisions(metrics: &Metrics) -> HashMap<String, u64> {
    metrics
        .render()
        .lines()
        .filter(|line| line.starts_with("tokenmeter_affinity_decisions_total{"))
        .filter_map(|line| {
            let result = line.split("result=\"").nth(1)?.split('"').next()?;
            let value = line.rsplit(' ').next()?.parse().ok()?;
            Some((result.to_owned(), value))
        })
        .collect()
}

#[test]
fn a_conversation_stays_on_one_backend_and_conversations_spread() {
    let (router, metrics) = instance(&config("prefix", |_| {}));
    let none = http::HeaderMap::new();
    let mut per_backend = [0usize; BACKENDS];
    for id in 0..40 {
        let first = route(&router, &turn(id, id % 3, 1), &none);
        for turns in 2..=4 {
            let next = route(&router, &turn(id, id % 3, turns), &none);
            assert_eq!(
                port(&next),
                port(&first),
                "conversation {id}, turn {turns}: same backend"
            );
        }
        per_backend[usize::from(port(&first) - 9100)] += 1;
    }
    assert!(
        per_backend.iter().all(|&n| n >= 4),
        "40 conversations over 3 system prompts spread over every backend: {per_backend:?}"
    );
    let counted = decisions(&metrics);
    assert_eq!(
        counted.get("miss"),
        Some(&40),
        "each first turn finds nothing: {counted:?}"
    );
    assert_eq!(
        counted.get("hit"),
        Some(&120),
        "every later turn is a hit: {counted:?}"
    );
    assert_eq!(
        counted.get("overloaded"),
        Some(&0),
        "nothing was loaded: {counted:?}"
    );
}

#[test]
fn two_instances_that_share_nothing_agree() {
    let (a, b, _) = two_instances("prefix");
    let none = http::HeaderMap::new();
    for id in 0..20 {
        let homes: Vec<u16> = (1..=4)
            .map(|turns| {
                // The client alternates between the two tokenmeter replicas.
                let via = if turns % 2 == 1 { &a } else { &b };
                port(&route(via, &turn(id, id % 2, turns), &none))
            })
            .collect();
        assert!(
            homes.iter().all(|&p| p == homes[0]),
            "conversation {id}: {homes:?}"
        );
    }
}

#[test]
fn an_overloaded_home_gives_way_and_the_conversation_follows() {
    let (router, metrics) = bounded(2);
    let none = http::HeaderMap::new();
    let home = route(&router, &turn(7, 0, 1), &none);
    // Load the home past the bound: 3 streams against 0 elsewhere (bound 1.0 x 0 + 2).
    let load: Vec<LoadGuard> = (0..3)
        .map(|_| LoadGuard::new(Arc::clone(&home), 0))
        .collect();
    let moved = route(&router, &turn(7, 0, 2), &none);
    assert_ne!(
        port(&moved),
        port(&home),
        "an overloaded home is passed over"
    );
    assert_eq!(
        decisions(&metrics).get("overloaded"),
        Some(&1),
        "and counted"
    );
    let next = route(&router, &turn(7, 0, 3), &none);
    assert_eq!(
        port(&next),
        port(&moved),
        "the next turn follows the prefix to where it went"
    );
    drop(load);
    let later = route(&router, &turn(7, 0, 4), &none);
    assert_eq!(
        port(&later),
        port(&moved),
        "and stays there once the home is free again"
    );
    assert_eq!(decisions(&metrics).get("hit"), Some(&2), "both were hits");
}

#[test]
fn within_the_bound_the_home_keeps_its_conversations() {
    let (router, metrics) = instance(&config("prefix", |_| {}));
    let none = http::HeaderMap::new();
    let home = route(&router, &turn(3, 0, 1), &none);
    // 1.5 x 0 + 4 = 4 streams are still within the default bound.
    let _load: Vec<LoadGuard> = (0..4)
        .map(|_| LoadGuard::new(Arc::clone(&home), 0))
        .collect();
    assert_eq!(
        port(&route(&router, &turn(3, 0, 2), &none)),
        port(&home),
        "4 streams: stays"
    );
    let _more = LoadGuard::new(Arc::clone(&home), 0);
    assert_ne!(
        port(&route(&router, &turn(3, 0, 3), &none)),
        port(&home),
        "5 streams: over"
    );
    assert_eq!(decisions(&metrics).get("overloaded"), Some(&1));
}

#[test]
fn an_ejected_backend_leaves_the_index() {
    let (router, metrics) = bounded(0);
    let none = http::HeaderMap::new();
    let home = route(&router, &turn(11, 1, 1), &none);
    // Displace the conversation from its home, so its index entry and its home differ.
    let load = LoadGuard::new(Arc::clone(&home), 0);
    let held_by = route(&router, &turn(11, 1, 2), &none);
    drop(load);
    assert_ne!(port(&held_by), port(&home));
    assert_eq!(
        port(&route(&router, &turn(11, 1, 3), &none)),
        port(&held_by),
        "the index holds it"
    );
    let policy = EjectPolicy {
        after: 1,
        base: Duration::from_secs(1),
        max: Duration::from_secs(1),
    };
    let now = Instant::now();
    held_by.on_failure(now, &policy, Fault::Connection);
    let later = now + Duration::from_secs(2);
    assert!(held_by.available(later), "the ejection is over");
    let after = route_at(&router, &turn(11, 1, 4), &none, later);
    assert_eq!(
        port(&after),
        port(&home),
        "the index forgot the ejected backend (whose cache may be gone): the conversation goes home"
    );
    assert_eq!(
        decisions(&metrics).get("miss"),
        Some(&1),
        "a hit: the index also remembers that home served the first turn (only the first turn \
         was a miss)"
    );
}

#[test]
fn a_backend_that_leaves_the_pool_leaves_the_index() {
    let mut config = config("prefix", |pool| {
        pool.urls.clear();
        pool.dns = Some("vllm.example:8000".to_owned());
    });
    config.pools[0].urls.clear();
    let (router, _) = instance(&config);
    let pool = &router.pools()[0];
    let addrs: Vec<SocketAddr> = (0..BACKENDS)
        .map(|i| SocketAddr::from(([10, 0, 0, 1 + i as u8], 8000)))
        .collect();
    pool.members.set_resolved(&addrs);
    let none = http::HeaderMap::new();
    let mut homes = Vec::new();
    for id in 0..30 {
        homes.push(
            route(&router, &turn(id, 0, 1), &none)
                .target
                .label
                .to_string(),
        );
    }
    let gone = homes[0].clone();
    let left: Vec<SocketAddr> = addrs
        .iter()
        .filter(|a| a.to_string() != gone)
        .copied()
        .collect();
    pool.members.set_resolved(&left);
    for (id, before) in homes.iter().enumerate() {
        let now = route(&router, &turn(id, 0, 2), &none)
            .target
            .label
            .to_string();
        if *before == gone {
            assert_ne!(now, gone, "conversation {id}: its backend left, so must it");
        } else {
            assert_eq!(
                &now, before,
                "conversation {id}: only the leaver's conversations move"
            );
        }
    }
}

#[test]
fn the_index_is_bounded() {
    let (router, metrics) = instance(&config("prefix", |pool| pool.affinity_index_blocks = 64));
    let none = http::HeaderMap::new();
    for id in 0..200 {
        route(&router, &turn(id, id % 5, 2), &none);
    }
    let held: f64 = metrics
        .render()
        .lines()
        .find_map(|line| line.strip_prefix("tokenmeter_affinity_index_blocks{pool=\"chat\"} "))
        .expect("the gauge is exported")
        .parse()
        .expect("a number");
    assert!(
        (32.0..=64.0).contains(&held),
        "at most 64 blocks held, at least the newest half: {held}"
    );
}

#[test]
fn a_session_header_keys_the_home() {
    let (a, b, metrics) = two_instances("header:x-session-id");
    let mut seen = std::collections::HashSet::new();
    for session in 0..40 {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-session-id",
            format!("user-{session}").parse().expect("a value"),
        );
        let body = turn(1000 + session, 0, 1);
        let home = port(&route(&a, &body, &headers));
        let other_body = turn(2000 + session, 1, 3);
        assert_eq!(
            port(&route(&b, &other_body, &headers)),
            home,
            "session {session}: one home, whatever the prompt or instance"
        );
        seen.insert(home);
    }
    assert_eq!(seen.len(), BACKENDS, "sessions spread over every backend");
    // Without the header the request is still routed (balanced), and counted a miss below.
    route(&a, &turn(1, 0, 1), &http::HeaderMap::new());
    let counted = decisions(&metrics);
    assert_eq!(
        (counted.get("hit"), counted.get("miss")),
        (Some(&40), Some(&1)),
        "{counted:?}"
    );
}

#[test]
fn requests_that_are_not_generations_are_balanced_and_not_counted() {
    let (router, metrics) = instance(&config("prefix", |_| {}));
    let mut context = RequestContext::new(Instant::now(), None);
    context.route.plan = RoutePlan {
        pools: vec![0],
        spill_queue_tokens: None,
    };
    let keys = router.affinity_keys(&context, &http::HeaderMap::new());
    assert!(
        router
            .pick(
                &context.route.plan,
                &keys,
                Default::default(),
                &[],
                Instant::now()
            )
            .is_some(),
        "balanced"
    );
    assert!(
        decisions(&metrics).values().all(|&n| n == 0),
        "not an affinity decision"
    );
}

#[test]
fn rendezvous_moves_only_what_the_leaver_held() {
    let pool = crate::route::members::Members::new(&config("prefix", |_| {}).pools[0], None, None)
        .expect("a pool");
    let backends = pool.backends();
    let all: Vec<&Arc<Backend>> = backends.iter().collect();
    let without_first: Vec<&Arc<Backend>> = backends.iter().skip(1).collect();
    let mut moved = 0;
    for key in 0..1000u64 {
        let before = home(&all, key).expect("a home");
        let after = home(&without_first, key).expect("a home");
        if Arc::ptr_eq(&before, &backends[0]) {
            moved += 1;
        } else {
            assert!(
                Arc::ptr_eq(&before, &after),
                "key {key} moved though its home stayed"
            );
        }
    }
    assert!(
        (200..300).contains(&moved),
        "about a quarter were homed on the leaver: {moved}"
    );
}

#[test]
fn length_rules_pick_the_pool_and_affinity_acts_inside_it() {
    let mut config = config("prefix", |pool| pool.name = "decode".to_owned());
    config.pools.insert(
        0,
        PoolConfig {
            name: "prefill".to_owned(),
            urls: vec!["http://127.0.0.1:9200".to_owned()],
            ..PoolConfig::default()
        },
    );
    config.rules = vec![
        crate::config::RuleConfig {
            pool: "prefill".to_owned(),
            min_prompt_tokens: Some(2048),
            ..Default::default()
        },
        crate::config::RuleConfig {
            pool: "decode".to_owned(),
            ..Default::default()
        },
    ];
    config.validate().expect("valid config");
    let (router, metrics) = instance(&config);
    let none = http::HeaderMap::new();
    let routed = |body: &serde_json::Value, prompt_tokens: u64| {
        let mut context = context(body);
        context.route.plan = router.rules.pools_for(crate::route::rules::RuleInput {
            path: "/v1/chat/completions",
            model: Some("m"),
            prompt_tokens,
        });
        let keys = router.affinity_keys(&context, &none);
        let pick = router
            .pick(
                &context.route.plan,
                &keys,
                Default::default(),
                &[],
                Instant::now(),
            )
            .expect("a backend");
        (
            router.pools()[pick.pool].name.to_string(),
            port(&pick.backend),
        )
    };
    let (pool, _) = routed(&turn(1, 0, 1), 5000);
    assert_eq!(
        pool, "prefill",
        "a long prompt goes to the prefill pool first"
    );
    let (pool, home) = routed(&turn(2, 0, 1), 300);
    assert_eq!(pool, "decode", "a short one to decode");
    for turns in 2..=4 {
        assert_eq!(
            routed(&turn(2, 0, turns), 300),
            ("decode".to_owned(), home),
            "turn {turns}: its decode backend"
        );
    }
    let counted = decisions(&metrics);
    assert_eq!(
        counted.values().sum::<u64>(),
        4,
        "only the decode pool, which has an affinity, counts decisions: {counted:?}"
    );
}

#[test]
fn every_backend_that_served_a_shared_prefix_is_known_to_hold_it() {
    let config = config("prefix", |_| {});
    let (router, _) = instance(&config);
    let affinity = PoolAffinity::new(&config.pools[0], None).expect("prefix affinity");
    let backends = router.pools()[0].backends();
    let none = http::HeaderMap::new();
    let keys = |body: &serde_json::Value| router.affinity_keys(&context(body), &none);
    // Conversation 1 on backend 0, then conversation 2, of the same system prompt, on backend 1.
    affinity.remember(&keys(&turn(1, 7, 1)), &backends[0]);
    affinity.remember(&keys(&turn(2, 7, 1)), &backends[1]);
    let next = keys(&turn(1, 7, 2));
    let runs = affinity
        .cached_runs(&next)
        .expect("the first block is known");
    let held = |i: usize| runs.bytes_of(backends[i].owner());
    assert!(
        held(0) > held(1),
        "backend 0 holds conversation 1's first turn: {} against {}",
        held(0),
        held(1)
    );
    assert!(
        held(1) > 0,
        "backend 1 served the system prompt last, and backend 0 still holds it too"
    );
    assert_eq!((held(2), held(3)), (0, 0), "the others served none of it");
    for (i, backend) in backends.iter().enumerate() {
        assert_eq!(
            affinity.cached_bytes(&next, backend),
            Some(held(i)),
            "one backend asked alone agrees (backend {i})"
        );
    }
    let prompt_bytes = next.prefix.as_ref().expect("a prefix").bytes;
    assert_eq!(
        runs.tokens_of(backends[0].owner(), 1_000),
        1_000 * held(0) / prompt_bytes,
        "its share of the prompt's tokens"
    );
}
