//! The protobuf exposition of `/metrics`, read as Prometheus reads it: the scraper's `Accept`
//! header picks it, every family of the text exposition is in it with the same values, and the
//! latency histograms carry native buckets that agree with their samples.

use crate::support;
use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message;
use support::backend::{Backend, Script};
use support::client::{self, Protocol};
use support::{config_for, events_of, fixture, start_proxy};
use tokenmeter::metrics::exposition;
use tokenmeter::metrics::native::{upper_bound, SCHEMA, ZERO_THRESHOLD};
use tokenmeter::metrics::protobuf::pb;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
/// What Prometheus 2.42 sends with `--enable-feature=native-histograms`.
const PROMETHEUS_ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// A backend answering every request with the vLLM fixture, an event every 3 ms.
async fn fixture_backend() -> Backend {
    Backend::start(|_| {
        Script::sse(
            events_of(&fixture("vllm-chat-usage.sse"))
                .into_iter()
                .map(|event| (Duration::from_millis(3), event))
                .collect(),
        )
    })
    .await
}

/// `GET /metrics` on the admin port with this `Accept` header.
async fn scrape(admin: std::net::SocketAddr, accept: &str) -> client::Streamed {
    client::open_with(
        admin,
        Protocol::Http1,
        "GET",
        "/metrics",
        "",
        &[("accept", accept)],
    )
    .await
    .collect()
    .await
}

fn decode_all(mut bytes: &[u8]) -> Vec<pb::MetricFamily> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        out.push(pb::MetricFamily::decode_length_delimited(&mut bytes).expect("one family"));
    }
    out
}

fn label_map(pairs: &[pb::LabelPair]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|p| (p.name().to_owned(), p.value().to_owned()))
        .collect()
}

#[tokio::test]
async fn every_family_round_trips_and_latencies_carry_native_buckets() {
    let backend = fixture_backend().await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    for _ in 0..3 {
        client::post(proxy.traffic_addr, CHAT, BODY).await;
    }
    // Nothing runs between the two scrapes, so both must say the same.
    let (_, text) = client::get(proxy.admin_addr, "/metrics").await;
    let scrape = scrape(proxy.admin_addr, PROMETHEUS_ACCEPT).await;
    assert_eq!(scrape.status, 200);
    assert_eq!(
        scrape
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some(tokenmeter::metrics::protobuf::CONTENT_TYPE)
    );
    let families = decode_all(&scrape.bytes());

    // The same family names as the text exposition, with its types.
    let text_types: BTreeMap<String, String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect();
    let proto_types: BTreeMap<String, String> = families
        .iter()
        .map(|f| (f.name().to_owned(), f.r#type().as_str_name().to_lowercase()))
        .collect();
    assert_eq!(proto_types, text_types, "the same families, the same types");
    assert!(text_types.len() > 10, "a real scrape: {text_types:?}");

    let samples = exposition::samples(&text);
    let text_value = |name: &str, labels: &BTreeMap<String, String>| -> f64 {
        let found: Vec<_> = samples
            .iter()
            .filter(|s| s.name == name && &s.labels == labels)
            .collect();
        assert_eq!(found.len(), 1, "{name}{labels:?} once in the text");
        found[0].value
    };
    let mut natives = 0;
    for family in &families {
        let name = family.name();
        for metric in &family.metric {
            let labels = label_map(&metric.label);
            if let Some(counter) = &metric.counter {
                assert_eq!(counter.value(), text_value(name, &labels), "{name}");
            } else if let Some(gauge) = &metric.gauge {
                assert_eq!(gauge.value(), text_value(name, &labels), "{name}");
            } else if let Some(h) = &metric.histogram {
                let count = text_value(&format!("{name}_count"), &labels);
                assert_eq!(h.sample_count() as f64, count, "{name} count");
                let sum = text_value(&format!("{name}_sum"), &labels);
                assert!(
                    (h.sample_sum() - sum).abs() <= 1e-9 * sum.abs().max(1.0),
                    "{name} sum"
                );
                for bucket in &h.bucket {
                    let mut with_le = labels.clone();
                    with_le.insert("le".to_owned(), bucket.upper_bound().to_string());
                    assert_eq!(
                        bucket.cumulative_count() as f64,
                        text_value(&format!("{name}_bucket"), &with_le),
                        "{name} le={}",
                        bucket.upper_bound()
                    );
                }
                let text_buckets = samples
                    .iter()
                    .filter(|s| s.name == format!("{name}_bucket"))
                    .filter(|s| {
                        let mut l = s.labels.clone();
                        l.remove("le");
                        l == labels
                    })
                    .count();
                assert_eq!(
                    h.bucket.len() + 1,
                    text_buckets,
                    "{name}: every finite bucket"
                );
                if h.schema.is_some() {
                    natives += 1;
                    check_native(name, h);
                }
            } else {
                panic!("{name}: a metric with no value");
            }
        }
    }
    // TTFT, TTFB, TPOT, ITL and E2E for the one label set these requests have.
    assert_eq!(natives, 5, "the five latency histograms are native");
}

/// The native buckets account for every sample, and the value range they span holds the sum's
/// mean.
fn check_native(name: &str, h: &pb::Histogram) {
    assert_eq!(h.schema(), SCHEMA, "{name}");
    assert_eq!(h.zero_threshold(), ZERO_THRESHOLD, "{name}");
    let mut key = 0i32;
    let mut count = 0i64;
    let mut total = h.zero_count();
    let (mut low, mut high) = (f64::INFINITY, 0f64);
    let mut deltas = h.positive_delta.iter();
    for (i, span) in h.positive_span.iter().enumerate() {
        key = if i == 0 {
            span.offset()
        } else {
            key + span.offset() + 1
        };
        for j in 0..span.length() {
            if j > 0 {
                key += 1;
            }
            count += deltas.next().expect("a delta per bucket");
            assert!(count > 0, "{name}: only non-empty buckets are sent");
            total += count as u64;
            low = low.min(upper_bound(key - 1));
            high = high.max(upper_bound(key));
        }
    }
    assert!(deltas.next().is_none(), "{name}: no delta without a bucket");
    assert_eq!(
        total,
        h.sample_count(),
        "{name}: the native buckets hold every sample"
    );
    if h.zero_count() == 0 && total > 0 {
        let mean = h.sample_sum() / total as f64;
        assert!(
            low <= mean && mean <= high,
            "{name}: mean {mean} in [{low}, {high}]"
        );
    }
}

#[tokio::test]
async fn text_is_served_unless_protobuf_is_asked_for() {
    let backend = Backend::start(|_| Script::json(200, "{}")).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    // The families of a scrape that asks for nothing in particular (in no particular order).
    let families = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|line| line.starts_with("# TYPE "))
            .map(str::to_owned)
            .collect()
    };
    let (_, plain) = client::get(proxy.admin_addr, "/metrics").await;
    assert!(!families(&plain).is_empty(), "a real scrape: {plain}");
    for accept in [
        "text/plain;version=0.0.4",
        "*/*",
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily",
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.2,text/plain;q=0.5",
    ] {
        let scrape = scrape(proxy.admin_addr, accept).await;
        let kind = scrape
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            kind, "text/plain; version=0.0.4; charset=utf-8",
            "{accept}: the text exposition's content type"
        );
        assert_eq!(
            families(&scrape.text()),
            families(&plain),
            "{accept}: the text exposition, every family"
        );
    }
}

#[tokio::test]
async fn a_traced_request_leaves_exemplars_and_its_traceparent_goes_upstream() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{TRACE}-00f067aa0ba902b7-01");
    let mut backend = fixture_backend().await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    // An untraced request first: it leaves no exemplar.
    client::post(proxy.traffic_addr, CHAT, BODY).await;
    let _ = backend.next_request().await;
    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    client::open_with(
        proxy.traffic_addr,
        Protocol::Http1,
        "POST",
        CHAT,
        BODY,
        &[("traceparent", &traceparent), ("tracestate", "vendor=abc")],
    )
    .await
    .collect()
    .await;
    let seen = backend.next_request().await;
    assert_eq!(
        seen.header("traceparent").as_deref(),
        Some(traceparent.as_str())
    );
    assert_eq!(seen.header("tracestate").as_deref(), Some("vendor=abc"));

    let scrape = scrape(proxy.admin_addr, PROMETHEUS_ACCEPT).await;
    // The exemplars were taken while the traced request ran: after `before_ms`, before now.
    let after_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let families = decode_all(&scrape.bytes());
    let mut with_exemplars = BTreeMap::new();
    for family in &families {
        for metric in &family.metric {
            let Some(h) = &metric.histogram else { continue };
            let mut lower = 0.0;
            for bucket in &h.bucket {
                if let Some(e) = &bucket.exemplar {
                    assert_eq!(e.label.len(), 1);
                    assert_eq!(e.label[0].name(), "trace_id");
                    assert_eq!(e.label[0].value(), TRACE, "{}", family.name());
                    let value = e.value();
                    assert!(
                        lower < value && value <= bucket.upper_bound(),
                        "{}: exemplar {value} in its bucket ({lower}, {}]",
                        family.name(),
                        bucket.upper_bound()
                    );
                    let ts = e.timestamp.expect("a time");
                    let ms = ts.seconds * 1000 + i64::from(ts.nanos) / 1_000_000;
                    // (1 ms either side: each of the three times is truncated to the ms.)
                    assert!(
                        ms >= before_ms - 1 && ms <= after_ms + 1,
                        "taken while the traced request ran: {ms} in [{before_ms}, {after_ms}]"
                    );
                    *with_exemplars.entry(family.name().to_owned()).or_insert(0) += 1;
                }
                lower = bucket.upper_bound();
            }
        }
    }
    let names: Vec<&str> = with_exemplars.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "gen_ai_server_request_duration_seconds",
            "gen_ai_server_time_per_output_token_seconds",
            "gen_ai_server_time_to_first_token_seconds",
            "tokenmeter_inter_token_latency_seconds",
            "tokenmeter_time_to_first_byte_seconds",
        ],
        "the five latency histograms carry the trace"
    );
    assert_eq!(
        with_exemplars["gen_ai_server_time_to_first_token_seconds"], 1,
        "one TTFT sample, one exemplar"
    );
}
