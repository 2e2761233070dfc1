use super::*;
use crate::sse::Scanner;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// The stripper's role for an event, as the metering body decides it (with the real classifier).
fn role(data: &[u8]) -> EventRole {
    let summary = crate::dialect::openai::classify(data);
    if summary.usage_only {
        EventRole::UsageOnly
    } else if summary.finish {
        EventRole::Finish
    } else {
        EventRole::Other
    }
}

/// Runs `chunks` through a scanner and the stripper, as the metering body does, and returns the
/// bytes a client receives and the frame count.
fn strip(chunks: &[&[u8]]) -> (Vec<u8>, usize) {
    let mut scanner = Scanner::default();
    let mut stripper = UsageStripper::default();
    let mut out = Vec::new();
    let mut frames = 0;
    for chunk in chunks {
        let frame_start = scanner.position();
        scanner.feed(chunk, |event| stripper.on_event(role(event.data), &event));
        let frame = Bytes::copy_from_slice(chunk);
        if let Some(bytes) = stripper.process(frame, frame_start, scanner.block_start()) {
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
    let mut sent = Vec::new();
    let mut forwarded = Vec::new();
    for event in &events {
        let frame = Bytes::copy_from_slice(event);
        sent.push((frame.as_ptr(), frame.len()));
        let frame_start = scanner.position();
        scanner.feed(&frame, |e| stripper.on_event(role(e.data), &e));
        if let Some(out) = stripper.process(frame, frame_start, scanner.block_start()) {
            forwarded.push((out.as_ptr(), out.len()));
        }
    }
    // Frames 0-7 are the role, token and finish chunks; 8 is the usage chunk; 9 is [DONE].
    let mut expected: Vec<_> = sent[..8].to_vec();
    expected.push(sent[9]);
    assert_eq!(
        forwarded, expected,
        "every frame but the usage chunk, each without a copy (the finish frame leaves when the \
         usage frame comes)"
    );
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

/// llama.cpp's last events with `include_usage`: the finish chunk, then the usage chunk that
/// carries `timings` (recorded from llama-server, tests/fixtures/llamacpp/).
const LLAMA_FINISH: &str = r#"data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1764400000,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1-abc","object":"chat.completion.chunk"}"#;
const LLAMA_USAGE: &str = r#"data: {"choices":[],"created":1764400000,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1-abc","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":9,"total_tokens":12},"timings":{"cache_n":0,"prompt_n":9,"predicted_n":3}}"#;
const LLAMA_TIMINGS: &str = r#","timings":{"cache_n":0,"prompt_n":9,"predicted_n":3}"#;

fn llama_stream(ending: &str) -> (String, String) {
    let token = r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"a"}}],"created":1764400000,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1-abc","object":"chat.completion.chunk"}"#;
    let blank = format!("{ending}{ending}");
    let injected =
        format!("{token}{blank}{LLAMA_FINISH}{blank}{LLAMA_USAGE}{blank}data: [DONE]{blank}");
    let finish_with_timings = format!(
        "{}{LLAMA_TIMINGS}}}",
        &LLAMA_FINISH[..LLAMA_FINISH.len() - 1]
    );
    let direct = format!("{token}{blank}{finish_with_timings}{blank}data: [DONE]{blank}");
    (injected, direct)
}

#[test]
fn members_the_usage_chunk_took_go_back_to_the_finish_event() {
    for ending in ["\n", "\r\n"] {
        let (injected, direct) = llama_stream(ending);
        let stream = injected.as_bytes();
        let (whole, _) = strip(&[stream]);
        assert_eq!(
            String::from_utf8_lossy(&whole),
            direct,
            "timings back on the finish chunk, as without include_usage ({ending:?})"
        );
        for split in 0..=stream.len() {
            let (out, _) = strip(&[&stream[..split], &stream[split..]]);
            assert_eq!(
                String::from_utf8_lossy(&out),
                direct,
                "split at {split} ({ending:?})"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(
            String::from_utf8_lossy(&strip(&bytes).0),
            direct,
            "1-byte frames ({ending:?})"
        );
    }
}

#[test]
fn members_the_finish_event_has_are_not_given_twice() {
    // OpenAI-style: both chunks carry `system_fingerprint` and `obfuscation`; nothing moves.
    let finish = r#"data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"system_fingerprint":"fp","obfuscation":"ab"}"#;
    let usage = r#"data: {"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"system_fingerprint":"fp","obfuscation":"xyz"}"#;
    let stream = format!("{finish}\n\n{usage}\n\ndata: [DONE]\n\n");
    let (out, _) = strip(&[stream.as_bytes()]);
    assert_eq!(
        String::from_utf8_lossy(&out),
        format!("{finish}\n\ndata: [DONE]\n\n"),
        "only the usage chunk goes"
    );
}

#[test]
fn a_finish_event_followed_by_another_event_is_released_unchanged() {
    // n = 2: choice 0 finishes, choice 1 streams on; the usage chunk follows choice 1's finish.
    let finish0 = r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    let token1 = r#"data: {"choices":[{"index":1,"delta":{"content":"b"}}]}"#;
    let finish1 = r#"data: {"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}"#;
    let usage =
        r#"data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2},"x_extra":1}"#;
    let frames = [finish0, token1, finish1, usage, "data: [DONE]"].map(|e| format!("{e}\n\n"));
    let mut scanner = Scanner::default();
    let mut stripper = UsageStripper::default();
    let mut seen = Vec::new();
    for frame in &frames {
        let frame_start = scanner.position();
        scanner.feed(frame.as_bytes(), |e| stripper.on_event(role(e.data), &e));
        let out = stripper.process(
            Bytes::from(frame.clone()),
            frame_start,
            scanner.block_start(),
        );
        seen.push(out.map(|b| String::from_utf8_lossy(&b).into_owned()));
    }
    let finish1_extra = format!("{},\"x_extra\":1}}\n\n", &finish1[..finish1.len() - 1]);
    assert_eq!(
        seen,
        vec![
            None,
            Some(format!("{finish0}\n\n{token1}\n\n")),
            None,
            Some(finish1_extra),
            Some("data: [DONE]\n\n".to_owned()),
        ],
        "choice 0's finish waits for the next event only; the extra member goes to the last finish"
    );
    assert_eq!(stripper.finish(), None, "nothing left");
}

#[test]
fn a_held_finish_event_is_released_at_the_end() {
    let finish = format!("{LLAMA_FINISH}\n\n");
    let (out, frames) = strip(&[finish.as_bytes()]);
    assert_eq!(out, finish.as_bytes(), "a backend that sent no usage chunk");
    assert_eq!(frames, 1, "released at the end of the stream");
}

#[test]
fn an_event_shape_the_splice_cannot_handle_is_left_as_it_is() {
    // A field line after the data: the closing brace is not the block's last byte.
    let finish =
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\nid: 7\n\n";
    let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1},\"timings\":{}}\n\n";
    let stream = format!("{finish}{usage}");
    let (out, _) = strip(&[stream.as_bytes()]);
    assert_eq!(
        String::from_utf8_lossy(&out),
        finish,
        "the finish event unchanged, the usage chunk removed"
    );
}
