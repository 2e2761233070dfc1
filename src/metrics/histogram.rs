//! Fixed-bucket histograms on atomics: recording a sample is a bucket search and two relaxed
//! atomic adds, with no clock read and no allocation.
//!
//! Why not the exporter's own histograms: `metrics-exporter-prometheus` keeps every raw sample
//! (value + `Instant::now()`) in a lock-free block list that allocates a new block every 64
//! samples and is only folded into buckets at upkeep (every 5 s) or scrape. On the token path
//! that is a clock read, an epoch pin and an amortised allocation per token, and at 50k tokens/s
//! ~6 MB of samples waiting between upkeeps. Our buckets are fixed by configuration anyway, so
//! the counts can be kept directly. The exposition is the same Prometheus text the exporter
//! writes (`_bucket{...,le=".."}` cumulative, `_sum`, `_count`), appended to its render.
//!
//! The latency histograms also keep native buckets ([`super::native`]: one more atomic add per
//! sample); [`Histograms::snapshot`] reads both for the protobuf exposition ([`super::protobuf`]).
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{Histogram, HistogramFn, Label};

use super::exemplar::{unix_ms_now, Exemplar, ExemplarSlot, TraceId};
use super::native::{NativeBuckets, NativeSnapshot};

/// One series: a count per bucket (the last one is `+Inf`) and the sum of the samples, and for
/// the latency histograms the native buckets too ([`super::native`]).
#[derive(Debug)]
pub(crate) struct AtomicHistogram {
    bounds: Arc<[f64]>,
    counts: Box<[AtomicU64]>,
    /// `f64` bits, added with a compare-and-swap loop.
    sum: AtomicU64,
    native: Option<NativeBuckets>,
    /// The latest exemplar of each classic bucket (`+Inf` last), for the latency histograms.
    exemplars: Option<Box<[ExemplarSlot]>>,
    /// The label pairs, unescaped (the protobuf exposition carries them as they are).
    labels: Box<[(String, String)]>,
}

/// A latency series as the meter holds it: recorded with the request's trace when it has one.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Arc<AtomicHistogram>);

impl LatencyHistogram {
    pub fn record(&self, value: f64) {
        self.0.record_traced(value, None);
    }

    /// Records `value`; with a trace, it also becomes its bucket's exemplar.
    pub fn record_traced(&self, value: f64, trace: Option<&TraceId>) {
        self.0.record_traced(value, trace);
    }
}

/// What a scrape reads of one series.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSnapshot {
    pub labels: Vec<(String, String)>,
    /// (upper bound, cumulative count) of the classic buckets, `+Inf` last.
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    /// The number of samples: the `+Inf` bucket's count, or the native buckets' total if a sample
    /// recorded during the read is in those but not yet in these.
    pub count: u64,
    pub native: Option<NativeSnapshot>,
    /// Per classic bucket (as `buckets`), its latest exemplar; empty for a series without them.
    pub exemplars: Vec<Option<Exemplar>>,
}

/// Every series of one histogram family.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySnapshot {
    pub name: &'static str,
    pub help: Option<String>,
    pub series: Vec<SeriesSnapshot>,
}

impl AtomicHistogram {
    fn new(bounds: Arc<[f64]>, native: bool, labels: Box<[(String, String)]>) -> Self {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        let slots = bounds.len() + 1;
        Self {
            bounds,
            counts,
            sum: AtomicU64::new(0f64.to_bits()),
            native: native.then(NativeBuckets::default),
            exemplars: native.then(|| (0..slots).map(|_| ExemplarSlot::default()).collect()),
            labels,
        }
    }

    /// [`HistogramFn::record`], and with a trace the bucket's exemplar (a clock read: only for
    /// traced requests).
    fn record_traced(&self, value: f64, trace: Option<&TraceId>) {
        let index = self.record_counted(value);
        if let (Some(trace), Some(slots)) = (trace, &self.exemplars) {
            if let Some(slot) = slots.get(index) {
                slot.store(Exemplar {
                    trace: *trace,
                    value,
                    unix_ms: unix_ms_now(),
                });
            }
        }
    }

    /// Counts `value` in its classic and native buckets and the sum; returns the classic bucket.
    fn record_counted(&self, value: f64) -> usize {
        // Prometheus buckets are `value <= le`: the first bound not below the value.
        let index = self.bounds.partition_point(|bound| *bound < value);
        if let Some(count) = self.counts.get(index) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(native) = &self.native {
            native.record(value);
        }
        let mut current = self.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + value).to_bits();
            match self.sum.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        index
    }

    fn snapshot(&self) -> SeriesSnapshot {
        // Native first: a sample is counted in the classic buckets before the native ones.
        let native = self.native.as_ref().map(NativeBuckets::snapshot);
        let mut cumulative = 0u64;
        let buckets: Vec<(f64, u64)> = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, count)| {
                cumulative += count.load(Ordering::Relaxed);
                (
                    self.bounds.get(i).copied().unwrap_or(f64::INFINITY),
                    cumulative,
                )
            })
            .collect();
        let native_total = native.as_ref().map_or(0, |n| {
            n.zero_count + n.buckets.iter().map(|(_, count)| count).sum::<u64>()
        });
        SeriesSnapshot {
            labels: self.labels.to_vec(),
            buckets,
            sum: f64::from_bits(self.sum.load(Ordering::Relaxed)),
            count: cumulative.max(native_total),
            native,
            exemplars: self
                .exemplars
                .as_ref()
                .map(|slots| slots.iter().map(ExemplarSlot::load).collect())
                .unwrap_or_default(),
        }
    }

    /// Writes the cumulative buckets, `_sum` and `_count` of this series.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let _ = match self.bounds.get(i) {
                Some(bound) => writeln!(
                    out,
                    "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
                ),
                None => writeln!(
                    out,
                    "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
                ),
            };
        }
        let sum = f64::from_bits(self.sum.load(Ordering::Relaxed));
        let braces = |out: &mut String, suffix: &str, value: &dyn std::fmt::Display| {
            let _ = if labels.is_empty() {
                writeln!(out, "{name}{suffix} {value}")
            } else {
                writeln!(out, "{name}{suffix}{{{labels}}} {value}")
            };
        };
        braces(out, "_sum", &sum);
        braces(out, "_count", &cumulative);
    }
}

impl HistogramFn for AtomicHistogram {
    fn record(&self, value: f64) {
        self.record_counted(value);
    }
}

/// Every histogram series of one [`super::Metrics`], by name and rendered label set.
#[derive(Debug)]
pub(crate) struct Histograms {
    default_bounds: Arc<[f64]>,
    /// The families their owners defined: bounds, and whether the series keep native buckets.
    families: Mutex<HashMap<&'static str, Family>>,
    help: Mutex<HashMap<&'static str, String>>,
    /// name -> rendered labels -> series. Touched once per stream per histogram, never per token.
    series: Mutex<BTreeMap<&'static str, BTreeMap<String, Arc<AtomicHistogram>>>>,
}

/// How a family's series are made.
#[derive(Debug, Clone)]
struct Family {
    bounds: Arc<[f64]>,
    native: bool,
}

impl Histograms {
    /// A name no owner defined gets `default_bounds` and no native buckets.
    pub fn new(default_bounds: &[f64]) -> Self {
        Self {
            default_bounds: Arc::from(default_bounds),
            families: Mutex::new(HashMap::new()),
            help: Mutex::new(HashMap::new()),
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Defines the family `name`: its bucket `bounds`, and with `native` native buckets beside
    /// the classic ones. The first definition stands (buckets change only with a restart, and
    /// every series of a family must share them).
    pub fn define(&self, name: &'static str, bounds: &[f64], native: bool) {
        lock(&self.families).entry(name).or_insert_with(|| Family {
            bounds: Arc::from(bounds),
            native,
        });
    }

    pub fn describe(&self, name: &'static str, help: &str) {
        lock(&self.help).insert(name, help.to_owned());
    }

    /// The handle of one series, created on first use.
    pub fn register(&self, name: &'static str, labels: &[Label]) -> Histogram {
        Histogram::from_arc(self.series(name, labels))
    }

    /// A latency series' handle, which records exemplars (see [`LatencyHistogram`]).
    pub fn latency(&self, name: &'static str, labels: &[Label]) -> LatencyHistogram {
        LatencyHistogram(self.series(name, labels))
    }

    fn series(&self, name: &'static str, labels: &[Label]) -> Arc<AtomicHistogram> {
        let mut rendered = String::new();
        for (i, label) in labels.iter().enumerate() {
            if i > 0 {
                rendered.push(',');
            }
            let _ = write!(
                rendered,
                "{}=\"{}\"",
                label.key(),
                escape(label.value(), true)
            );
        }
        let mut series = lock(&self.series);
        let histogram = series
            .entry(name)
            .or_default()
            .entry(rendered)
            .or_insert_with(|| {
                let family = lock(&self.families).get(name).cloned();
                let (bounds, native) = family.map_or_else(
                    || (Arc::clone(&self.default_bounds), false),
                    |family| (family.bounds, family.native),
                );
                let pairs = labels
                    .iter()
                    .map(|label| (label.key().to_owned(), label.value().to_owned()))
                    .collect();
                Arc::new(AtomicHistogram::new(bounds, native, pairs))
            });
        Arc::clone(histogram)
    }

    /// Every family's series as a scrape reads them (names in order), for the protobuf exposition.
    pub fn snapshot(&self) -> Vec<FamilySnapshot> {
        let help = lock(&self.help);
        let series = lock(&self.series);
        series
            .iter()
            .map(|(name, by_labels)| FamilySnapshot {
                name,
                help: help.get(name).cloned(),
                series: by_labels.values().map(|h| h.snapshot()).collect(),
            })
            .collect()
    }

    /// Appends the exposition of every series (names in order, as the exporter does).
    pub(crate) fn render_into(&self, out: &mut String) {
        let help = lock(&self.help);
        let series = lock(&self.series);
        for (name, by_labels) in series.iter() {
            if let Some(help) = help.get(name) {
                let _ = writeln!(out, "# HELP {name} {}", escape(help, false));
            }
            let _ = writeln!(out, "# TYPE {name} histogram");
            for (labels, histogram) in by_labels {
                histogram.render(out, name, labels);
            }
            out.push('\n');
        }
    }
}

/// A poisoned lock only means a thread panicked mid-insert; the maps stay usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Prometheus text escaping: `\` and newline always, `"` in label values.
fn escape(text: &str, quote: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
