//! Every dialect's recorded-shape fixture (`tests/fixtures/dialects/`), metered the way the body
//! meters a stream: routed by path and content type, framed by [`Framer`], classified by
//! [`Dialect::classify`]. Whole, split at every byte, and one event per frame with stamped
//! arrivals (TTFT / ITL / TPOT).
use std::time::Duration;

use http::Method;
use proptest::prelude::*;
use tokenmeter::dialect::Dialect;
use tokenmeter::sse::{Framer, StreamFormat};

const MAX_LINE: usize = 1 << 20;

/// A fixture, the request path and response content type it is served with, and the dialect
/// that must be chosen for it.
struct Case {
    name: &'static str,
    path: &'static str,
    content_type: &'static str,
    dialect: Dialect,
}

const CASES: &[Case] = &[
    Case {
        name: "openai-responses",
        path: "/v1/responses",
        content_type: "text/event-stream; charset=utf-8",
        dialect: Dialect::OpenAiResponses,
    },
    Case {
        name: "openai-responses-reasoning-tools",
        path: "/v1/responses",
        content_type: "text/event-stream",
        dialect: Dialect::OpenAiResponses,
    },
    Case {
        name: "openai-responses-failed",
        path: "/v1/responses",
        content_type: "text/event-stream",
        dialect: Dialect::OpenAiResponses,
    },
    Case {
        name: "anthropic-messages",
        path: "/v1/messages",
        content_type: "text/event-stream; charset=utf-8",
        dialect: Dialect::AnthropicMessages,
    },
    Case {
        name: "anthropic-messages-error",
        path: "/v1/messages",
        content_type: "text/event-stream",
        dialect: Dialect::AnthropicMessages,
    },
    Case {
        name: "tgi",
        path: "/generate_stream",
        content_type: "text/event-stream",
        dialect: Dialect::Tgi,
    },
    Case {
        name: "triton",
        path: "/v2/models/ensemble/generate_stream",
        content_type: "text/event-stream; charset=utf-8",
        dialect: Dialect::Triton,
    },
    Case {
        name: "ollama-chat",
        path: "/api/chat",
        content_type: "application/x-ndjson",
        dialect: Dialect::OllamaChat,
    },
    Case {
        name: "ollama-generate",
        path: "/api/generate",
        content_type: "application/x-ndjson",
        dialect: Dialect::OllamaGenerate,
    },
    Case {
        name: "llamacpp-completion",
        path: "/completion",
        content_type: "text/event-stream",
        dialect: Dialect::LlamaCpp,
    },
];

fn fixture_dir() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dialects").to_owned()
}

fn stream_of(case: &Case) -> Vec<u8> {
    let dir = fixture_dir();
    ["sse", "ndjson"]
        .iter()
        .find_map(|ext| std::fs::read(format!("{dir}/{}.{ext}", case.name)).ok())
        .unwrap_or_else(|| panic!("fixture {} missing", case.name))
}

fn expected_of(case: &Case) -> serde_json::Value {
    let path = format!("{}/{}.expected.json", fixture_dir(), case.name);
    let text = std::fs::read_to_string(&path).expect("expected.json readable");
    serde_json::from_str(&text).expect("expected.json is JSON")
}

/// What metering one stream gives, in the shape of `NAME.expected.json` (plus offsets).
#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    events: u64,
    token_events: u64,
    /// Stream offset where each token event ended (what its arrival stamp depends on).
    token_ends: Vec<u64>,
    /// The last known value of each usage field (the meter's rule).
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    error_events: u64,
    done_events: u64,
    /// Sum of per-event token counts, `None` when no event said.
    event_tokens: Option<u64>,
    overflows: u64,
}

/// The dialect and framing the request and response choose.
fn route(case: &Case) -> (Dialect, StreamFormat) {
    let dialect = Dialect::for_request(&Method::POST, case.path).expect("a generation endpoint");
    assert_eq!(
        dialect, case.dialect,
        "{}: {} routes to its dialect",
        case.name, case.path
    );
    let framing = dialect
        .stream_format(Some(case.content_type))
        .expect("the content type is a stream");
    (dialect, framing)
}

/// Meters `frames` as one stream; `on_token(frame index)` sees each token event's arrival.
fn meter(
    dialect: Dialect,
    framing: StreamFormat,
    frames: &[&[u8]],
    mut on_token: impl FnMut(usize),
) -> Totals {
    let mut framer = Framer::new(framing, MAX_LINE);
    let mut totals = Totals::default();
    let mut count = |totals: &mut Totals, at: usize, event: tokenmeter::sse::FramedEvent<'_>| {
        let summary = dialect.classify(event.event, event.data);
        totals.events += 1;
        if summary.token {
            totals.token_events += 1;
            totals.token_ends.push(event.end);
            on_token(at);
        }
        if let Some(usage) = summary.usage {
            totals.prompt_tokens = usage.prompt_tokens.or(totals.prompt_tokens);
            totals.completion_tokens = usage.completion_tokens.or(totals.completion_tokens);
        }
        if let Some(tokens) = summary.tokens {
            totals.event_tokens = Some(totals.event_tokens.unwrap_or(0) + tokens);
        }
        totals.error_events += u64::from(summary.error);
        totals.done_events += u64::from(summary.done);
    };
    for (at, frame) in frames.iter().enumerate() {
        framer.feed(frame, |event| count(&mut totals, at, event));
    }
    framer.finish(|event| count(&mut totals, frames.len(), event));
    totals.overflows = framer.overflows();
    totals
}

fn opt(expected: &serde_json::Value, field: &str) -> Option<u64> {
    expected.get(field).and_then(serde_json::Value::as_u64)
}

#[test]
fn each_fixture_gives_its_expected_counts() {
    for case in CASES {
        let (dialect, framing) = route(case);
        let stream = stream_of(case);
        let want = expected_of(case);
        let got = meter(dialect, framing, &[&stream], |_| {});
        let name = case.name;
        assert_eq!(
            got.events,
            opt(&want, "events").unwrap_or(0),
            "{name}: events"
        );
        assert_eq!(
            got.token_events,
            opt(&want, "token_events").unwrap_or(0),
            "{name}: token events"
        );
        assert_eq!(
            got.prompt_tokens,
            opt(&want, "prompt_tokens"),
            "{name}: prompt tokens"
        );
        assert_eq!(
            got.completion_tokens,
            opt(&want, "completion_tokens"),
            "{name}: completion tokens"
        );
        assert_eq!(
            got.error_events,
            opt(&want, "error_events").unwrap_or(0),
            "{name}: errors"
        );
        assert_eq!(
            got.done_events,
            opt(&want, "done_events").unwrap_or(0),
            "{name}: end markers"
        );
        assert_eq!(
            got.event_tokens,
            opt(&want, "event_tokens"),
            "{name}: per-event token counts"
        );
        assert_eq!(got.overflows, 0, "{name}: nothing overflows");
    }
}

#[test]
fn each_fixture_split_at_every_byte_meters_the_same() {
    for case in CASES {
        let (dialect, framing) = route(case);
        let stream = stream_of(case);
        let whole = meter(dialect, framing, &[&stream], |_| {});
        for cut in 0..=stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(
                meter(dialect, framing, &[a, b], |_| {}),
                whole,
                "{}: split at byte {cut}",
                case.name
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(
            meter(dialect, framing, &bytes, |_| {}),
            whole,
            "{}: one byte per frame",
            case.name
        );
    }
}

/// The upstream sends one event per frame, frame `i` arriving `10 ms * (i + 1)` after the
/// request: the token events' stamps give TTFT, every ITL gap and TPOT exactly.
#[test]
fn ttft_itl_and_tpot_stamps_one_event_per_frame() {
    const TICK: Duration = Duration::from_millis(10);
    for case in CASES {
        let (dialect, framing) = route(case);
        let stream = stream_of(case);
        let want = expected_of(case);
        // Cut the stream just after each event, as a server writes them.
        let mut ends = Vec::new();
        let mut framer = Framer::new(framing, MAX_LINE);
        framer.feed(&stream, |event| ends.push(event.end as usize));
        let mut frames = Vec::new();
        let mut from = 0;
        for end in ends {
            frames.push(&stream[from..end]);
            from = end;
        }
        frames.push(&stream[from..]);
        let mut stamps = Vec::new();
        let totals = meter(dialect, framing, &frames, |at| {
            stamps.push(TICK * (at as u32 + 1))
        });
        let indexes: Vec<u32> = want["token_event_indexes"]
            .as_array()
            .expect("token_event_indexes")
            .iter()
            .map(|v| v.as_u64().expect("index") as u32)
            .collect();
        let name = case.name;
        let ttft = stamps.first().copied().expect("a first token");
        assert_eq!(
            ttft,
            TICK * (indexes[0] + 1),
            "{name}: TTFT is the first token event's arrival"
        );
        let itl: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
        let want_itl: Vec<Duration> = indexes.windows(2).map(|w| TICK * (w[1] - w[0])).collect();
        assert_eq!(
            itl, want_itl,
            "{name}: one ITL per gap between token events"
        );
        let n_out = totals.completion_tokens.unwrap_or(totals.token_events);
        let span = stamps[stamps.len() - 1] - ttft;
        let tpot = span / (n_out as u32 - 1);
        let want_tpot = TICK * (indexes[indexes.len() - 1] - indexes[0]) / (n_out as u32 - 1);
        assert_eq!(tpot, want_tpot, "{name}: TPOT over N_out = {n_out}");
    }
}

#[test]
fn the_wrong_dialect_or_unknown_never_fails() {
    for case in CASES {
        let (_, framing) = route(case);
        let stream = stream_of(case);
        let unknown = meter(Dialect::Unknown, framing, &[&stream], |_| {});
        assert_eq!(
            (
                unknown.token_events,
                unknown.prompt_tokens,
                unknown.error_events
            ),
            (0, None, 0),
            "{}: an unknown endpoint meters TTFB / E2E only",
            case.name
        );
        assert_eq!(
            unknown.events,
            expected_of(case)["events"].as_u64().expect("events"),
            "{}: the unknown dialect still frames every event",
            case.name
        );
        for dialect in Dialect::ALL {
            for framing in [StreamFormat::Sse, StreamFormat::NdJson] {
                // Must not panic; what it finds in a foreign stream does not matter.
                let _ = meter(dialect, framing, &[&stream], |_| {});
            }
        }
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 0..8),
        framing in prop::sample::select(vec![StreamFormat::Sse, StreamFormat::NdJson]),
        dialect in prop::sample::select(vec![
            Dialect::OpenAiChat, Dialect::OpenAiResponses, Dialect::AnthropicMessages, Dialect::Tgi,
            Dialect::Triton, Dialect::OllamaChat, Dialect::OllamaGenerate, Dialect::LlamaCpp, Dialect::Unknown,
        ]),
    ) {
        let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let total: usize = frames.iter().map(|f| f.len()).sum();
        let got = meter(dialect, framing, &frames, |_| {});
        prop_assert!(got.token_events <= got.events, "tokens are events");
        prop_assert!(got.token_ends.iter().all(|&end| end <= total as u64), "offsets in the stream");
    }

    #[test]
    fn classifiers_survive_json_like_noise(
        data in "[{}\\[\\]\",:a-z0-9 .\\-]{0,80}",
        event in "[a-z_.]{0,24}",
    ) {
        for dialect in [
            Dialect::OpenAiChat, Dialect::OpenAiResponses, Dialect::AnthropicMessages, Dialect::Tgi,
            Dialect::Triton, Dialect::OllamaChat, Dialect::OllamaGenerate, Dialect::LlamaCpp, Dialect::Unknown,
        ] {
            let summary = dialect.classify(event.as_bytes(), data.as_bytes());
            prop_assert!(!(summary.usage_only && dialect != Dialect::OpenAiChat), "usage_only is OpenAI's");
        }
    }
}
