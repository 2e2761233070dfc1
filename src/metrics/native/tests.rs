use super::*;

#[test]
fn keys_follow_prometheus_bucket_boundaries() {
    // Key k covers (2^((k-1)/32), 2^(k/32)]: 1 is the upper bound of bucket 0, 2 of bucket 32.
    assert_eq!(key(1.0), 0);
    assert_eq!(key(1.000_001), 1);
    assert_eq!(key(2.0), 32);
    assert_eq!(key(0.5), -32);
    assert_eq!(key(0.999_999), 0);
    assert_eq!(key(0.25), -64);
    for k in -500..440 {
        let upper = upper_bound(k);
        assert_eq!(key(upper), k, "the upper bound of {k} is in {k}");
        assert_eq!(key(upper * (1.0 + 1e-9)), k + 1, "just above {k}'s bound");
        assert_eq!(key(upper * (1.0 - 1e-9)), k, "just below {k}'s bound");
    }
}

#[test]
fn a_bucket_is_at_most_2_2_percent_wide() {
    for k in -100..100 {
        let ratio = upper_bound(k) / upper_bound(k - 1);
        assert!((ratio - 2f64.powf(1.0 / 32.0)).abs() < 1e-12);
        assert!(ratio - 1.0 < 0.022);
    }
}

#[test]
fn keys_agree_with_logarithms() {
    // ceil(log2(v) * 32), away from exact boundaries, for values from microseconds to hours.
    let mut v: f64 = 2e-5;
    while v < 1e4 {
        let exact = (v.log2() * 32.0).ceil() as i32;
        assert_eq!(key(v), exact, "{v}");
        v *= 1.0137;
    }
}

#[test]
fn out_of_range_values_go_to_the_zero_and_top_buckets() {
    let buckets = NativeBuckets::default();
    for v in [0.0, -0.5, ZERO_THRESHOLD, ZERO_THRESHOLD / 3.0] {
        buckets.record(v);
    }
    buckets.record(f64::NAN);
    buckets.record(1e9);
    buckets.record(f64::INFINITY);
    let snapshot = buckets.snapshot();
    assert_eq!(snapshot.zero_count, 4);
    assert_eq!(snapshot.buckets, vec![(MAX_KEY, 2)]);
    assert_eq!(key(ZERO_THRESHOLD * 1.0001), MIN_KEY);
}

#[test]
fn snapshot_lists_non_empty_buckets_in_key_order() {
    let buckets = NativeBuckets::default();
    for v in [0.08, 0.083, 0.5, 0.08, 3.0, 0.0011] {
        buckets.record(v);
    }
    let snapshot = buckets.snapshot();
    let expected = vec![
        (key(0.0011), 1),
        (key(0.08), 2),
        (key(0.083), 1),
        (key(0.5), 1),
        (key(3.0), 1),
    ];
    assert!(key(0.08) < key(0.083));
    assert_eq!(snapshot.buckets, expected);
    assert_eq!(snapshot.zero_count, 0);
}

#[test]
fn spans_and_deltas_encode_gaps_and_differences() {
    let (spans, deltas) = spans_and_deltas(&[(3, 1), (4, 2), (7, 5), (8, 5), (-2, 0)][..4]);
    assert_eq!(spans, vec![(3, 2), (2, 2)]);
    assert_eq!(deltas, vec![1, 1, 3, 0]);
    let (spans, deltas) = spans_and_deltas(&[(-40, 7)]);
    assert_eq!(spans, vec![(-40, 1)]);
    assert_eq!(deltas, vec![7]);
    let (spans, deltas) = spans_and_deltas(&[]);
    assert_eq!(
        spans,
        vec![(0, 0)],
        "an empty histogram still reads as native"
    );
    assert!(deltas.is_empty());
}

/// Prometheus' `histogram_quantile` on a native histogram: find the bucket that holds rank
/// q * count and interpolate linearly inside it.
fn quantile(snapshot: &NativeSnapshot, q: f64) -> f64 {
    let total: u64 = snapshot.zero_count + snapshot.buckets.iter().map(|b| b.1).sum::<u64>();
    let rank = q * total as f64;
    let mut seen = snapshot.zero_count as f64;
    for &(k, count) in &snapshot.buckets {
        if seen + count as f64 >= rank {
            let (lower, upper) = (upper_bound(k - 1), upper_bound(k));
            return lower + (upper - lower) * (rank - seen) / count as f64;
        }
        seen += count as f64;
    }
    f64::NAN
}

#[test]
fn quantiles_read_from_the_buckets_are_within_2_2_percent() {
    // A TTFT-like spread (40 ms to 1.3 s, skewed) and an ITL-like one (12 to 60 ms).
    for (low, high) in [(0.04, 1.3), (0.012, 0.06)] {
        let buckets = NativeBuckets::default();
        let mut samples: Vec<f64> = (0..10_000)
            .map(|i| {
                let u = ((i as f64 * 0.618_033_988_75) % 1.0).powi(3);
                low + (high - low) * u
            })
            .collect();
        for &v in &samples {
            buckets.record(v);
        }
        samples.sort_by(f64::total_cmp);
        let snapshot = buckets.snapshot();
        for q in [0.5, 0.9, 0.99] {
            let exact = samples[(q * samples.len() as f64) as usize - 1];
            let estimate = quantile(&snapshot, q);
            let error = (estimate - exact).abs() / exact;
            assert!(error < 0.022, "q{q}: {estimate} against {exact} ({error})");
        }
    }
}
