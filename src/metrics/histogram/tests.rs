use super::*;

#[test]
fn samples_land_in_le_buckets_with_sum_and_count() {
    let histograms = Histograms::new(&[1.0]);
    histograms.define("h", &[0.1, 0.5, 1.0], false);
    histograms.describe("h", "help \"text\"\nline two");
    let handle = histograms.register("h", &[Label::new("model", "a\"b")]);
    for value in [0.05, 0.1, 0.3, 2.0] {
        handle.record(value);
    }
    let mut text = String::new();
    histograms.render_into(&mut text);
    let expected = "# HELP h help \"text\"\\nline two\n# TYPE h histogram\n\
        h_bucket{model=\"a\\\"b\",le=\"0.1\"} 2\n\
        h_bucket{model=\"a\\\"b\",le=\"0.5\"} 3\n\
        h_bucket{model=\"a\\\"b\",le=\"1\"} 3\n\
        h_bucket{model=\"a\\\"b\",le=\"+Inf\"} 4\n\
        h_sum{model=\"a\\\"b\"} 2.45\n\
        h_count{model=\"a\\\"b\"} 4\n\n";
    assert_eq!(
        text, expected,
        "0.1 is in le=0.1 (inclusive), 2.0 only in +Inf"
    );
}

#[test]
fn one_series_per_label_set_and_default_bounds() {
    let histograms = Histograms::new(&[1.0, 2.0]);
    let a = histograms.register("x", &[Label::new("k", "v")]);
    let again = histograms.register("x", &[Label::new("k", "v")]);
    a.record(1.5);
    again.record(1.5);
    let mut text = String::new();
    histograms.render_into(&mut text);
    assert!(
        text.contains("x_bucket{k=\"v\",le=\"2\"} 2\n") && text.contains("x_count{k=\"v\"} 2\n"),
        "both handles feed one series with the default bounds:\n{text}"
    );
}
