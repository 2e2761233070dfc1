use super::*;

const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_traceparent_gives_its_trace_parent_and_flags() {
    let parsed = TraceParent::parse(VALID).expect("valid");
    assert_eq!(parsed.trace.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        parsed.parent,
        [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
    );
    assert!(parsed.sampled(), "flags 01 is sampled");
    let unsampled = TraceParent::parse(&VALID.replace("-01", "-00")).expect("valid");
    assert!(!unsampled.sampled(), "flags 00 is not sampled");
    // A later version may carry more fields after the flags.
    assert!(
        TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
            .is_some(),
        "a later version's extra fields are ignored"
    );
}

#[test]
fn invalid_traceparents_give_none() {
    let long = format!("{VALID}{}", "-0".repeat(4096));
    for header in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        &long,
    ] {
        assert_eq!(TraceParent::parse(header), None, "{header:.80}");
    }
}

#[test]
fn a_header_round_trips() {
    let trace = TraceId([0xab; 16]);
    let span = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
    let value = TraceParent::header(&trace, &span, true);
    assert_eq!(
        value.to_str().expect("ascii"),
        "00-abababababababababababababababab-0102030405060708-01"
    );
    let parsed = TraceParent::parse(value.to_str().expect("ascii")).expect("valid");
    assert_eq!(
        (parsed.trace, parsed.parent, parsed.flags),
        (trace, span, 1)
    );
    let unsampled = TraceParent::header(&trace, &span, false);
    assert!(
        unsampled.to_str().expect("ascii").ends_with("-00"),
        "not sampled: flags 00"
    );
}

fn ids() -> (TraceId, SpanId) {
    (TraceId([7; 16]), [9; 8])
}

#[test]
fn a_valid_header_is_continued_and_its_attempts_carry_their_span() {
    let mut state = TraceState::new(Some(VALID.as_bytes()), ids, |parent, _| {
        parent.is_some_and(TraceParent::sampled)
    });
    assert_eq!(
        state.trace.hex(),
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "same trace"
    );
    assert_eq!(state.span, [9; 8], "a span of its own");
    assert_eq!(
        state.parent,
        Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
    );
    assert!(state.sampled && !state.foreign_header);
    let mut headers = HeaderMap::new();
    headers.insert(TRACEPARENT, HeaderValue::from_static(VALID));
    state.start_attempt([3; 8], Instant::now(), None, &mut headers);
    assert_eq!(
        headers[TRACEPARENT], "00-4bf92f3577b34da6a3ce929d0e0e4736-0303030303030303-01",
        "the upstream sees the attempt's span as its parent"
    );
    state.fail_attempt(Instant::now(), "connect", "refused".into());
    state.start_attempt([4; 8], Instant::now(), None, &mut headers);
    assert_eq!(state.attempts.len(), 2);
    assert_eq!(
        state.attempts[0].failed.as_ref().map(|f| f.kind),
        Some("connect")
    );
    assert!(state.attempts[1].failed.is_none());
    assert!(headers[TRACEPARENT]
        .to_str()
        .unwrap()
        .contains("-0404040404040404-"));
}

#[test]
fn a_malformed_header_starts_a_fresh_trace_and_passes_unchanged() {
    let hostile = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let mut state = TraceState::new(Some(hostile.as_bytes()), ids, |_, _| true);
    assert_eq!(state.trace, TraceId([7; 16]), "a fresh trace");
    assert_eq!(state.parent, None, "no parent");
    assert!(state.foreign_header);
    let mut headers = HeaderMap::new();
    headers.insert(TRACEPARENT, HeaderValue::from_static(hostile));
    state.start_attempt([3; 8], Instant::now(), None, &mut headers);
    assert_eq!(headers[TRACEPARENT], hostile, "passed upstream as it came");
}

#[test]
fn an_unsampled_request_with_a_header_passes_it_and_a_root_gets_one() {
    let unsampled = VALID.replace("-01", "-00");
    let mut state = TraceState::new(Some(unsampled.as_bytes()), ids, |parent, _| {
        parent.is_some_and(TraceParent::sampled)
    });
    assert!(!state.sampled);
    let mut headers = HeaderMap::new();
    headers.insert(TRACEPARENT, HeaderValue::from_str(&unsampled).unwrap());
    state.start_attempt([3; 8], Instant::now(), None, &mut headers);
    assert_eq!(headers[TRACEPARENT], unsampled.as_str(), "unchanged");

    let mut root = TraceState::new(None, ids, |_, _| false);
    let mut headers = HeaderMap::new();
    root.start_attempt([3; 8], Instant::now(), None, &mut headers);
    assert_eq!(
        headers[TRACEPARENT], "00-07070707070707070707070707070707-0303030303030303-00",
        "a root the proxy did not sample still tells the engine so"
    );
}
