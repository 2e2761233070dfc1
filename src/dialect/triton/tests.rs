use super::*;

#[test]
fn text_output_is_a_token() {
    let data = br#"{"model_name":"ensemble","model_version":"1","sequence_end":false,"sequence_id":0,"sequence_start":false,"text_output":" Paris"}"#;
    assert_eq!(
        classify(data),
        EventSummary {
            token: true,
            ..EventSummary::default()
        },
        "non-empty text_output: a token event, count unknown"
    );
    assert!(
        !classify(br#"{"model_name":"m","text_output":""}"#).token,
        "empty text_output carries nothing"
    );
    assert!(
        classify(br#"{"text_output":["a"]}"#).token,
        "a batched string tensor counts"
    );
}

#[test]
fn errors_and_garbage() {
    assert!(
        classify(br#"{"error":"in ensemble 'ensemble', failed"}"#).error,
        "error member"
    );
    for data in [&b""[..], b"x", b"{\"text_output\":5}", b"[]"] {
        assert_eq!(classify(data), EventSummary::default(), "{data:?}");
    }
}
