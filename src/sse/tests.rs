//! Unit tests: one per WHATWG rule, offsets, bounds and zero-copy.

use super::{Event, Scanner, DEFAULT_MAX_LINE};

/// An event copied out of the callback, so tests can compare whole sequences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OwnedEvent {
    pub event: Vec<u8>,
    pub data: Vec<u8>,
    pub start: u64,
    pub end: u64,
}

impl From<Event<'_>> for OwnedEvent {
    fn from(e: Event<'_>) -> Self {
        Self {
            event: e.event.to_vec(),
            data: e.data.to_vec(),
            start: e.start,
            end: e.end,
        }
    }
}

/// Feeds `chunks` in order to a fresh scanner; returns the events and the scanner.
pub(super) fn scan(max_line: usize, chunks: &[&[u8]]) -> (Vec<OwnedEvent>, Scanner) {
    let mut scanner = Scanner::new(max_line);
    let mut events = Vec::new();
    for chunk in chunks {
        scanner.feed(chunk, |e| events.push(e.into()));
    }
    (events, scanner)
}

fn scan_whole(stream: &[u8]) -> Vec<OwnedEvent> {
    scan(DEFAULT_MAX_LINE, &[stream]).0
}

fn ev(event: &str, data: &str, start: u64, end: u64) -> OwnedEvent {
    OwnedEvent {
        event: event.as_bytes().to_vec(),
        data: data.as_bytes().to_vec(),
        start,
        end,
    }
}

#[test]
fn lf_endings() {
    assert_eq!(
        scan_whole(b"data: a\n\ndata: b\n\n"),
        vec![ev("", "a", 0, 9), ev("", "b", 9, 18)],
        "LF-terminated lines: two events, each block 9 bytes"
    );
}

#[test]
fn lone_cr_endings() {
    assert_eq!(
        scan_whole(b"data: a\r\rdata: b\r\r"),
        vec![ev("", "a", 0, 9), ev("", "b", 9, 18)],
        "a lone CR ends a line exactly like LF"
    );
}

#[test]
fn crlf_endings_end_past_the_cr() {
    let (events, scanner) = scan(DEFAULT_MAX_LINE, &[b"data: a\r\n\r\ndata: b\r\n\r\n"]);
    assert_eq!(
        events,
        vec![ev("", "a", 0, 10), ev("", "b", 11, 21)],
        "CRLF: `end` is just past the blank line's CR, the next block starts after its LF"
    );
    assert_eq!(scanner.position(), 22, "every byte is counted");
    assert_eq!(
        scanner.block_start(),
        22,
        "the final LF leaves us at a block boundary"
    );
}

#[test]
fn cr_then_lf_in_next_chunk_is_one_line_ending() {
    let whole = scan_whole(b"data: a\r\n\r\ndata: b\r\n\r\n");
    let (split, _) = scan(
        DEFAULT_MAX_LINE,
        &[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\n\r", b"\n"],
    );
    assert_eq!(
        split, whole,
        "CR|LF split across chunks gives the same events and offsets"
    );

    let (joined, _) = scan(DEFAULT_MAX_LINE, &[b"data: a\r", b"\ndata: b\n\n"]);
    assert_eq!(
        joined,
        vec![ev("", "a\nb", 0, 18)],
        "the LF after a chunk-final CR is not a second (blank, dispatching) line"
    );

    let (events, scanner) = scan(DEFAULT_MAX_LINE, &[b"data: a\n\r", b"", b"\n"]);
    assert_eq!(
        events,
        vec![ev("", "a", 0, 9)],
        "an empty chunk does not forget the pending CR"
    );
    assert_eq!(
        scanner.block_start(),
        10,
        "the swallowed LF belongs to no block"
    );
}

#[test]
fn bom_is_stripped_whole_or_split() {
    let stream = b"\xEF\xBB\xBFdata: a\n\n";
    let expected = vec![ev("", "a", 3, 12)];
    assert_eq!(
        scan_whole(stream),
        expected,
        "a leading BOM is stripped; offsets still count it"
    );
    for split in 1..stream.len() {
        let (events, _) = scan(DEFAULT_MAX_LINE, &[&stream[..split], &stream[split..]]);
        assert_eq!(events, expected, "BOM split at byte {split}");
    }
    let (events, _) = scan(
        DEFAULT_MAX_LINE,
        &[b"\xEF", b"\xBB", b"\xBF", b"data: a\n\n"],
    );
    assert_eq!(events, expected, "BOM fed one byte per chunk");
}

#[test]
fn bom_is_stripped_once_and_only_at_stream_start() {
    assert_eq!(
        scan_whole(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"),
        vec![],
        "a second BOM is part of the field name, so the line is not `data`"
    );
    assert_eq!(
        scan_whole(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"),
        vec![ev("", "a", 0, 9)],
        "a BOM after stream start is content"
    );
}

#[test]
fn partial_bom_bytes_are_content() {
    let stream = b"\xEF\xBBdata: a\n\ndata: b\n\n";
    let expected = vec![ev("", "b", 11, 20)];
    assert_eq!(
        scan_whole(stream),
        expected,
        "EF BB without BF stays in the first line"
    );
    let (split, _) = scan(DEFAULT_MAX_LINE, &[b"\xEF", b"\xBB", &stream[2..]]);
    assert_eq!(
        split, expected,
        "the partial BOM is kept even when it came in earlier chunks"
    );
}

#[test]
fn comments_are_ignored_but_inside_the_block() {
    assert_eq!(
        scan_whole(b": hi\ndata: a\n: mid\n\n"),
        vec![ev("", "a", 0, 20)],
        "comment lines are ignored; the block (and `start`) includes them"
    );
    assert_eq!(
        scan_whole(b": keep-alive\n\ndata: b\n\n"),
        vec![ev("", "b", 14, 23)],
        "a comment-only block dispatches nothing but still ends"
    );
}

#[test]
fn data_lines_join_with_lf() {
    assert_eq!(
        scan_whole(b"data: a\ndata:\ndata: b\n\n"),
        vec![ev("", "a\n\nb", 0, 23)],
        "three data lines (one empty) join with LF, no trailing LF"
    );
}

#[test]
fn event_field_names_the_event_and_resets() {
    assert_eq!(
        scan_whole(b"event: ping\ndata: 1\n\ndata: 2\n\n"),
        vec![ev("ping", "1", 0, 21), ev("", "2", 21, 30)],
        "`event` names only the event it belongs to"
    );
    assert_eq!(
        scan_whole(b"event: a\nevent: b\ndata: 1\n\n"),
        vec![ev("b", "1", 0, 27)],
        "the last `event` line wins"
    );
    assert_eq!(
        scan_whole(b"event: x\n\ndata: 3\n\n"),
        vec![ev("", "3", 10, 19)],
        "an event name from an undispatched block does not leak into the next"
    );
}

#[test]
fn one_leading_space_is_removed_from_values() {
    assert_eq!(
        scan_whole(b"data:x\n\ndata: x\n\ndata:  x\n\nevent:ping\ndata:y\n\n"),
        vec![
            ev("", "x", 0, 8),
            ev("", "x", 8, 17),
            ev("", " x", 17, 27),
            ev("ping", "y", 27, 46),
        ],
        "`data:x` == `data: x`; only one space is removed"
    );
}

#[test]
fn field_without_colon_has_empty_value() {
    assert_eq!(
        scan_whole(b"data\n\n"),
        vec![ev("", "", 0, 6)],
        "`data` alone appends an empty value plus LF: the buffer is not empty, so it dispatches"
    );
    assert_eq!(
        scan_whole(b"event\ndata: a\n\n"),
        vec![ev("", "a", 0, 15)],
        "`event` alone sets the empty (message) type"
    );
}

#[test]
fn id_retry_and_unknown_fields_are_ignored() {
    assert_eq!(
        scan_whole(b"id: 7\nretry: 10\nfoo: bar\nDATA: no\ndata: a\n\n"),
        vec![ev("", "a", 0, 43)],
        "only `data` and `event` (case-sensitive) matter"
    );
}

#[test]
fn event_without_data_is_not_dispatched() {
    let (events, scanner) = scan(DEFAULT_MAX_LINE, &[b"event: x\nid: 1\n\n"]);
    assert_eq!(
        events,
        vec![],
        "no data line means an empty data buffer: no event"
    );
    assert_eq!(
        scanner.block_start(),
        16,
        "its block still ends at the blank line"
    );
}

#[test]
fn unterminated_tail_is_not_dispatched() {
    assert_eq!(
        scan_whole(b"data: a\n\ndata: b\n"),
        vec![ev("", "a", 0, 9)],
        "an event without its blank line is never dispatched"
    );
    assert_eq!(
        scan_whole(b"data: a\n\ndata: b"),
        vec![ev("", "a", 0, 9)],
        "nor is a partial last line"
    );
}

#[test]
fn position_and_block_start_at_boundaries_and_mid_block() {
    let mut scanner = Scanner::default();
    assert_eq!(
        (scanner.position(), scanner.block_start()),
        (0, 0),
        "fresh scanner"
    );
    let mut n = 0;
    // Each frame, then `(position, block_start)` after it.
    let frames: [(&[u8], (u64, u64), &str); 5] = [
        (b"data: a\n\n", (9, 9), "at a block boundary"),
        (b": c\ndata: b", (20, 9), "mid-block, partial line"),
        (b"\n", (21, 9), "mid-block, after a line"),
        (b"\r", (22, 22), "after a CR blank line"),
        (b"\n", (23, 23), "the LF joins no block"),
    ];
    for (frame, want, what) in frames {
        scanner.feed(frame, |_| n += 1);
        assert_eq!((scanner.position(), scanner.block_start()), want, "{what}");
    }
    assert_eq!(n, 2, "two events dispatched");
}

#[test]
fn oversized_line_is_dropped_counted_and_recovered_from() {
    let stream = b"data: 123456789\n\ndata: ok\n\n";
    let expected = vec![ev("", "ok", 17, 27)];
    let (events, scanner) = scan(8, &[stream]);
    assert_eq!(
        events, expected,
        "the oversized event is dropped, the next one is intact"
    );
    assert_eq!(scanner.overflows(), 1, "one overflow");
    for split in 1..stream.len() {
        let (events, scanner) = scan(8, &[&stream[..split], &stream[split..]]);
        assert_eq!(events, expected, "same events when split at {split}");
        assert_eq!(scanner.overflows(), 1, "one overflow when split at {split}");
    }
}

#[test]
fn oversized_line_breaks_its_whole_event() {
    let (events, scanner) = scan(8, &[b"data: a\ndata: 123456789\ndata: b\n\ndata: c\n\n"]);
    assert_eq!(
        events,
        vec![ev("", "c", 33, 42)],
        "an event that lost a line is not dispatched with partial data"
    );
    assert_eq!(scanner.overflows(), 1, "one overflow");
}

#[test]
fn oversized_event_data_is_dropped() {
    let stream = b"data: 123456\ndata: 789\ndata: ab\n\ndata: ok\n\n";
    let (events, scanner) = scan(12, &[stream]);
    assert_eq!(
        events,
        vec![ev("", "ok", 33, 43)],
        "every line fits the cap of 12, but the joined data (13 bytes) does not"
    );
    assert_eq!(scanner.overflows(), 1, "one overflow for the event");
}

#[test]
fn giant_line_is_never_buffered() {
    let mut scanner = Scanner::new(4096);
    let mut events = Vec::new();
    let filler = [b'x'; 1024];
    scanner.feed(b"data: ", |e| events.push(OwnedEvent::from(e)));
    for _ in 0..10_000 {
        scanner.feed(&filler, |e| events.push(OwnedEvent::from(e)));
        assert!(
            scanner.carried_len() <= 4096,
            "the carry buffer stays within the cap"
        );
    }
    scanner.feed(b"\n\ndata: after\n\n", |e| events.push(OwnedEvent::from(e)));
    assert_eq!(scanner.overflows(), 1, "the 10 MB line counts once");
    assert_eq!(
        events,
        vec![ev("", "after", 10_240_008, 10_240_021)],
        "the scanner recovers after the giant line"
    );
}

#[test]
fn whole_event_in_one_chunk_borrows_the_chunk() {
    let chunk = b"event: delta\ndata: {\"x\":1}\n\n".to_vec();
    let range = chunk.as_ptr_range();
    let mut seen = 0;
    Scanner::default().feed(&chunk, |e| {
        seen += 1;
        assert!(
            range.contains(&e.data.as_ptr()),
            "data borrows the chunk, not a copy"
        );
        assert!(range.contains(&e.event.as_ptr()), "so does the event name");
        assert_eq!(e.data, b"{\"x\":1}", "data value");
    });
    assert_eq!(seen, 1, "one event");
}

#[test]
fn spanning_events_are_copied_correctly() {
    let (events, _) = scan(
        DEFAULT_MAX_LINE,
        &[b"event: del", b"ta\ndata: {\"x\"", b":1}\ndata: 2\n", b"\n"],
    );
    assert_eq!(
        events,
        vec![ev("delta", "{\"x\":1}\n2", 0, 36)],
        "fields split across chunks are reassembled"
    );
}

#[test]
fn steady_state_does_not_grow_buffers() {
    let mut scanner = Scanner::default();
    let mut n = 0u32;
    let round = |scanner: &mut Scanner, n: &mut u32| {
        for chunk in [&b"event: d\ndata: {\"a\":"[..], b"1}\ndata: 2", b"\n\n"] {
            scanner.feed(chunk, |_| *n += 1);
        }
    };
    round(&mut scanner, &mut n);
    let capacity = scanner.buffer_capacity();
    for _ in 0..1000 {
        round(&mut scanner, &mut n);
    }
    assert_eq!(
        scanner.buffer_capacity(),
        capacity,
        "buffers are reused, not regrown"
    );
    assert_eq!(n, 1001, "every round dispatched its event");
}

/// Property tests: every split of a stream gives the same events.
mod prop;
