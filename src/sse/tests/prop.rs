//! Property tests: however a stream is cut into frames, the scanner reports exactly what a plain,
//! whole-stream reading of the WHATWG rules (the `reference` below) reports.

use proptest::prelude::*;

use super::{scan, OwnedEvent};
use crate::sse::DEFAULT_MAX_LINE;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What a whole-stream reading yields: events, overflow count, final block start.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<OwnedEvent>,
    overflows: u64,
    block_start: u64,
}

/// The rules read straight off REFERENCE.md §5 on a complete stream, with the scanner's
/// documented choices: `end` is past the CR of a CRLF, and a line or event longer than
/// `max_line` is dropped, counted, and breaks its event.
fn reference(stream: &[u8], max_line: usize) -> Outcome {
    let mut out = Outcome {
        events: Vec::new(),
        overflows: 0,
        block_start: 0,
    };
    if stream.len() < BOM.len() && BOM.starts_with(stream) {
        return out; // possibly a BOM still arriving: nothing to read yet
    }
    let mut pos = if stream.starts_with(BOM) {
        BOM.len()
    } else {
        0
    };
    out.block_start = pos as u64;
    let mut data: Option<Vec<u8>> = None;
    let mut event = Vec::new();
    let mut broken = false;
    while pos < stream.len() {
        let Some(len) = stream[pos..].iter().position(|&b| b == b'\r' || b == b'\n') else {
            if stream.len() - pos > max_line {
                out.overflows += 1; // the unterminated tail outgrew the cap
            }
            break;
        };
        let line = &stream[pos..pos + len];
        let end = pos + len + 1;
        let mut next = end;
        if stream[pos + len] == b'\r' && stream.get(end) == Some(&b'\n') {
            next += 1;
        }
        pos = next;
        if line.len() > max_line {
            out.overflows += 1;
            broken = true;
            continue;
        }
        if line.is_empty() {
            if let (false, Some(data)) = (broken, data.take()) {
                out.events.push(OwnedEvent {
                    event: std::mem::take(&mut event),
                    data,
                    start: out.block_start,
                    end: end as u64,
                });
            }
            data = None;
            event.clear();
            broken = false;
            out.block_start = next as u64;
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (name, mut value) = match line.iter().position(|&b| b == b':') {
            Some(c) => (&line[..c], &line[c + 1..]),
            None => (line, &line[line.len()..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match name {
            b"data" if !broken => {
                let mut joined = data.take().map_or(Vec::new(), |mut d| {
                    d.push(b'\n');
                    d
                });
                joined.extend_from_slice(value);
                if joined.len() > max_line {
                    out.overflows += 1;
                    broken = true;
                } else {
                    data = Some(joined);
                }
            }
            b"event" => event = value.to_vec(),
            _ => {}
        }
    }
    out
}

/// Runs the scanner over `chunks` and reports what it saw.
fn run(chunks: &[&[u8]], max_line: usize) -> Outcome {
    let (events, scanner) = scan(max_line, chunks);
    Outcome {
        events,
        overflows: scanner.overflows(),
        block_start: scanner.block_start(),
    }
}

/// Cuts `stream` at the given points (taken modulo its length, any order, repeats allowed).
fn cut<'a>(stream: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = points.iter().map(|p| p % (stream.len() + 1)).collect();
    at.push(0);
    at.push(stream.len());
    at.sort_unstable();
    at.windows(2).map(|w| &stream[w[0]..w[1]]).collect()
}

/// Checks whole, randomly cut, and byte-by-byte feeding against the reference.
fn check(stream: &[u8], points: &[usize], max_line: usize) -> Result<(), TestCaseError> {
    let expected = reference(stream, max_line);
    let whole = run(&[stream], max_line);
    prop_assert_eq!(&whole, &expected, "whole stream vs reference");
    let split = run(&cut(stream, points), max_line);
    prop_assert_eq!(&split, &expected, "random cut vs reference");
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    let by_byte = run(&bytes, max_line);
    prop_assert_eq!(&by_byte, &expected, "1-byte chunks vs reference");
    Ok(())
}

/// A field value: any bytes but CR and LF (which would end the line).
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..12).prop_map(|mut v| {
        v.iter_mut()
            .filter(|b| **b == b'\r' || **b == b'\n')
            .for_each(|b| *b = b'x');
        v
    })
}

/// One line of a well-formed-ish stream, without its ending.
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => value().prop_map(|v| [&b"data: "[..], &v].concat()),
        2 => value().prop_map(|v| [&b"data:"[..], &v].concat()),
        1 => Just(b"data".to_vec()),
        2 => value().prop_map(|v| [&b"event: "[..], &v].concat()),
        1 => value().prop_map(|v| [&b"id: "[..], &v].concat()),
        1 => Just(b"retry: 3000".to_vec()),
        1 => value().prop_map(|v| [&b":"[..], &v].concat()),
        1 => value(),
        4 => Just(Vec::new()),
    ]
}

fn ending() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![Just(&b"\n"[..]), Just(&b"\r"[..]), Just(&b"\r\n"[..])]
}

/// A stream of random events: optional BOM, lines with mixed endings, maybe a partial tail.
fn event_stream() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop::collection::vec((line(), ending()), 0..40),
        prop::option::of(line()),
    )
        .prop_map(|(bom, lines, tail)| {
            let mut s = if bom { BOM.to_vec() } else { Vec::new() };
            for (l, e) in lines {
                s.extend_from_slice(&l);
                s.extend_from_slice(e);
            }
            s.extend(tail.unwrap_or_default());
            s
        })
}

/// Hostile input: random bytes mixed with the tokens that drive the parser.
fn noise() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        3 => any::<u8>().prop_map(|b| vec![b]),
        2 => Just(b"\r".to_vec()),
        2 => Just(b"\n".to_vec()),
        1 => Just(b"\r\n".to_vec()),
        2 => Just(b"data".to_vec()),
        1 => Just(b"event".to_vec()),
        2 => Just(b":".to_vec()),
        1 => Just(b" ".to_vec()),
        1 => Just(BOM.to_vec()),
        1 => Just(b"\xEF\xBB".to_vec()),
        1 => Just(vec![0]),
    ];
    prop::collection::vec(token, 0..120).prop_map(|t| t.concat())
}

fn max_line() -> impl Strategy<Value = usize> {
    prop_oneof![Just(DEFAULT_MAX_LINE), 0..24usize]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_events_any_split_match_reference(
        stream in event_stream(),
        points in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        check(&stream, &points, DEFAULT_MAX_LINE)?;
    }

    #[test]
    fn random_events_with_small_cap_match_reference(
        stream in event_stream(),
        points in prop::collection::vec(any::<usize>(), 0..12),
        cap in 0..24usize,
    ) {
        check(&stream, &points, cap)?;
    }

    #[test]
    fn random_bytes_never_panic_and_match_reference(
        stream in noise(),
        points in prop::collection::vec(any::<usize>(), 0..12),
        cap in max_line(),
    ) {
        check(&stream, &points, cap)?;
    }
}

#[test]
fn reference_agrees_with_hand_computed_example() {
    // Guards the oracle itself, so the properties above test the scanner against the rules.
    let out = reference(
        b"\xEF\xBB\xBF: c\r\nevent: e\rdata: a\ndata:b\r\n\r\n",
        DEFAULT_MAX_LINE,
    );
    assert_eq!(
        out,
        Outcome {
            events: vec![OwnedEvent {
                event: b"e".to_vec(),
                data: b"a\nb".to_vec(),
                start: 3,
                end: 34,
            }],
            overflows: 0,
            block_start: 35,
        },
        "BOM stripped, comment skipped, CR/LF/CRLF endings, data joined, end past the CR"
    );
}
