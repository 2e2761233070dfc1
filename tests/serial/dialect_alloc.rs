//! The classifiers run once per streamed event on the proxy's hot path: classifying a token
//! event must not allocate, and no event may cost more than the one scratch buffer serde_json
//! grows to skip a value nested two levels deep (the lifecycle events of Responses and Anthropic
//! carry whole response objects). (Its own test binary: the counting allocator is global; it
//! counts the test's own thread.)

use crate::alloc_support;
use http::Method;
use tokenmeter::dialect::Dialect;
use tokenmeter::sse::Framer;

use alloc_support::allocations;

#[test]
fn classifying_token_events_does_not_allocate() {
    let _alone = crate::alone_blocking();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dialects");
    let cases = [
        ("openai-responses.sse", "/v1/responses"),
        ("openai-responses-reasoning-tools.sse", "/v1/responses"),
        ("openai-responses-failed.sse", "/v1/responses"),
        ("anthropic-messages.sse", "/v1/messages"),
        ("anthropic-messages-error.sse", "/v1/messages"),
        ("tgi.sse", "/generate_stream"),
        ("triton.sse", "/v2/models/ensemble/generate_stream"),
        ("ollama-chat.ndjson", "/api/chat"),
        ("ollama-generate.ndjson", "/api/generate"),
        ("llamacpp-completion.sse", "/completion"),
    ];
    for (file, path) in cases {
        let stream = std::fs::read(format!("{dir}/{file}")).expect("fixture");
        let dialect = Dialect::for_request(&Method::POST, path).expect("a generation endpoint");
        let content_type = if file.ends_with(".ndjson") {
            "application/x-ndjson"
        } else {
            "text/event-stream"
        };
        let framing = dialect.stream_format(Some(content_type)).expect("a stream");
        // Collect the events first: framing a whole stream in one frame borrows, but the test
        // must only count what classification does.
        let mut events: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        Framer::new(framing, 1 << 20).feed(&stream, |e| {
            events.push((e.event.to_vec(), e.data.to_vec()))
        });
        let mut tokens = 0;
        for (i, (event, data)) in events.iter().enumerate() {
            let before = allocations();
            let token = dialect.classify(event, data).token;
            let allocations = allocations() - before;
            if token {
                tokens += 1;
                assert_eq!(
                    allocations, 0,
                    "{file}: token event {i} classified without allocating"
                );
            } else {
                assert!(
                    allocations <= 1,
                    "{file}: event {i} made {allocations} allocations"
                );
            }
        }
        assert!(tokens > 0, "{file}: token events were classified");
    }
}
