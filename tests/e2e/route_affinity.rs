//! End to end: prefix affinity with two tokenmeter replicas that share no state, in front of the
//! same four simulated replicas (prefix caching on, as vLLM's default, reporting
//! `prompt_tokens_details.cached_tokens`). Clients alternate between the two proxies turn by turn,
//! as behind a Kubernetes Service; every turn of a conversation must reach the replica that holds
//! its prefix, which the replica's own cached-token count proves exactly.

use crate::support;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use serde_json::{json, Value};
use tokenmeter::config::{Affinity, BalanceLoad, Config, PoolConfig};
use tokenmeter::server::ServerHandle;
use tokenmeter::testbed::sim::{self, SimConfig, SimHandle};
use tokio::net::TcpListener;

use support::{client, config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const MODEL: &str = "sim-fast";
const REPLICAS: usize = 4;
const CONVERSATIONS: usize = 24;
const TURNS: usize = 4;
const OUTPUT: u64 = 7;

async fn start_sim() -> SimHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind sim");
    let mut config = SimConfig::profile("fast").expect("fast profile");
    config.enable_prompt_tokens_details = true;
    sim::spawn(listener, config).await.expect("sim starts")
}

fn proxy_config(sims: &[SimHandle], affinity: &str) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![PoolConfig {
        name: "chat".to_owned(),
        urls: sims
            .iter()
            .map(|sim| format!("http://{}", sim.local_addr()))
            .collect(),
        affinity: Affinity::parse(affinity).expect("valid affinity"),
        // Two gateways that share nothing agree on a conversation's home under power of two
        // choices; `slo` (`auto`'s choice for a prefix affinity) weighs what each one's own index
        // saw, and agreeing across gateways is #40's.
        balance: BalanceLoad::Streams,
        ..PoolConfig::default()
    }];
    config.validate().expect("valid config");
    config
}

/// What one turn's stream said: the answer text, and usage's prompt and cached tokens.
struct Turn {
    answer: String,
    prompt_tokens: u64,
    cached_tokens: u64,
}

async fn send(proxy: SocketAddr, messages: &[Value]) -> Turn {
    let body = json!({
        "model": MODEL, "messages": messages, "stream": true, "max_tokens": OUTPUT,
        "ignore_eos": true, "stream_options": {"include_usage": true},
    });
    let streamed = client::post(proxy, CHAT, &body.to_string()).await;
    assert_eq!(streamed.status, 200, "status: {}", streamed.text());
    let mut turn = Turn {
        answer: String::new(),
        prompt_tokens: 0,
        cached_tokens: 0,
    };
    for line in streamed.text().lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(text) = event["choices"][0]["delta"]["content"].as_str() {
            turn.answer.push_str(text);
        }
        if let Some(prompt) = event["usage"]["prompt_tokens"].as_u64() {
            turn.prompt_tokens = prompt;
            turn.cached_tokens = event["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .expect("the replica reports cached tokens");
        }
    }
    assert!(turn.prompt_tokens > 0, "usage arrived: {}", streamed.text());
    turn
}

fn system_prompt(n: usize) -> String {
    format!(
        "You are assistant {n} of the support team. {}",
        "Answer briefly and politely. ".repeat(12)
    )
}

/// Requests each replica served, by the proxies' own counters.
fn served(proxies: &[&ServerHandle]) -> HashMap<String, f64> {
    let mut by_backend = HashMap::new();
    for proxy in proxies {
        for sample in prom::find(&proxy.metrics.render(), "tokenmeter_requests_total", &[]) {
            if let Some(backend) = sample.labels.get("backend") {
                *by_backend.entry(backend.clone()).or_insert(0.0) += sample.value;
            }
        }
    }
    by_backend
}

#[tokio::test]
async fn two_replicas_that_share_nothing_keep_each_conversation_on_its_cache() {
    let mut sims = Vec::new();
    for _ in 0..REPLICAS {
        sims.push(start_sim().await);
    }
    let config = proxy_config(&sims, "prefix");
    let a = start_proxy(config.clone()).await;
    let b = start_proxy(config).await;
    let mut previous_backends = HashMap::new();
    let mut homes = HashSet::new();
    let mut cached_seen = 0;
    for conversation in 0..CONVERSATIONS {
        let mut messages =
            vec![json!({"role": "system", "content": system_prompt(conversation % 3)})];
        let mut last: Option<Turn> = None;
        for turn in 1..=TURNS {
            messages.push(json!({"role": "user", "content": format!("Conversation {conversation} asks question {turn}.")}));
            // Turns alternate between the two proxies.
            let proxy = if turn % 2 == 1 { &a } else { &b };
            let before = served(&[&a, &b]);
            let answered = send(proxy.traffic_addr, &messages).await;
            let after = served(&[&a, &b]);
            let backend = after
                .iter()
                .find(|(name, n)| before.get(*name).copied().unwrap_or(0.0) < **n)
                .map(|(name, _)| name.clone())
                .expect("one backend served the turn");
            if let Some(previous) = &last {
                assert_eq!(
                    previous_backends.get(&conversation),
                    Some(&backend),
                    "conversation {conversation} turn {turn}: the same replica as its last turn"
                );
                // The replica cached the last turn's prompt and output in 16-token blocks; this
                // prompt begins with exactly those tokens.
                let expected =
                    (16 * ((previous.prompt_tokens + OUTPUT) / 16)).min(answered.prompt_tokens - 1);
                assert_eq!(
                    answered.cached_tokens, expected,
                    "conversation {conversation} turn {turn}: the replica's cache served the last turn's prefix"
                );
            } else {
                homes.insert(backend.clone());
            }
            cached_seen += answered.cached_tokens;
            previous_backends.insert(conversation, backend);
            messages.push(json!({"role": "assistant", "content": answered.answer}));
            last = Some(answered);
        }
    }
    assert!(
        homes.len() >= 3,
        "{CONVERSATIONS} conversations spread over the replicas: {homes:?}"
    );
    for (name, proxy) in [("a", &a), ("b", &b)] {
        let text = proxy.metrics.render();
        let count = |result| {
            prom::value(
                &text,
                "tokenmeter_affinity_decisions_total",
                &[("pool", "chat"), ("result", result)],
            )
        };
        assert_eq!(
            (count("hit"), count("miss"), count("overloaded")),
            (CONVERSATIONS as f64, CONVERSATIONS as f64, 0.0),
            "proxy {name}: its first turn of each conversation finds nothing (the home decides), its second follows its index"
        );
    }
    let metered: f64 = [&a, &b]
        .iter()
        .map(|proxy| {
            prom::sum(
                &proxy.metrics.render(),
                "tokenmeter_prompt_cache_tokens_total",
                &[("result", "hit")],
            )
        })
        .sum();
    assert_eq!(
        metered, cached_seen as f64,
        "the proxies metered every cached token the replicas reported"
    );
}

#[tokio::test]
async fn without_affinity_the_same_conversations_lose_their_cache() {
    let mut sims = Vec::new();
    for _ in 0..REPLICAS {
        sims.push(start_sim().await);
    }
    let mut config = proxy_config(&sims, "none");
    config.pools[0].balance = tokenmeter::config::BalanceLoad::RoundRobin;
    let proxy = start_proxy(config).await;
    let mut later_turns_cached = 0;
    let mut later_turns_prompt = 0;
    for conversation in 0..8 {
        let mut messages =
            vec![json!({"role": "system", "content": system_prompt(conversation % 3)})];
        for turn in 1..=TURNS {
            messages.push(json!({"role": "user", "content": format!("Conversation {conversation} asks question {turn}.")}));
            let answered = send(proxy.traffic_addr, &messages).await;
            if turn > 1 {
                later_turns_cached += answered.cached_tokens;
                later_turns_prompt += answered.prompt_tokens;
            }
            messages.push(json!({"role": "assistant", "content": answered.answer}));
        }
    }
    // Round-robin over 4 replicas sends every next turn elsewhere: only system prompts hit.
    let ratio = later_turns_cached as f64 / later_turns_prompt as f64;
    assert!(
        ratio < 0.6,
        "the control: scattered turns reuse little beyond shared system prompts ({ratio:.2})"
    );
}
