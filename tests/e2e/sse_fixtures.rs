//! The scanner on the byte-exact vLLM / OpenAI stream fixtures: fed whole, cut into two frames at
//! every byte boundary, and one byte per frame, it must report the same events every time.

use std::path::Path;

use tokenmeter::sse::Scanner;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/openai");

/// Each fixture with the number of events it holds, counted by hand from the files (every event is
/// one `data:` line and a blank line; the last is `[DONE]`), and where its first block starts.
const EXPECTED: &[(&str, usize, u64)] = &[
    // `: keep-alive\r\n\r\n` (16 bytes) is a block without data, so the first event starts after it.
    ("openai-chat-crlf-usage-null", 5, 16),
    ("vllm-chat-continuous-usage", 8, 0),
    ("vllm-chat-error-midstream", 4, 0),
    ("vllm-chat-multi-token-chunks", 7, 0),
    ("vllm-chat-n2", 10, 0),
    ("vllm-chat-no-usage", 9, 0),
    ("vllm-chat-reasoning", 8, 0),
    ("vllm-chat-tool-calls", 8, 0),
    ("vllm-chat-usage", 10, 0),
    ("vllm-completions", 6, 0),
];

/// (event, data, start, end), owned so runs can be compared.
type Seen = (Vec<u8>, Vec<u8>, u64, u64);

fn run(chunks: &[&[u8]]) -> Vec<Seen> {
    let mut scanner = Scanner::default();
    let mut seen = Vec::new();
    for chunk in chunks {
        scanner.feed(chunk, |e| {
            seen.push((e.event.to_vec(), e.data.to_vec(), e.start, e.end))
        });
    }
    let total: usize = chunks.iter().map(|c| c.len()).sum();
    assert_eq!(
        scanner.position(),
        total as u64,
        "position counts every byte"
    );
    assert_eq!(
        scanner.block_start(),
        scanner.position(),
        "each fixture ends on a blank line"
    );
    assert_eq!(
        scanner.overflows(),
        0,
        "no fixture line comes near the 1 MiB cap"
    );
    seen
}

fn read(name: &str) -> Vec<u8> {
    let path = Path::new(FIXTURES).join(format!("{name}.sse"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn every_fixture_has_a_hand_count() {
    let mut on_disk: Vec<String> = std::fs::read_dir(FIXTURES)
        .expect("the fixtures directory is beside the crate")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".sse").map(str::to_owned)
        })
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = EXPECTED.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(
        on_disk, listed,
        "every *.sse fixture is checked below, with its count"
    );
}

#[test]
fn fixtures_whole_and_split_at_every_byte_give_the_same_events() {
    for &(name, count, first_start) in EXPECTED {
        let stream = read(name);
        let crlf = stream.ends_with(b"\r\n");
        let whole = run(&[&stream]);

        assert_eq!(whole.len(), count, "{name}: event count");
        assert!(
            whole.iter().all(|(event, ..)| event.is_empty()),
            "{name}: all events are unnamed (message)"
        );
        let (_, last_data, _, last_end) = &whole[count - 1];
        assert_eq!(last_data, b"[DONE]", "{name}: the last event is [DONE]");
        // A CRLF blank line dispatches at its CR; the final LF belongs to no event.
        let expected_end = stream.len() as u64 - u64::from(crlf);
        assert_eq!(
            *last_end, expected_end,
            "{name}: the last event ends the stream"
        );
        assert_eq!(whole[0].2, first_start, "{name}: first event start");
        for pair in whole.windows(2) {
            assert_eq!(
                pair[1].2,
                pair[0].3 + u64::from(crlf),
                "{name}: each event starts where the previous one's blank line ended"
            );
        }
        for (_, data, start, end) in &whole[..count - 1] {
            let block = &stream[*start as usize..*end as usize];
            assert!(
                block.starts_with(b"data: {") && data.starts_with(b"{") && data.ends_with(b"}"),
                "{name}: event at {start} is a JSON chunk"
            );
            assert!(
                block[6..].starts_with(data),
                "{name}: data at {start} is the line's value, byte for byte"
            );
        }

        for split in 1..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(run(&[a, b]), whole, "{name}: split at byte {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(run(&bytes), whole, "{name}: one byte per chunk");
    }
}
