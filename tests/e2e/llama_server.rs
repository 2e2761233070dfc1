//! tokenmeter in front of a real inference engine: llama.cpp's `llama-server` (built from the
//! `llama-cpp-python` source distribution, with a random-weight model; `scripts/llama/build.sh`).
//! What a new user saw there, now held: a client gets every member the server would have sent it
//! (llama.cpp's `timings`), no client can eject the server, and the first long document goes to
//! the prefill pool.

use crate::support;
use crate::support::otlp;
use std::fmt::Write as _;
use std::time::Duration;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use tokenmeter::config::Config;

use support::llama::LlamaServer;
use support::{client, config_for, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";

/// The structure of one JSON document with its keys in the order written and every value reduced
/// to its type (`s`, `n`, `b`, `null`): what a client's parser meets, whatever the timings say.
fn shape(json: &str) -> String {
    struct Shape<'a>(&'a mut String);
    impl<'de> DeserializeSeed<'de> for Shape<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Shape<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.0.push('{');
            while let Some(key) = map.next_key::<String>()? {
                let _ = write!(self.0, "{key}:");
                map.next_value_seed(Shape(&mut *self.0))?;
                self.0.push(',');
            }
            self.0.push('}');
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.0.push('[');
            while seq.next_element_seed(Shape(&mut *self.0))?.is_some() {
                self.0.push(',');
            }
            self.0.push(']');
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            self.0.push('s');
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            self.0.push('n');
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            self.0.push('n');
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            self.0.push('n');
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            self.0.push('b');
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            self.0.push_str("null");
            Ok(())
        }
    }
    let mut out = String::new();
    let mut de = serde_json::Deserializer::from_str(json);
    Shape(&mut out)
        .deserialize(&mut de)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {json}"));
    out
}

/// The shape of every event of an SSE body (`[DONE]` as itself).
fn shapes(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            let data = event
                .strip_prefix("data: ")
                .expect("one data line per event");
            if data == "[DONE]" {
                data.to_owned()
            } else {
                shape(data)
            }
        })
        .collect()
}

#[tokio::test]
async fn clients_get_every_member_the_server_would_have_sent_them() {
    let Some(llama) = LlamaServer::start(1, 2048).await else {
        return;
    };
    let proxy = start_proxy(config_for(&llama.url)).await;
    let asks = [
        (CHAT, r#""messages":[{"role":"user","content":"hi"}]"#, ""),
        (
            CHAT,
            r#""messages":[{"role":"user","content":"hi"}]"#,
            r#","stream_options":{"include_usage":false}"#,
        ),
        (COMPLETIONS, r#""prompt":"hello there""#, ""),
    ];
    for (path, input, options) in asks {
        let body = format!(
            r#"{{"model":"m",{input},"max_tokens":3,"temperature":0,"stream":true{options}}}"#
        );
        let direct = client::post(llama.addr, path, &body).await;
        let proxied = client::post(proxy.traffic_addr, path, &body).await;
        assert_eq!(proxied.status, 200, "{path}: {}", proxied.text());
        assert_eq!(
            shapes(&proxied.text()),
            shapes(&direct.text()),
            "{path}{options}: the same events, members and member order as straight from the server"
        );
        assert_eq!(
            proxied.text().matches("\"timings\":").count(),
            1,
            "{path}{options}: timings on the last event, as the server puts them"
        );
    }
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        9.0,
        "3 tokens each, exact"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_token_count_source_total",
            &[("source", "usage")]
        ),
        3.0,
        "every count from the server's usage"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_usage_injections_total",
            &[("result", "injected")]
        ),
        3.0,
        "include_usage asked for (and false turned true) on each"
    );

    // A prompt over the context: the server refuses the injected request, and that is counted.
    let long = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"r1{}"}}],"max_tokens":2,"stream":true}}"#,
        " w".repeat(3000)
    );
    let refused = client::post(proxy.traffic_addr, CHAT, &long).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(
        refused.text().contains("exceed_context_size_error"),
        "the server's own error: {}",
        refused.text()
    );
    assert_eq!(
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_usage_injections_total",
            &[("result", "rejected")]
        ),
        1.0,
        "counted as rejected, not injected"
    );
}

#[tokio::test]
async fn no_client_can_eject_the_server_but_its_death_does() {
    let Some(mut llama) = LlamaServer::start(1, 2048).await else {
        return;
    };
    let mut config = config_for(&llama.url);
    config.routing.eject_after_failures = 3;
    config.routing.retries = 0;
    let proxy = start_proxy(config).await;
    let hostile = [
        r#"{"model":"x","messages":["#,
        r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"tools":5}"#,
        r#"{"model":"x","messages":[{"role":5,"content":"hi"}]}"#,
    ];
    for body in hostile {
        for _ in 0..3 {
            let answered = client::post(proxy.traffic_addr, CHAT, body).await;
            assert_eq!(answered.status, 500, "llama-server answers 500 to {body}");
        }
    }
    // Two runs of three valid-JSON 500s: two checks, both passed.
    support::wait_for_metric(
        &proxy,
        "tokenmeter_backend_health_confirmations_total",
        &[("result", "kept")],
        2.0,
    )
    .await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_ejections_total", &[]),
        0.0,
        "nine hostile requests ejected nothing"
    );
    assert_eq!(prom::sum(&text, "tokenmeter_backend_healthy", &[]), 1.0);
    let ok = client::post(
        proxy.traffic_addr,
        CHAT,
        r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#,
    )
    .await;
    assert_eq!(ok.status, 200, "served as usual");
    assert_eq!(
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_route_decisions_total",
            &[("reason", "panic")]
        ),
        0.0,
        "never routed in panic mode"
    );

    llama.kill().await;
    for _ in 0..3 {
        let answered = client::post(proxy.traffic_addr, CHAT, hostile[1]).await;
        assert_eq!(answered.status, 502, "the server is gone");
    }
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_backend_ejections_total", &[]),
        1.0,
        "a real failure still ejects"
    );
    assert_eq!(prom::sum(&text, "tokenmeter_backend_healthy", &[]), 0.0);
}

/// Two pools over the same server (what matters is which pool the router picks): prompts of
/// 1024 estimated tokens or more go to `prefill`.
fn split(url: &str) -> Config {
    let mut config = support::split_pools(vec![url.to_owned()], vec![url.to_owned()], 1024);
    config.upstream.response_timeout = Duration::from_secs(120);
    config
}

#[tokio::test]
async fn the_first_long_document_after_start_goes_to_prefill() {
    let Some(llama) = LlamaServer::start(1, 4096).await else {
        return;
    };
    let proxy = start_proxy(split(&llama.url)).await;
    // The load generator's document: 1638 words, ~0.5 tokens per byte on this tokenizer, which
    // the 0.25 prior would estimate at ~819 tokens (decode).
    let document = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"r1{}"}}],"max_tokens":2,"stream":true}}"#,
        " w".repeat(1637)
    );
    let streamed = client::post(proxy.traffic_addr, CHAT, &document).await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    let text = proxy.metrics.render();
    let decided = |pool: &str| {
        prom::sum(
            &text,
            "tokenmeter_route_decisions_total",
            &[("pool", pool), ("reason", "rule")],
        )
    };
    assert_eq!(
        decided("prefill"),
        1.0,
        "the first request, before any usage came back"
    );
    assert_eq!(decided("decode"), 0.0, "not misrouted");
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_prompt_tokenize_total",
            &[("mode", "wait"), ("result", "ok")]
        ),
        1.0,
        "counted by llama-server's /tokenize first"
    );
    let input = prom::sum(
        &text,
        "tokenmeter_tokens_total",
        &[("gen_ai_token_type", "input")],
    );
    assert!(
        input > 1638.0,
        "the server's own count ({input}) is over the threshold by far"
    );
    let chat = client::post(
        proxy.traffic_addr,
        CHAT,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}"#,
    )
    .await;
    assert_eq!(chat.status, 200);
    assert_eq!(
        prom::sum(
            &proxy.metrics.render(),
            "tokenmeter_route_decisions_total",
            &[("pool", "decode")],
        ),
        1.0,
        "a short chat goes to decode"
    );
}

/// The `timings` of the last event that carries them, from a client's stream.
fn last_timings(body: &str) -> serde_json::Value {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
        .filter_map(|event| event.get("timings").cloned())
        .last()
        .expect("a timings object")
}

#[tokio::test]
async fn cached_prompt_tokens_are_counted_exactly() {
    let Some(llama) = LlamaServer::start(1, 2048).await else {
        return;
    };
    let proxy = start_proxy(config_for(&llama.url)).await;
    // One conversation growing turn by turn: the slot reuses the common prefix.
    let (mut seen_cached, mut seen_prompt) = (0, 0);
    let mut history = String::from("r1");
    for turn in 0..3 {
        history.push_str(&" w".repeat(20));
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{history}"}}],"max_tokens":2,"temperature":0,"stream":true}}"#
        );
        let streamed = client::post(proxy.traffic_addr, CHAT, &body).await;
        assert_eq!(streamed.status, 200, "turn {turn}: {}", streamed.text());
        // The client receives timings (given back by the proxy): the server's own figures.
        let timings = last_timings(&streamed.text());
        let cached = timings["cache_n"].as_u64().expect("cache_n");
        seen_cached += cached;
        seen_prompt += timings["prompt_n"].as_u64().expect("prompt_n") + cached;
    }
    assert!(seen_cached > 0, "later turns reused the cached prefix");
    let metrics = proxy.metrics.render();
    let cache = |result: &str| {
        prom::sum(
            &metrics,
            "tokenmeter_prompt_cache_tokens_total",
            &[("result", result)],
        )
    };
    assert_eq!(
        cache("hit"),
        seen_cached as f64,
        "hits: the server's timings.cache_n, summed"
    );
    assert_eq!(
        cache("hit") + cache("miss"),
        seen_prompt as f64,
        "hits and misses add up to the prompts (prompt_n + cache_n)"
    );
}

#[tokio::test]
async fn prefix_affinity_keeps_each_session_on_its_server() {
    let Some(first) = LlamaServer::start(4, 1024).await else {
        return;
    };
    let Some(second) = LlamaServer::start(4, 1024).await else {
        return;
    };
    let mut config = config_for(&first.url);
    config.pools = vec![tokenmeter::config::PoolConfig {
        name: "chat".to_owned(),
        urls: vec![first.url.clone(), second.url.clone()],
        affinity: tokenmeter::config::Affinity::Prefix,
        // The affinity's promise, under power of two choices. `auto` would place by prediction
        // (`slo`), where a cached prefix is a weight, and an unproven server is explored with the
        // next turn while the models are young: eighteen requests never get past that.
        balance: tokenmeter::config::BalanceLoad::Streams,
        ..tokenmeter::config::PoolConfig::default()
    }];
    config.validate().expect("valid config");
    let proxy = start_proxy(config).await;
    let served = |metrics: &str| -> Vec<f64> {
        [&first, &second]
            .iter()
            .map(|server| {
                prom::sum(
                    metrics,
                    "tokenmeter_requests_total",
                    &[("backend", &server.addr.to_string())],
                )
            })
            .collect()
    };
    const SESSIONS: usize = 6;
    const TURNS: usize = 3;
    let mut histories: Vec<Vec<serde_json::Value>> = (0..SESSIONS)
        .map(|session| {
            vec![serde_json::json!({"role": "system", "content": format!("s{} {}", session % 2, " w".repeat(60))})]
        })
        .collect();
    let mut homes: Vec<Option<usize>> = vec![None; SESSIONS];
    let mut last_prompt = [0u64; SESSIONS];
    let (mut seen_cached, mut later_cached, mut later_prompt) = (0, 0, 0);
    // Sessions interleave, turn by turn, as users do.
    for turn in 1..=TURNS {
        for session in 0..SESSIONS {
            let messages = &mut histories[session];
            messages.push(serde_json::json!({"role": "user", "content": format!("u{session} t{turn} {}", " x".repeat(20))}));
            let body = serde_json::json!({"model": "m", "messages": messages, "max_tokens": 4,
                "temperature": 0, "stream": true});
            let before = served(&proxy.metrics.render());
            let streamed = client::post(proxy.traffic_addr, CHAT, &body.to_string()).await;
            assert_eq!(
                streamed.status,
                200,
                "session {session} turn {turn}: {}",
                streamed.text()
            );
            let after = served(&proxy.metrics.render());
            let server = (0..2)
                .find(|&i| after[i] > before[i])
                .expect("a server answered");
            match homes[session] {
                None => homes[session] = Some(server),
                Some(home) => assert_eq!(home, server, "session {session} turn {turn}: its server"),
            }
            let text = streamed.text();
            let timings = last_timings(&text);
            let cached = timings["cache_n"].as_u64().expect("cache_n");
            let prompt = timings["prompt_n"].as_u64().expect("prompt_n") + cached;
            seen_cached += cached;
            if turn > 1 {
                later_cached += cached;
                later_prompt += prompt;
                assert!(
                    cached >= last_prompt[session] / 2,
                    "session {session} turn {turn}: the server reused its last prompt ({cached} of {})",
                    last_prompt[session]
                );
            }
            last_prompt[session] = prompt;
            let answer: String = text
                .lines()
                .filter_map(|line| line.strip_prefix("data: "))
                .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
                .filter_map(|event| {
                    event["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect();
            messages.push(serde_json::json!({"role": "assistant", "content": answer}));
        }
    }
    let metrics = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &metrics,
            "tokenmeter_prompt_cache_tokens_total",
            &[("result", "hit")]
        ),
        seen_cached as f64,
        "hits: the servers' timings.cache_n, summed"
    );
    let decided = |result| {
        prom::value(
            &metrics,
            "tokenmeter_affinity_decisions_total",
            &[("pool", "chat"), ("result", result)],
        )
    };
    assert_eq!(
        (decided("miss"), decided("hit"), decided("overloaded")),
        (SESSIONS as f64, (SESSIONS * (TURNS - 1)) as f64, 0.0),
        "first turns go home, later ones follow their prefix"
    );
    eprintln!(
        "later turns: {later_cached} of {later_prompt} prompt tokens cached ({:.0} %); homes {homes:?}",
        100.0 * later_cached as f64 / later_prompt as f64
    );
}

#[tokio::test]
async fn the_proxys_ttft_split_holds_the_servers_own_prompt_time() {
    let Some(llama) = LlamaServer::start(1, 2048).await else {
        return;
    };
    let receiver = otlp::Receiver::start(otlp::Protocol::HttpProtobuf).await;
    let mut config = config_for(&llama.url);
    config.tracing.endpoint = Some(receiver.endpoint());
    config.tracing.batch_delay = Duration::from_millis(20);
    let proxy = start_proxy(config).await;
    let mut rows = Vec::new();
    for (i, words) in [40, 400, 1200].into_iter().enumerate() {
        // A fresh prompt each time (the slot's cache holds none of it).
        let prompt = format!("q{i}{}", " w".repeat(words));
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{prompt}"}}],"max_tokens":2,"temperature":0,"stream":true}}"#
        );
        let streamed = client::post(proxy.traffic_addr, CHAT, &body).await;
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        let timings = last_timings(&streamed.text());
        let prompt_ms = timings["prompt_ms"].as_f64().expect("prompt_ms");
        // Exported every 20 ms (`batch_delay`); the 10 s only turn lost spans into a failure.
        let spans = receiver
            .wait_for_spans(2 * (i + 1), Duration::from_secs(10))
            .await;
        let server = spans
            .iter()
            .rev()
            .find(|s| s.kind_name() == "server")
            .expect("a server span");
        let reported = server
            .f64_attr("tokenmeter.backend.prefill_time")
            .expect("the server's prompt time on the span");
        assert!(
            (reported * 1e3 - prompt_ms).abs() < 0.001,
            "the span carries timings.prompt_ms: {reported} s vs {prompt_ms} ms"
        );
        let phase = |name: &str| {
            server
                .f64_attr(&format!("tokenmeter.phase.{name}"))
                .unwrap()
        };
        // The server's prefill lies within the backend's phases: upstream_head (writing the
        // request; llama-server answers its head after tokenizing, before computing the prompt)
        // and first_token (the prompt computed, the first token sampled).
        let backend = phase("upstream_head") + phase("first_token");
        let ttft = server.f64_attr("tokenmeter.time_to_first_token").unwrap();
        assert!(
            backend * 1e3 >= prompt_ms,
            "the server's prompt time ({prompt_ms} ms) fits in the backend's phases ({} ms)",
            backend * 1e3
        );
        assert!(
            backend <= ttft + 1e-6,
            "the backend's phases are part of the TTFT"
        );
        rows.push(format!(
            "| {} | {prompt_ms:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
            timings["prompt_n"].as_u64().unwrap_or(0),
            phase("upstream_head") * 1e3,
            phase("first_token") * 1e3,
            ttft * 1e3,
            (ttft - backend) * 1e3,
        ));
    }
    println!("| prompt tokens | server prompt_ms | upstream_head ms | first_token ms | TTFT ms | other phases ms |");
    println!("|---|---|---|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    let metrics = proxy.metrics.render();
    assert_eq!(
        prom::sum(&metrics, "tokenmeter_backend_prefill_seconds_count", &[]),
        3.0,
        "each request's reported prompt time counted"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn outcomes_on_the_real_server_are_counted_by_who_caused_them() {
    let Some(llama) = LlamaServer::start(1, 2048).await else {
        return;
    };
    let proxy = start_proxy(config_for(&llama.url)).await;
    let asks = [
        // Not JSON: llama-server answers 500 (`json.exception.parse_error.101`); the client's.
        (CHAT, r#"{"model":"x","messages":["#, 500, "client_error"),
        (COMPLETIONS, "not json", 500, "client_error"),
        // Started without --embeddings: 501, the client asked for what is not served.
        (
            "/v1/embeddings",
            r#"{"model":"x","input":"hi"}"#,
            501,
            "client_error",
        ),
        // JSON it cannot use: also 500, with "type": "server_error" like a real failure. The
        // proxy read the body, so it is not second-guessed: the backend's.
        (
            CHAT,
            r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"tools":5}"#,
            500,
            "upstream_error",
        ),
        (
            CHAT,
            r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#,
            200,
            "ok",
        ),
    ];
    let mut expected = std::collections::BTreeMap::new();
    for (path, body, status, counted) in asks {
        let answered = client::post(proxy.traffic_addr, path, body).await;
        assert_eq!(
            answered.status.as_u16(),
            status,
            "{path} {body}: {}",
            answered.text()
        );
        *expected.entry(counted).or_insert(0.0) += 1.0;
    }
    // Streams read to `[DONE]` and closed at once, as the OpenAI SDK does: whether the server's
    // terminating chunk reached the proxy before the close or not, each is ok.
    for _ in 0..5 {
        let body = r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}"#;
        let mut stream = client::open(proxy.traffic_addr, CHAT, body).await;
        assert_eq!(stream.status, 200);
        let mut seen = Vec::new();
        while !seen.ends_with(b"data: [DONE]\n\n") {
            let (_, bytes) = stream.next_frame().await.expect("a frame").expect("ok");
            seen.extend_from_slice(&bytes);
        }
        stream.disconnect();
        *expected.entry("ok").or_insert(0.0) += 1.0;
    }
    let total: f64 = expected.values().sum();
    support::wait_for_metric(&proxy, "tokenmeter_requests_total", &[], total).await;
    let text = proxy.metrics.render();
    for counted in [
        "ok",
        "client_error",
        "upstream_error",
        "cancelled",
        "timeout",
    ] {
        assert_eq!(
            prom::sum(&text, "tokenmeter_requests_total", &[("outcome", counted)]),
            expected.get(counted).copied().unwrap_or(0.0),
            "{counted}:\n{text}"
        );
    }
}

#[tokio::test]
async fn a_server_killed_mid_stream_leaves_one_warn_line() {
    use crate::prometheus_support::process::{free_addr, Proc, Scratch, TOKENMETER};
    let Some(mut llama) = LlamaServer::start(1, 2048).await else {
        return;
    };
    let scratch = Scratch::new("llama-killed-log");
    let (traffic, admin) = (free_addr(), free_addr());
    let mut serve = std::process::Command::new(TOKENMETER);
    serve
        .arg("serve")
        .env("TOKENMETER_LISTEN", traffic.to_string())
        .env("TOKENMETER_ADMIN_LISTEN", admin.to_string())
        .env("TOKENMETER_UPSTREAM", &llama.url)
        .env_remove("RUST_LOG");
    let proxy = Proc::spawn("tokenmeter", serve, scratch.path());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(tokio::net::TcpStream::connect(admin).await.is_ok()
        && client::get(admin, "/readyz").await.0 == 200)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "ready\n{}",
            proxy.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // 1500 tokens that no end-of-sequence cuts short: the stream is still going when the server
    // is killed, after its first tokens, however fast or slow the machine.
    let body = r#"{"model":"x","messages":[{"role":"user","content":"hi"}],"max_tokens":1500,"ignore_eos":true,"stream":true}"#;
    let mut stream = client::open(traffic, CHAT, body).await;
    assert_eq!(stream.status, 200);
    let mut seen = Vec::new();
    while seen
        .windows(b"\"content\":\"".len())
        .filter(|w| w == b"\"content\":\"")
        .count()
        < 3
    {
        let (_, bytes) = stream.next_frame().await.expect("a frame").expect("ok");
        seen.extend_from_slice(&bytes);
    }
    llama.kill().await;
    let mut broke = false;
    while let Some(frame) = stream.next_frame().await {
        if frame.is_err() {
            broke = true;
            break;
        }
    }
    assert!(broke, "the client sees a broken stream, not a clean end");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, metrics) = client::get(admin, "/metrics").await;
        let failed = prom::sum(
            &metrics,
            "tokenmeter_requests_total",
            &[("outcome", "upstream_error")],
        );
        if failed == 1.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "counted as an upstream error: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let log = std::fs::read_to_string(scratch.path().join("tokenmeter.log")).expect("the log");
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("stream cut by its upstream"))
        .collect();
    assert_eq!(lines.len(), 1, "one line for the one cut stream:\n{log}");
    for field in [
        "WARN".to_owned(),
        format!("backend=\"{}\"", llama.addr),
        "phase=\"mid_stream\"".to_owned(),
        "outcome=\"upstream_error\"".to_owned(),
    ] {
        assert!(lines[0].contains(&field), "{field} in {}", lines[0]);
    }
    eprintln!("{}", lines[0]);
}
