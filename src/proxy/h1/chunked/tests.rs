use super::*;
use proptest::prelude::*;

/// Feeds `wire` to a decoder in the given pieces; returns the data frames and whether it finished.
fn decode_in_pieces(
    wire: &[u8],
    cuts: &[usize],
) -> Result<(Vec<Bytes>, bool, BytesMut), ChunkedError> {
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts
        .iter()
        .copied()
        .filter(|&c| c > 0 && c < wire.len())
        .collect();
    ends.sort_unstable();
    ends.push(wire.len());
    for end in ends {
        buf.extend_from_slice(&wire[start..end]);
        start = end;
        loop {
            match decoder.decode(&mut buf)? {
                Step::Data(data) => frames.push(data),
                Step::NeedMore => break,
                Step::Done => return Ok((frames, true, buf)),
            }
        }
    }
    Ok((frames, false, buf))
}

const SSE: &[u8] = b"1b\r\ndata: {\"id\":\"c\",\"x\":\"hi\"}\n\n\r\n\
    e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";

#[test]
fn each_chunk_is_one_frame_when_it_arrives_whole() {
    let (frames, done, rest) = decode_in_pieces(SSE, &[]).expect("valid body");
    assert!(done, "the terminating chunk ends the body");
    assert!(rest.is_empty(), "nothing left over: {rest:?}");
    assert_eq!(
        frames,
        vec![
            Bytes::from_static(b"data: {\"id\":\"c\",\"x\":\"hi\"}\n\n"),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ],
        "one frame per chunk, bytes unchanged"
    );
}

#[test]
fn extensions_trailers_and_bare_lf_are_accepted_and_dropped() {
    let wire = b"3;name=value\r\nabc\n4 \r\ndefg\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
    let (frames, done, rest) = decode_in_pieces(wire, &[]).expect("valid body");
    assert!(done, "ends at the empty line after the trailers");
    assert_eq!(frames.concat(), b"abcdefg", "data only");
    assert_eq!(
        &rest[..],
        b"NEXT",
        "bytes after the body stay in the buffer"
    );
}

#[test]
fn malformed_bodies_are_errors() {
    for (wire, why) in [
        (&b"zz\r\n"[..], "not hex"),
        (b"3x\r\nabc\r\n", "junk after the size"),
        (b"3\r\nabcd\r\n", "data longer than its size"),
        (b"3\r\nabc\rX", "CR not followed by LF"),
        (b"fffffffffffffffff\r\n", "size overflows u64"),
        (b"\r\n", "empty size line"),
    ] {
        assert!(decode_in_pieces(wire, &[]).is_err(), "{why}: {wire:?}");
    }
    let long = vec![b'1'; MAX_LINE + 2];
    assert!(
        decode_in_pieces(&long, &[]).is_err(),
        "an endless size line is refused"
    );
}

#[test]
fn a_body_cut_short_is_not_done() {
    let (frames, done, _) = decode_in_pieces(&SSE[..SSE.len() - 3], &[]).expect("valid so far");
    assert!(!done, "the terminator is incomplete");
    assert_eq!(frames.len(), 2, "both chunks were whole: {frames:?}");
}

proptest! {
    #[test]
    fn every_split_gives_the_same_bytes(cuts in proptest::collection::vec(0usize..SSE.len(), 0..6)) {
        let (frames, done, rest) = decode_in_pieces(SSE, &cuts).expect("valid body");
        prop_assert!(done, "finished");
        prop_assert!(rest.is_empty(), "nothing left");
        prop_assert_eq!(
            frames.concat(),
            b"data: {\"id\":\"c\",\"x\":\"hi\"}\n\ndata: [DONE]\n\n".to_vec()
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic(wire in proptest::collection::vec(any::<u8>(), 0..64),
                                   cuts in proptest::collection::vec(0usize..64, 0..4)) {
        let _ = decode_in_pieces(&wire, &cuts);
    }
}
