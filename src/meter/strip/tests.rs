use super::*;
use crate::sse::Scanner;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../shared/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// Runs `chunks` through a scanner and the stripper, cutting events whose data has `"choices":[]`
/// (the usage-only chunk), and returns the bytes a client receives and the frame count.
fn strip(chunks: &[&[u8]]) -> (Vec<u8>, usize) {
    let mut scanner = Scanner::default();
    let mut stripper = UsageStripper::default();
    let mut out = Vec::new();
    let mut frames = 0;
    for chunk in chunks {
        let frame_start = scanner.position();
        let mut cuts = Vec::new();
        scanner.feed(chunk, |event| {
            if memchr::memmem::find(event.data, br#""choices":[]"#).is_some() {
                cuts.push((event.start, event.end));
            }
        });
        let frame = Bytes::copy_from_slice(chunk);
        if let Some(bytes) = stripper.process(frame, frame_start, &cuts, scanner.block_start()) {
            assert!(!bytes.is_empty(), "never an empty frame");
            out.extend_from_slice(&bytes);
            frames += 1;
        }
    }
    if let Some(tail) = stripper.finish() {
        out.extend_from_slice(&tail);
        frames += 1;
    }
    (out, frames)
}

/// The fixture with every usage-only event (and its blank line) removed, computed by line surgery.
fn without_usage(stream: &[u8], ending: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(stream).expect("fixtures are UTF-8");
    let separator = format!("{0}{0}", std::str::from_utf8(ending).expect("ascii"));
    text.split_inclusive(separator.as_str())
        .filter(|block| !block.contains(r#""choices":[]"#))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn no_usage_fixture_is_what_the_stripped_usage_fixture_gives() {
    let usage = fixture("vllm-chat-usage.sse");
    let expected = fixture("vllm-chat-no-usage.sse");
    let (whole, _) = strip(&[&usage]);
    assert_eq!(
        String::from_utf8_lossy(&whole),
        String::from_utf8_lossy(&expected),
        "stripping the usage chunk gives the stream the backend sends without include_usage"
    );
}

#[test]
fn every_two_way_split_gives_identical_bytes() {
    for (name, ending) in [
        ("vllm-chat-usage.sse", &b"\n"[..]),
        ("vllm-chat-n2.sse", b"\n"),
        ("vllm-completions.sse", b"\n"),
        ("vllm-chat-continuous-usage.sse", b"\n"),
        ("openai-chat-crlf-usage-null.sse", b"\r\n"),
    ] {
        let stream = fixture(name);
        let expected = without_usage(&stream, ending);
        assert!(
            expected.len() < stream.len(),
            "{name} has a usage chunk to strip"
        );
        for split in 0..=stream.len() {
            let (out, _) = strip(&[&stream[..split], &stream[split..]]);
            assert_eq!(out, expected, "{name} split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(strip(&bytes).0, expected, "{name} in 1-byte chunks");
    }
}

#[test]
fn whole_event_frames_pass_through_as_the_same_bytes() {
    let stream = fixture("vllm-chat-usage.sse");
    let events: Vec<&[u8]> = stream
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|pair| {
            let start = pair[0].as_ptr() as usize - stream.as_ptr() as usize;
            let len: usize = pair.iter().map(|line| line.len()).sum();
            &stream[start..start + len]
        })
        .collect();
    assert_eq!(events.len(), 10, "one frame per event, as vLLM writes them");
    let mut scanner = Scanner::default();
    let mut stripper = UsageStripper::default();
    let mut forwarded = 0;
    for event in &events {
        let frame = Bytes::copy_from_slice(event);
        let pointer = frame.as_ptr();
        let frame_start = scanner.position();
        let mut cuts = Vec::new();
        scanner.feed(&frame, |e| {
            if memchr::memmem::find(e.data, br#""choices":[]"#).is_some() {
                cuts.push((e.start, e.end));
            }
        });
        if let Some(out) = stripper.process(frame, frame_start, &cuts, scanner.block_start()) {
            assert_eq!(
                out.as_ptr(),
                pointer,
                "an untouched frame is forwarded without a copy"
            );
            forwarded += 1;
        }
    }
    assert_eq!(forwarded, 9, "every frame but the usage chunk");
}

#[test]
fn unterminated_tail_is_released_at_the_end() {
    let (out, frames) = strip(&[b"data: a\n\ndata: b"]);
    assert_eq!(out, b"data: a\n\ndata: b", "nothing lost");
    assert_eq!(
        frames, 2,
        "the whole event now, the partial tail at the end"
    );
}
