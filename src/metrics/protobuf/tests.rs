use prost::Message;

use super::text::families;
use super::*;

#[test]
fn accept_headers_choose_the_format() {
    let prometheus = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    assert!(wants_protobuf(prometheus));
    assert!(wants_protobuf(
        "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
    ));
    for text in [
        "text/plain;version=0.0.4",
        "*/*",
        "",
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text",
        "application/vnd.google.protobuf;proto=other.Message;encoding=delimited",
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0",
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.3,text/plain;q=0.9",
    ] {
        assert!(!wants_protobuf(text), "{text}");
    }
}

#[test]
fn text_families_keep_types_help_and_escaped_labels() {
    let text = "# HELP c_total Requests, by \\\"outcome\\\".\\nSecond line.\n# TYPE c_total counter\nc_total{outcome=\"ok\",model=\"a\\\"b\\\\c\\nd\"} 3\nc_total{outcome=\"error\"} 1\n\n# TYPE g gauge\ng 2.5\nloose 7\n";
    let got = families(text);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].name, "c_total");
    assert_eq!(got[0].kind, "counter");
    assert_eq!(
        got[0].help.as_deref(),
        Some("Requests, by \"outcome\".\nSecond line.")
    );
    assert_eq!(
        got[0].samples[0].labels,
        vec![
            ("outcome".to_owned(), "ok".to_owned()),
            ("model".to_owned(), "a\"b\\c\nd".to_owned())
        ]
    );
    assert_eq!(got[0].samples[1].value, 1.0);
    assert_eq!(
        (got[1].kind.as_str(), got[1].samples[0].value),
        ("gauge", 2.5)
    );
    assert_eq!(
        (got[2].name.as_str(), got[2].kind.as_str()),
        ("loose", "untyped")
    );
}

#[test]
fn a_text_histogram_becomes_one_message_per_label_set() {
    let text = "# TYPE h histogram\nh_bucket{x=\"1\",le=\"0.5\"} 2\nh_bucket{x=\"1\",le=\"+Inf\"} 3\nh_sum{x=\"1\"} 1.25\nh_count{x=\"1\"} 3\nh_bucket{x=\"2\",le=\"0.5\"} 0\nh_bucket{x=\"2\",le=\"+Inf\"} 1\nh_sum{x=\"2\"} 4\nh_count{x=\"2\"} 1\n";
    let bytes = encode(text, &[]);
    let family = pb::MetricFamily::decode_length_delimited(&bytes[..]).expect("a family");
    assert_eq!(family.r#type(), pb::MetricType::Histogram);
    assert_eq!(family.metric.len(), 2);
    let first = family.metric[0].histogram.as_ref().expect("histogram");
    assert_eq!((first.sample_count(), first.sample_sum()), (3, 1.25));
    assert_eq!(first.bucket.len(), 1, "+Inf is the count");
    assert_eq!(
        (
            first.bucket[0].upper_bound(),
            first.bucket[0].cumulative_count()
        ),
        (0.5, 2)
    );
    assert!(
        first.schema.is_none(),
        "a text histogram has no native buckets"
    );
    assert_eq!(family.metric[1].label[0].value(), "2");
}
