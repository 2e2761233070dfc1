//! Native histogram buckets (Prometheus' sparse exponential histograms) on atomics, beside a
//! latency histogram's classic buckets.
//!
//! **Schema 5**: each power of two is split into 32 buckets, so a bucket's upper bound is
//! 2^(1/32) = 1.0219 times its lower one. `histogram_quantile` interpolates inside the bucket a
//! quantile falls in, so its answer is off by at most the bucket's width, 2.2 % of the value
//! (client_golang's default factor of 1.1 is schema 3: up to 9 %). Schema 5 is the coarsest that
//! keeps a TTFT or ITL quantile within 3 % of the exact one whatever the distribution.
//!
//! **Bounds.** Values at or below [`ZERO_THRESHOLD`] (2^-16 s, 15 µs: two token events in one
//! read) go to the zero bucket; values above 2^14 s (4.5 hours) are counted in the top bucket. In
//! between are 30 octaves, 960 buckets per series, allocated with the series (7.5 KiB, once per
//! label set, never on the token path). A series exposes only its non-empty buckets: a latency
//! spans a few octaves (TTFT from 50 ms to 2 s is 5.3 octaves, at most 171 buckets).
//!
//! Recording is a `frexp`, a binary search over 32 bounds and one relaxed atomic add: no lock, no
//! allocation.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The bucket schema: 2^SCHEMA buckets per power of two.
pub const SCHEMA: i32 = 5;
const PER_OCTAVE: usize = 1 << SCHEMA;
/// Octaves below 1 s kept apart from the zero bucket, and octaves above.
const MIN_EXP: i32 = -16;
const MAX_EXP: i32 = 14;
const OCTAVES: usize = (MAX_EXP - MIN_EXP) as usize;
/// The zero bucket's half-width: 2^MIN_EXP (seconds, for a latency).
pub const ZERO_THRESHOLD: f64 = 1.0 / (1u64 << -MIN_EXP) as f64;
/// The lowest and highest bucket keys a sample can get (key k covers (2^((k-1)/32), 2^(k/32)]).
const MIN_KEY: i32 = MIN_EXP * PER_OCTAVE as i32 + 1;
const MAX_KEY: i32 = MAX_EXP * PER_OCTAVE as i32;

/// `BOUNDS[i]` = 2^(i/32 - 1): the fraction (in [0.5, 1), as `frexp` gives it) at which bucket `i`
/// of an octave ends. The same table as client_golang's `nativeHistogramBounds[5]`.
static BOUNDS: OnceLock<[f64; PER_OCTAVE]> = OnceLock::new();

fn bounds() -> &'static [f64; PER_OCTAVE] {
    BOUNDS.get_or_init(|| {
        let mut out = [0.0; PER_OCTAVE];
        for (i, bound) in out.iter_mut().enumerate() {
            *bound = (i as f64 / PER_OCTAVE as f64 - 1.0).exp2();
        }
        out
    })
}

/// `v = frac * 2^exp` with `frac` in [0.5, 1), for a positive normal `v` (as C's `frexp`).
fn frexp(v: f64) -> (f64, i32) {
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, exp)
}

/// The bucket key of a value above the zero threshold: the `k` with 2^((k-1)/32) < v <= 2^(k/32).
pub fn key(v: f64) -> i32 {
    let (frac, exp) = frexp(v);
    let index = bounds().partition_point(|bound| *bound < frac) as i32;
    (index + (exp - 1) * PER_OCTAVE as i32).clamp(MIN_KEY, MAX_KEY)
}

/// The upper bound of bucket `key`.
pub fn upper_bound(key: i32) -> f64 {
    (f64::from(key) / PER_OCTAVE as f64).exp2()
}

/// One series' native buckets: the zero bucket and a counter per key from `MIN_KEY` to `MAX_KEY`.
#[derive(Debug)]
pub(crate) struct NativeBuckets {
    zero: AtomicU64,
    counts: Box<[AtomicU64]>,
}

impl Default for NativeBuckets {
    fn default() -> Self {
        Self {
            zero: AtomicU64::new(0),
            counts: (0..OCTAVES * PER_OCTAVE)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

/// What a scrape reads of one series' native buckets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NativeSnapshot {
    pub zero_count: u64,
    /// Non-empty buckets as (key, count), in increasing key order.
    pub buckets: Vec<(i32, u64)>,
}

impl NativeBuckets {
    /// Counts one sample. NaN is dropped; zero and negative values (a clock that went back) land
    /// in the zero bucket.
    pub fn record(&self, value: f64) {
        if value.is_nan() {
            return;
        }
        if value <= ZERO_THRESHOLD {
            self.zero.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Some(count) = self.counts.get((key(value) - MIN_KEY) as usize) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> NativeSnapshot {
        let mut buckets = Vec::new();
        for (i, count) in self.counts.iter().enumerate() {
            let count = count.load(Ordering::Relaxed);
            if count > 0 {
                buckets.push((i as i32 + MIN_KEY, count));
            }
        }
        NativeSnapshot {
            zero_count: self.zero.load(Ordering::Relaxed),
            buckets,
        }
    }
}

/// Spans and deltas, the protobuf form of the positive buckets: each span is (offset, length),
/// the first offset the first key, later ones the gap of empty buckets before them; each delta is
/// a bucket's count minus the previous bucket's. An empty histogram gets one empty span so that a
/// scraper still sees it as native (as client_golang does).
pub(crate) fn spans_and_deltas(buckets: &[(i32, u64)]) -> (Vec<(i32, u32)>, Vec<i64>) {
    let mut spans: Vec<(i32, u32)> = Vec::new();
    let mut deltas = Vec::with_capacity(buckets.len());
    let mut previous_key: Option<i32> = None;
    let mut previous_count = 0i64;
    for &(key, count) in buckets {
        match previous_key {
            Some(last) if key == last + 1 => {
                if let Some(span) = spans.last_mut() {
                    span.1 += 1;
                }
            }
            Some(last) => spans.push((key - last - 1, 1)),
            None => spans.push((key, 1)),
        }
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        deltas.push(count - previous_count);
        previous_count = count;
        previous_key = Some(key);
    }
    if spans.is_empty() {
        spans.push((0, 0));
    }
    (spans, deltas)
}

#[cfg(test)]
mod tests;
