use super::*;

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
