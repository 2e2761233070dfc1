use std::ops::ControlFlow;

use proptest::prelude::*;

use super::*;

/// A client byte stream: the preface, then each frame with a payload of its length.
fn stream_of(heads: &[FrameHead]) -> Vec<u8> {
    let mut bytes = H2_PREFACE.to_vec();
    for head in heads {
        bytes.extend_from_slice(&head.encode());
        bytes.extend((0..head.length).map(|i| (i % 251) as u8));
    }
    bytes
}

/// Every head found when `bytes` arrive in the given pieces.
fn heads_in(pieces: &[&[u8]]) -> (Vec<FrameHead>, bool) {
    let mut scanner = FrameScanner::new();
    let mut found = Vec::new();
    for piece in pieces {
        let flow = scanner.feed(piece, |head| {
            found.push(head);
            ControlFlow::<()>::Continue(())
        });
        assert_eq!(flow, ControlFlow::Continue(()), "nothing breaks");
    }
    (found, scanner.is_http2())
}

fn sample_heads() -> Vec<FrameHead> {
    vec![
        FrameHead {
            length: 18,
            kind: SETTINGS,
            flags: 0,
            stream: 0,
        },
        FrameHead {
            length: 0,
            kind: SETTINGS,
            flags: FLAG_ACK,
            stream: 0,
        },
        FrameHead {
            length: 40,
            kind: HEADERS,
            flags: 0,
            stream: 1,
        },
        FrameHead {
            length: 0,
            kind: CONTINUATION,
            flags: 0,
            stream: 1,
        },
        FrameHead {
            length: 7,
            kind: CONTINUATION,
            flags: FLAG_END_HEADERS,
            stream: 1,
        },
        FrameHead {
            length: 4,
            kind: WINDOW_UPDATE,
            flags: 0,
            stream: 0,
        },
        FrameHead {
            length: 8,
            kind: PING,
            flags: 0,
            stream: 0,
        },
        FrameHead {
            length: 4,
            kind: RST_STREAM,
            flags: 0,
            stream: 0x7fff_ffff,
        },
        FrameHead {
            length: 300,
            kind: 0,
            flags: 1,
            stream: 3,
        },
    ]
}

#[test]
fn a_head_round_trips_through_its_bytes() {
    for head in sample_heads() {
        assert_eq!(
            FrameHead::parse(&head.encode()),
            head,
            "{head:?} encodes and parses back"
        );
    }
    let reserved_bit = [0, 0, 4, WINDOW_UPDATE, 0, 0x80, 0, 0, 5];
    assert_eq!(
        FrameHead::parse(&reserved_bit).stream,
        5,
        "the reserved bit is not part of the stream id"
    );
}

#[test]
fn every_single_split_finds_the_same_heads() {
    let heads = sample_heads();
    let bytes = stream_of(&heads);
    for at in 0..=bytes.len() {
        let (found, http2) = heads_in(&[&bytes[..at], &bytes[at..]]);
        assert_eq!(found, heads, "split at {at}");
        assert!(http2, "split at {at}: still HTTP/2");
    }
}

#[test]
fn byte_by_byte_finds_the_same_heads() {
    let heads = sample_heads();
    let bytes = stream_of(&heads);
    let pieces: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(heads_in(&pieces).0, heads, "one byte per read");
}

#[test]
fn a_head_is_reported_before_its_payload_arrives() {
    let head = FrameHead {
        length: 1000,
        kind: HEADERS,
        flags: 0,
        stream: 1,
    };
    let mut bytes = H2_PREFACE.to_vec();
    bytes.extend_from_slice(&head.encode());
    assert_eq!(
        heads_in(&[&bytes]).0,
        vec![head],
        "the head alone is enough"
    );
}

#[test]
fn http1_bytes_turn_the_scanner_off() {
    for request in [
        &b"POST / HTTP/1.1\r\n\r\n"[..],
        b"PRI * HTTP/1.1\r\n",
        b"P",
        b"PRX",
    ] {
        let (_, http2) = heads_in(&[request]);
        assert_eq!(
            http2,
            H2_PREFACE.starts_with(request),
            "{request:?}: off unless a prefix of the preface"
        );
        let (found, http2) = heads_in(&[request, &[0; 64]]);
        assert!(found.is_empty(), "{request:?}: no frames");
        assert!(!http2, "{request:?} then zeros: off");
    }
}

#[test]
fn a_break_stops_the_scan_at_that_head() {
    let heads = sample_heads();
    let bytes = stream_of(&heads);
    let mut scanner = FrameScanner::new();
    let mut seen = 0;
    let flow = scanner.feed(&bytes, |head| {
        seen += 1;
        if head.kind == PING {
            ControlFlow::Break(head)
        } else {
            ControlFlow::Continue(())
        }
    });
    assert_eq!(flow, ControlFlow::Break(heads[6]), "the PING head breaks");
    assert_eq!(seen, 7, "no head after it was reported");
}

fn arbitrary_head() -> impl Strategy<Value = FrameHead> {
    (0u32..200, 0u8..12, any::<u8>(), 0u32..=0x7fff_ffff).prop_map(
        |(length, kind, flags, stream)| FrameHead {
            length,
            kind,
            flags,
            stream,
        },
    )
}

proptest! {
    #[test]
    fn any_split_of_any_stream_finds_the_same_heads(
        heads in proptest::collection::vec(arbitrary_head(), 0..40),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..30),
    ) {
        let bytes = stream_of(&heads);
        let mut at: Vec<usize> = cuts.iter().map(|cut| cut.index(bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        let pieces: Vec<&[u8]> = at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
        let (found, http2) = heads_in(&pieces);
        prop_assert_eq!(found, heads, "cuts at {:?}", at);
        prop_assert!(http2, "still HTTP/2");
    }
}
