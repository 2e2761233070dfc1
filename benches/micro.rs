//! Micro benchmarks of the token path (criterion): SSE scan + meter per chunk, request prompt
//! extraction and estimate per KiB, metric recording per token, a `balance = "slo"` placement per
//! pool size.
//!
//! `cargo bench --bench micro` runs them. `micro callgrind <n>` instead streams `n` chunks
//! through the real `MeteredBody` and exits, for `valgrind --tool=callgrind` (deterministic
//! instruction counts; see docs/performance.md).
use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, Criterion, Throughput};
use tokenmeter::config::{Affinity, PoolConfig};
use tokenmeter::dialect::{openai, Dialect};
use tokenmeter::request;
use tokenmeter::route::affinity::{AffinityKeys, PoolAffinity};
use tokenmeter::route::members::Members;
use tokenmeter::sse::{Framer, StreamFormat};
use tokenmeter::sse::{Scanner, DEFAULT_MAX_LINE};

#[path = "common/meter_fixture.rs"]
mod fixture;

use fixture::{metered, noop_waker, poll_one, series, Repeat, VLLM_CHUNK};

fn per_chunk(c: &mut Criterion) {
    let mut group = c.benchmark_group("chunk");
    group.throughput(Throughput::Bytes(VLLM_CHUNK.len() as u64));
    group.bench_function("sse_scan", |b| {
        let mut scanner = Scanner::new(DEFAULT_MAX_LINE);
        b.iter(|| {
            let mut n = 0usize;
            scanner.feed(black_box(VLLM_CHUNK), |event| n += event.data.len());
            n
        })
    });
    group.bench_function("sse_scan_classify", |b| {
        let mut framer = Framer::new(StreamFormat::Sse, DEFAULT_MAX_LINE);
        b.iter(|| {
            let mut tokens = 0u32;
            framer.feed(black_box(VLLM_CHUNK), |event| {
                tokens += u32::from(Dialect::OpenAiChat.classify(event.event, event.data).token);
            });
            tokens
        })
    });
    // The classifier alone on one chunk's data: the skim fast path, then the serde walk it
    // replaces for ordinary chunks (docs/performance.md, "The classifier").
    let data = &VLLM_CHUNK[b"data: ".len()..VLLM_CHUNK.len() - 2];
    group.bench_function("classify_fast", |b| {
        b.iter(|| openai::classify(black_box(data)))
    });
    group.bench_function("classify_parsed", |b| {
        b.iter(|| openai::classify_parsed(black_box(data)))
    });
    group.bench_function("metered_body", |b| {
        let series = series();
        let mut body = metered(&series, Repeat(Bytes::from_static(VLLM_CHUNK)));
        let waker = noop_waker();
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            // The exporter folds samples every 5 s in the server; do it here too so the
            // sample buffer does not grow without bound over millions of iterations.
            if n % 100_000 == 0 {
                series.metrics().run_upkeep();
            }
            poll_one(&mut body, &waker)
        })
    });
    group.finish();
}

/// A chat body whose prompt is about `kib` KiB of text.
fn chat_body(kib: usize) -> Vec<u8> {
    let word = "lorem ipsum dolor sit amet, ";
    let text = word.repeat(kib * 1024 / word.len());
    format!(
        r#"{{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{{"role":"system","content":"You are helpful."}},{{"role":"user","content":"{text}"}}],"stream":true,"max_tokens":256}}"#
    )
    .into_bytes()
}

fn per_request(c: &mut Criterion) {
    let mut group = c.benchmark_group("request");
    for kib in [1usize, 16, 64] {
        let body = chat_body(kib);
        group.throughput(Throughput::Bytes(body.len() as u64));
        // The one walk: facts, prompt size and the usage splice together.
        group.bench_function(format!("read_{kib}KiB"), |b| {
            b.iter(|| request::read(black_box(&body)))
        });
        group.bench_function(format!("inject_include_usage_{kib}KiB"), |b| {
            b.iter(|| request::inject_include_usage(black_box(&body)))
        });
        // Prefix affinity: naming the prompt's blocks, then one pick in a pool of four backends
        // (index lookup, rendezvous home, remembering every block).
        let model = Some("meta-llama/Llama-3.1-8B-Instruct");
        group.bench_function(format!("prefix_blocks_{kib}KiB"), |b| {
            b.iter(|| request::prefix::read(black_box(&body), model, 128, 8))
        });
        // With a pool that names prompts, the one walk also locates the prompt members, and
        // naming walks only their values: what such a request pays, split in its two parts.
        let spans = request::Read::default().with_prompt_spans();
        group.bench_function(format!("read_with_spans_{kib}KiB"), |b| {
            b.iter(|| request::read_with(black_box(&body), spans))
        });
        let located = request::read_with(&body, spans)
            .and_then(|read| read.prompt_spans)
            .expect("a chat body has prompt members");
        group.bench_function(format!("prefix_name_{kib}KiB"), |b| {
            b.iter(|| request::prefix::name(black_box(&body), &located, model, 128, 8))
        });
        let (pool, affinity) = affinity_pool();
        let backends = pool.backends();
        let keys = AffinityKeys {
            generation: true,
            prefix: request::prefix::read(&body, model, 128, 8),
            headers: Vec::new(),
        };
        group.bench_function(format!("affinity_pick_{kib}KiB"), |b| {
            b.iter(|| {
                let (chosen, _) = affinity.prefer(&backends, black_box(&keys), |_| true);
                if let Some(chosen) = &chosen {
                    affinity.remember(&keys, chosen);
                }
                chosen
            })
        });
    }
    group.finish();
}

/// Teaches `backend`, the `i`th of its pool, 64 requests over varied loads and prompts (a higher
/// `i` prefills slower).
fn teach(backend: &tokenmeter::route::backend::Backend, i: usize) {
    use tokenmeter::route::backend::predict::{Ask, Load, Outcome};

    for k in 0..64u64 {
        let load = Load {
            queued_tokens: (k * 311) % 8_000,
            streams: k % 24,
        };
        let ask = Ask {
            prompt_tokens: 200 + (k * 97) % 3_000,
            cached_tokens: 0,
        };
        let work = (load.queued_tokens + ask.prompt_tokens) as f64 / 1_000.0;
        let outcome = Outcome {
            ttft: Duration::from_secs_f64(0.02 + 0.05 * work * (1.0 + i as f64 / 8.0)),
            tpot: Some(Duration::from_secs_f64(0.01 + 0.0005 * load.streams as f64)),
        };
        backend.learn(200, load, ask, outcome);
    }
}

/// A `balance = "slo"` pool `name` of `n` backends on loopback ports from `port`.
fn slo_pool(name: &str, port: usize, n: usize) -> Members {
    let config = PoolConfig {
        name: name.to_owned(),
        urls: (0..n)
            .map(|i| format!("http://127.0.0.1:{}", port + i))
            .collect(),
        balance: tokenmeter::config::BalanceLoad::Slo,
        ..PoolConfig::default()
    };
    Members::new(&config, None, None).expect("a pool")
}

/// `balance = "slo"`: one placement in a pool of `n` learned backends with streams and queued
/// prompts on each (the decision #27 keeps under 10 µs at 16 backends); at 16, also as a decode
/// pool that hands prefills off.
fn placement(c: &mut Criterion) {
    use tokenmeter::config::Config;
    use tokenmeter::route::backend::LoadGuard;
    use tokenmeter::route::placement::handed::PrefillPool;
    use tokenmeter::route::placement::{choose, Demand, PoolSlo};

    let mut group = c.benchmark_group("route");
    for n in [4usize, 16, 64] {
        let pool = slo_pool("replicas", 9100, n);
        let slo = PoolSlo::new(0, "replicas", &Config::default(), true, None);
        let mut guards = Vec::new();
        for (i, backend) in pool.backends().iter().enumerate() {
            teach(backend, i);
            for k in 0..(i % 5) {
                guards.push(LoadGuard::new(
                    std::sync::Arc::clone(backend),
                    300 * k as u64,
                ));
            }
        }
        let demand = Demand {
            prompt_tokens: 1_000,
            waited: Duration::from_millis(2),
            targets: None,
        };
        let mut rng = rand::thread_rng();
        group.bench_function(format!("slo_place_{n}_backends"), |b| {
            b.iter(|| {
                choose(
                    &pool,
                    &slo,
                    black_box(demand),
                    tokio::time::Instant::now(),
                    &[],
                    |_| 0,
                    &mut rng,
                )
            })
        });
        if n != 16 {
            continue;
        }
        // The same 16 as a decode pool handing prefills off to a prefill pool of 4 (#39): the
        // prefill pool's offer once per placement, and each decode replica scored on the path
        // through it too (a document, which takes it).
        let prefill = slo_pool("prefill", 9300, 4);
        for backend in prefill.backends().iter() {
            teach(backend, 0);
        }
        let decode = PoolSlo::new(0, "replicas", &Config::default(), false, None);
        let timeout = Duration::from_secs(10);
        decode.hand_off_to(PrefillPool::new(std::sync::Arc::new(prefill), timeout));
        for (kind, prompt_tokens) in [("chat", 1_000), ("document", 8_000)] {
            let demand = Demand {
                prompt_tokens,
                ..demand
            };
            let name = format!("slo_place_{n}_backends_handing_off_a_{kind}");
            group.bench_function(name, |b| {
                b.iter(|| {
                    choose(
                        &pool,
                        &decode,
                        black_box(demand),
                        tokio::time::Instant::now(),
                        &[],
                        |_| 0,
                        &mut rng,
                    )
                })
            });
        }
    }
    group.finish();
}

/// A `balance = "slo"` pool's headroom tick (#41) at 16 learned backends: each backend's
/// capacity found by bisection over its model's steady states, once a second off the request path.
fn headroom(c: &mut Criterion) {
    use tokenmeter::config::{AutoscaleConfig, Config};
    use tokenmeter::route::placement::PoolSlo;

    let mut group = c.benchmark_group("route");
    let pool = slo_pool("replicas", 9500, 16);
    for (i, backend) in pool.backends().iter().enumerate() {
        teach(backend, i);
    }
    let slo = PoolSlo::new(0, "replicas", &Config::default(), false, None).with_headroom(
        "replicas",
        AutoscaleConfig::default(),
        None,
        None,
    );
    let headroom = slo.headroom().expect("a headroom");
    let backends = pool.backends();
    let mut now = tokio::time::Instant::now();
    headroom.tick(&backends, slo.targets, now);
    for _ in 0..100 {
        headroom.offered(1_200);
        headroom.finished(150);
    }
    group.bench_function("headroom_tick_16_backends", |b| {
        b.iter(|| {
            now += Duration::from_secs(1);
            headroom.tick(black_box(&backends), slo.targets, now)
        })
    });
    group.finish();
}

fn affinity_pool() -> (Members, PoolAffinity) {
    let config = PoolConfig {
        name: "chat".to_owned(),
        urls: (0..4)
            .map(|i| format!("http://127.0.0.1:{}", 9100 + i))
            .collect(),
        affinity: Affinity::Prefix,
        ..PoolConfig::default()
    };
    let pool = Members::new(&config, None, None).expect("a pool");
    let affinity = PoolAffinity::new(&config, None).expect("prefix affinity");
    (pool, affinity)
}

fn per_token(c: &mut Criterion) {
    let series = series();
    let metrics = std::sync::Arc::clone(series.metrics());
    let handles = series.stream(&tokenmeter::meter::series::RequestLabels {
        operation: tokenmeter::dialect::Operation::of(Dialect::OpenAiChat),
        model: metrics.model_label(Some("m")),
        backend: std::sync::Arc::from("b"),
        pool: std::sync::Arc::from("p"),
    });
    let mut group = c.benchmark_group("metric");
    group.throughput(Throughput::Elements(1));
    let mut n = 0u64;
    group.bench_function("record_gap", |b| {
        b.iter(|| {
            n += 1;
            if n % 100_000 == 0 {
                metrics.run_upkeep();
            }
            handles.record_gap(black_box(Duration::from_micros(20_000)), None)
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = per_chunk, per_request, per_token, placement, headroom
}

/// `micro callgrind [body|classify|parsed|read|read_spans|prefix] [N]`: N chunks through the
/// metered body, or N chunk payloads through the classifier (fast path with fallback, or the serde
/// walk alone), or N reads of a 16 KiB chat body (the one walk; the walk that also locates the
/// prompt members; that walk and naming the prompt's blocks), for counting instructions under
/// `valgrind --tool=callgrind` (docs/performance.md).
fn callgrind(what: &str, chunks: u64) {
    let data = &VLLM_CHUNK[b"data: ".len()..VLLM_CHUNK.len() - 2];
    let body = chat_body(16);
    let model = Some("meta-llama/Llama-3.1-8B-Instruct");
    let spans = request::Read::default().with_prompt_spans();
    let mut tokens = 0u64;
    match what {
        "read" => (0..chunks).for_each(|_| {
            tokens += u64::from(request::read(black_box(&body)).is_some());
        }),
        "read_spans" => (0..chunks).for_each(|_| {
            tokens += u64::from(request::read_with(black_box(&body), spans).is_some());
        }),
        "prefix" => (0..chunks).for_each(|_| {
            tokens += u64::from(request::prefix::read(black_box(&body), model, 128, 8).is_some());
        }),
        "classify" => {
            (0..chunks).for_each(|_| tokens += u64::from(openai::classify(black_box(data)).token))
        }
        "parsed" => (0..chunks)
            .for_each(|_| tokens += u64::from(openai::classify_parsed(black_box(data)).token)),
        _ => {
            let series = series();
            let mut body = metered(&series, Repeat(Bytes::from_static(VLLM_CHUNK)));
            let waker = noop_waker();
            for _ in 0..chunks {
                tokens += u64::from(poll_one(&mut body, &waker) > 0);
            }
        }
    }
    println!("{what}: {chunks} chunks, {tokens} with a token");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "callgrind") {
        let what = args.get(at + 1).map_or("body", String::as_str);
        let chunks = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(100_000);
        callgrind(what, chunks);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
