use super::*;

const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn traceparent_gives_the_trace_id() {
    let trace = TraceId::from_traceparent(VALID).expect("valid");
    assert_eq!(trace.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(trace.0[0], 0x4b);
    // A later version may carry more fields after the flags.
    assert!(TraceId::from_traceparent(
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"
    )
    .is_some());
}

#[test]
fn invalid_traceparents_give_none() {
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
    ] {
        assert_eq!(TraceId::from_traceparent(header), None, "{header}");
    }
}

#[test]
fn a_slot_keeps_the_latest_exemplar() {
    let slot = ExemplarSlot::default();
    assert_eq!(slot.load(), None, "empty");
    let first = Exemplar {
        trace: TraceId([1; 16]),
        value: 0.25,
        unix_ms: 1_700_000_000_000,
    };
    slot.store(first);
    assert_eq!(slot.load(), Some(first));
    let mut trace = [0u8; 16];
    trace[15] = 9;
    trace[0] = 0xab;
    let second = Exemplar {
        trace: TraceId(trace),
        value: 0.5,
        unix_ms: 1_700_000_000_123,
    };
    slot.store(second);
    assert_eq!(slot.load(), Some(second));
}

#[test]
fn concurrent_writers_never_tear_an_exemplar() {
    // Each writer stores exemplars whose every field derives from one number: a torn read would
    // mix two numbers.
    let slot = std::sync::Arc::new(ExemplarSlot::default());
    let writers: Vec<_> = (1..=4u64)
        .map(|w| {
            let slot = std::sync::Arc::clone(&slot);
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    let n = w * 1_000_000 + i;
                    let mut trace = [0u8; 16];
                    trace[..8].copy_from_slice(&n.to_be_bytes());
                    trace[8..].copy_from_slice(&n.to_be_bytes());
                    slot.store(Exemplar {
                        trace: TraceId(trace),
                        value: n as f64,
                        unix_ms: n,
                    });
                }
            })
        })
        .collect();
    let mut read = 0;
    while read < 20_000 {
        if let Some(e) = slot.load() {
            let n = e.unix_ms;
            assert_eq!(e.value, n as f64);
            assert_eq!(&e.trace.0[..8], &n.to_be_bytes());
            assert_eq!(&e.trace.0[8..], &n.to_be_bytes());
        }
        read += 1;
    }
    for writer in writers {
        writer.join().expect("writer");
    }
}
