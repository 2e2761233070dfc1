use proptest::prelude::*;

use super::NdJsonScanner;

/// An event with owned bytes, comparable across feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    data: Vec<u8>,
    start: u64,
    end: u64,
}

/// Everything a scan reports.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    lines: Vec<Line>,
    overflows: u64,
    block_start: u64,
    position: u64,
}

/// Feeds `frames` in order, then (when `finish`) ends the stream.
fn scan(frames: &[&[u8]], max_line: usize, finish: bool) -> Outcome {
    let mut scanner = NdJsonScanner::new(max_line);
    let mut lines = Vec::new();
    let mut push = |event: crate::sse::Event<'_>| {
        assert!(event.event.is_empty(), "NDJSON events have no type");
        lines.push(Line {
            data: event.data.to_vec(),
            start: event.start,
            end: event.end,
        });
    };
    for frame in frames {
        scanner.feed(frame, &mut push);
        assert!(
            scanner.carried_len() <= max_line,
            "the carry buffer never exceeds max_line"
        );
    }
    if finish {
        scanner.finish(&mut push);
    }
    Outcome {
        lines,
        overflows: scanner.overflows(),
        block_start: scanner.block_start(),
        position: scanner.position(),
    }
}

/// The format read straight off its definition, on a whole stream: split on `\n`, drop one
/// trailing `\r`, skip blank lines, drop (and count) lines longer than `max_line`.
fn reference(stream: &[u8], max_line: usize, finish: bool) -> Outcome {
    let mut out = Outcome {
        lines: Vec::new(),
        overflows: 0,
        block_start: 0,
        position: stream.len() as u64,
    };
    let mut pos = 0;
    while pos < stream.len() {
        let (line, end, terminated) = match stream[pos..].iter().position(|&b| b == b'\n') {
            Some(k) => (&stream[pos..pos + k], pos + k + 1, true),
            None => (&stream[pos..], stream.len(), false),
        };
        if line.len() > max_line {
            out.overflows += 1;
        } else if terminated || finish {
            let data = line.strip_suffix(b"\r").unwrap_or(line);
            if !data.trim_ascii().is_empty() {
                out.lines.push(Line {
                    data: data.to_vec(),
                    start: pos as u64,
                    end: end as u64,
                });
            }
        }
        if terminated || finish {
            out.block_start = end as u64;
        }
        pos = end;
    }
    out
}

#[test]
fn lines_offsets_and_crlf() {
    let stream = b"{\"a\":1}\n\r\n  \n{\"b\":2}\r\n{\"c\"";
    let got = scan(&[stream], 1024, false);
    assert_eq!(
        got.lines,
        vec![
            Line {
                data: b"{\"a\":1}".to_vec(),
                start: 0,
                end: 8
            },
            Line {
                data: b"{\"b\":2}".to_vec(),
                start: 13,
                end: 22
            },
        ],
        "blank and whitespace-only lines are skipped, CRLF is stripped, end is past the LF"
    );
    assert_eq!(
        got.block_start, 22,
        "the partial line starts after the last LF"
    );
    assert_eq!(got.position, stream.len() as u64, "every byte counted");
}

#[test]
fn finish_reports_an_unterminated_last_line() {
    let got = scan(&[b"{\"a\":1}\n{\"done\":", b"true}"], 1024, true);
    assert_eq!(
        got.lines[1],
        Line {
            data: b"{\"done\":true}".to_vec(),
            start: 8,
            end: 21
        },
        "the tail is reported at finish, ending at the stream's end"
    );
    assert_eq!(
        got.block_start, 21,
        "after finish the stream is at a line boundary"
    );
}

#[test]
fn an_oversized_line_is_dropped_and_counted_once() {
    let got = scan(&[b"0123456", b"789\n{}\n"], 8, false);
    assert_eq!(got.overflows, 1, "one line over the cap, counted once");
    assert_eq!(
        got.lines,
        vec![Line {
            data: b"{}".to_vec(),
            start: 11,
            end: 14
        }],
        "the next line is read normally"
    );
}

#[test]
fn a_line_whole_in_a_frame_is_lent_from_it() {
    let frame = b"{\"x\":1}\n".to_vec();
    let mut scanner = NdJsonScanner::new(64);
    let mut lent = false;
    scanner.feed(&frame, |event| {
        lent = std::ptr::eq(event.data.as_ptr(), frame.as_ptr());
    });
    assert!(lent, "a whole line borrows the frame: no copy");
}

proptest! {
    #[test]
    fn any_split_gives_the_whole_stream_reading(
        parts in prop::collection::vec(
            prop::sample::select(vec![
                &b"{\"a\":1}"[..], b"\n", b"\r\n", b"\r", b" ", b"{\"done\":true,\"eval_count\":3}",
                b"x", b"\n\n",
            ]),
            0..24,
        ),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        max_line in 1usize..40,
        finish in any::<bool>(),
    ) {
        let stream: Vec<u8> = parts.concat();
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        at.sort_unstable();
        let mut frames = Vec::new();
        let mut from = 0;
        for cut in at {
            frames.push(&stream[from..cut]);
            from = cut;
        }
        frames.push(&stream[from..]);
        let want = reference(&stream, max_line, finish);
        prop_assert_eq!(scan(&frames, max_line, finish), want, "split at every cut");
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        prop_assert_eq!(
            scan(&bytes, max_line, finish),
            reference(&stream, max_line, finish),
            "one byte per frame"
        );
    }

    #[test]
    fn random_bytes_never_panic_and_stay_bounded(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16),
        max_line in 0usize..32,
    ) {
        let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let total: usize = frames.iter().map(|f| f.len()).sum();
        let got = scan(&frames, max_line, true);
        prop_assert_eq!(got.position, total as u64, "every byte counted");
        for line in &got.lines {
            prop_assert!(line.data.len() <= max_line, "no line longer than the cap");
            prop_assert!(line.start < line.end && line.end <= total as u64, "offsets inside the stream");
        }
    }
}
