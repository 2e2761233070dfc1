//! The protobuf exposition of `/metrics`: length-delimited `io.prometheus.client.MetricFamily`
//! messages, encoded by prost from the official schema (`proto/metrics.proto`, generated code in
//! `proto/io.prometheus.client.rs`, checked by `tests/e2e/protobuf_schema.rs`).
//!
//! A scraper gets it when it asks for it (Prometheus does with native histograms enabled); it is
//! the only format that carries native histograms. Every family of the text exposition is in it:
//! the counters and gauges are read back from the exporter's text ([`text`]), the histograms come
//! from their atomics with their classic buckets and, for the latency histograms, their native
//! buckets, so a scraper that ignores native buckets sees what the text exposition says.
use prost::Message;

use super::exemplar::Exemplar;
use super::histogram::{FamilySnapshot, SeriesSnapshot};
use super::native::{spans_and_deltas, SCHEMA, ZERO_THRESHOLD};

/// prost's messages for `io.prometheus.client` (generated: not formatted or linted here).
#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic)]
pub mod pb {
    include!("proto/io.prometheus.client.rs");
}

pub mod text;

/// The content type of the protobuf exposition.
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// Whether an `Accept` header prefers the protobuf exposition: it lists
/// `application/vnd.google.protobuf` with `proto=io.prometheus.client.MetricFamily` and
/// `encoding=delimited`, with a quality above 0 and not below any text type's.
pub fn wants_protobuf(accept: &str) -> bool {
    let mut protobuf = 0.0f64;
    let mut other = 0.0f64;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut quality, mut proto, mut delimited) = (1.0f64, false, false);
        for param in parts {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "q" => quality = value.parse().unwrap_or(0.0),
                "proto" => proto = value == "io.prometheus.client.MetricFamily",
                "encoding" => delimited = value == "delimited",
                _ => {}
            }
        }
        if media == "application/vnd.google.protobuf" {
            if proto && delimited {
                protobuf = protobuf.max(quality);
            }
        } else {
            other = other.max(quality);
        }
    }
    protobuf > 0.0 && protobuf >= other
}

/// The whole exposition: `text`'s families (the exporter's counters and gauges, the admission
/// limits'), then the histograms, each family as one length-delimited message.
pub fn encode(text: &str, histograms: &[FamilySnapshot]) -> Vec<u8> {
    let mut out = Vec::new();
    for family in text::families(text) {
        if let Some(message) = from_text(&family) {
            let _ = message.encode_length_delimited(&mut out);
        }
    }
    for family in histograms {
        let message = pb::MetricFamily {
            name: Some(family.name.to_owned()),
            help: family.help.clone(),
            r#type: Some(pb::MetricType::Histogram as i32),
            metric: family.series.iter().map(histogram).collect(),
        };
        let _ = message.encode_length_delimited(&mut out);
    }
    out
}

/// An exemplar as Prometheus reads it: the trace id under `trace_id`, the value, the time.
fn exemplar(exemplar: Exemplar) -> pb::Exemplar {
    let millis = i64::try_from(exemplar.unix_ms).unwrap_or(i64::MAX);
    pb::Exemplar {
        label: vec![pb::LabelPair {
            name: Some("trace_id".to_owned()),
            value: Some(exemplar.trace.hex()),
        }],
        value: Some(exemplar.value),
        timestamp: Some(prost_types::Timestamp {
            seconds: millis / 1000,
            nanos: (millis % 1000) as i32 * 1_000_000,
        }),
    }
}

fn labels(pairs: &[(String, String)]) -> Vec<pb::LabelPair> {
    pairs
        .iter()
        .map(|(name, value)| pb::LabelPair {
            name: Some(name.clone()),
            value: Some(value.clone()),
        })
        .collect()
}

/// One histogram series: the classic buckets with their exemplars (without `+Inf`, which the
/// count stands for, as client_golang writes them, unless it holds an exemplar) and the native
/// buckets when the series keeps them.
fn histogram(series: &SeriesSnapshot) -> pb::Metric {
    let mut histogram = pb::Histogram {
        sample_count: Some(series.count),
        sample_sum: Some(series.sum),
        bucket: series
            .buckets
            .iter()
            .enumerate()
            .filter_map(|(i, &(bound, cumulative))| {
                let exemplar = series.exemplars.get(i).copied().flatten().map(exemplar);
                (bound.is_finite() || exemplar.is_some()).then(|| pb::Bucket {
                    cumulative_count: Some(cumulative),
                    upper_bound: Some(bound),
                    exemplar,
                    ..pb::Bucket::default()
                })
            })
            .collect(),
        ..pb::Histogram::default()
    };
    if let Some(native) = &series.native {
        let (spans, deltas) = spans_and_deltas(&native.buckets);
        histogram.schema = Some(SCHEMA);
        histogram.zero_threshold = Some(ZERO_THRESHOLD);
        histogram.zero_count = Some(native.zero_count);
        histogram.positive_span = spans
            .into_iter()
            .map(|(offset, length)| pb::BucketSpan {
                offset: Some(offset),
                length: Some(length),
            })
            .collect();
        histogram.positive_delta = deltas;
    }
    pb::Metric {
        label: labels(&series.labels),
        histogram: Some(histogram),
        ..pb::Metric::default()
    }
}

/// A family of the text exposition as a message: counters, gauges and untyped samples one metric
/// each; a classic histogram from its `_bucket` / `_sum` / `_count` samples. tokenmeter writes no
/// summaries; one would be skipped.
fn from_text(family: &text::TextFamily) -> Option<pb::MetricFamily> {
    let scalar = |kind: pb::MetricType| {
        family
            .samples
            .iter()
            .map(|sample| {
                let mut metric = pb::Metric {
                    label: labels(&sample.labels),
                    ..pb::Metric::default()
                };
                let value = Some(sample.value);
                match kind {
                    pb::MetricType::Counter => {
                        metric.counter = Some(pb::Counter {
                            value,
                            ..pb::Counter::default()
                        })
                    }
                    pb::MetricType::Gauge => metric.gauge = Some(pb::Gauge { value }),
                    _ => metric.untyped = Some(pb::Untyped { value }),
                }
                metric
            })
            .collect::<Vec<_>>()
    };
    let (kind, metric) = match family.kind.as_str() {
        "counter" => (pb::MetricType::Counter, scalar(pb::MetricType::Counter)),
        "gauge" => (pb::MetricType::Gauge, scalar(pb::MetricType::Gauge)),
        "untyped" => (pb::MetricType::Untyped, scalar(pb::MetricType::Untyped)),
        "histogram" => (pb::MetricType::Histogram, text_histograms(family)),
        _ => return None,
    };
    Some(pb::MetricFamily {
        name: Some(family.name.clone()),
        help: family.help.clone(),
        r#type: Some(kind as i32),
        metric,
    })
}

/// Classic histograms written as text, one series per label set (without `le`).
fn text_histograms(family: &text::TextFamily) -> Vec<pb::Metric> {
    let mut series: Vec<SeriesSnapshot> = Vec::new();
    for sample in &family.samples {
        let mut pairs = sample.labels.clone();
        let le = pairs
            .iter()
            .position(|(name, _)| name == "le")
            .map(|i| pairs.remove(i).1);
        let index = match series.iter().position(|s| s.labels == pairs) {
            Some(index) => index,
            None => {
                series.push(SeriesSnapshot {
                    labels: pairs,
                    buckets: Vec::new(),
                    sum: 0.0,
                    count: 0,
                    native: None,
                    exemplars: Vec::new(),
                });
                series.len() - 1
            }
        };
        let entry = &mut series[index];
        let suffix = &sample.name[family.name.len().min(sample.name.len())..];
        match (suffix, le) {
            ("_bucket", Some(le)) => {
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                entry.buckets.push((bound, sample.value as u64));
            }
            ("_sum", _) => entry.sum = sample.value,
            ("_count", _) => entry.count = sample.value as u64,
            _ => {}
        }
    }
    series.iter().map(histogram).collect()
}

#[cfg(test)]
mod tests;
