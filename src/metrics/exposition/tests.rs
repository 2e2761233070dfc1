use super::*;

const TEXT: &str = r#"# TYPE x histogram
x_bucket{a="1",le="0.1"} 2
x_bucket{a="1",le="0.2"} 6
x_bucket{a="1",le="+Inf"} 8
x_bucket{a="2",le="0.1"} 2
x_bucket{a="2",le="0.2"} 2
x_bucket{a="2",le="+Inf"} 2
x_sum{a="1"} 1.5
x_count{a="1"} 8
"#;

#[test]
fn quantiles_interpolate_like_prometheus() {
    let s = samples(TEXT);
    // Summed: le=0.1 -> 4, le=0.2 -> 8, +Inf -> 10.
    let median = histogram_quantile(&s, "x", &[], 0.5).expect("data");
    assert!(
        (median - 0.125).abs() < 1e-12,
        "rank 5 is 1/4 into (0.1, 0.2]: {median}"
    );
    let low = histogram_quantile(&s, "x", &[], 0.2).expect("data");
    assert!(
        (low - 0.05).abs() < 1e-12,
        "rank 2 is half of (0, 0.1]: {low}"
    );
    let top = histogram_quantile(&s, "x", &[], 0.99).expect("data");
    assert_eq!(top, 0.2, "rank in +Inf gives the highest finite edge");
    let one = histogram_quantile(&s, "x", &[("a", "2")], 0.5).expect("data");
    assert!((one - 0.05).abs() < 1e-12, "filtered: {one}");
    assert_eq!(
        histogram_quantile(&s, "y", &[], 0.5),
        None,
        "no such histogram"
    );
}

#[test]
fn sums_filter_by_labels() {
    let s = samples(TEXT);
    assert_eq!(sum(&s, "x_count", &[]), 8.0);
    assert_eq!(sum(&s, "x_bucket", &[("le", "+Inf")]), 10.0);
}
