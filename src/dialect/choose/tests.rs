use super::*;

#[test]
fn routing_table() {
    let cases = [
        ("/v1/chat/completions", Some(Dialect::OpenAiChat)),
        ("/openai/v1/chat/completions/", Some(Dialect::OpenAiChat)),
        ("/v1/completions", Some(Dialect::OpenAiCompletions)),
        ("/v1/responses", Some(Dialect::OpenAiResponses)),
        ("/v1/messages", Some(Dialect::AnthropicMessages)),
        ("/generate_stream", Some(Dialect::Tgi)),
        ("/v2/models/ensemble/generate_stream", Some(Dialect::Triton)),
        (
            "/v2/models/llama/versions/3/generate_stream",
            Some(Dialect::Triton),
        ),
        ("/api/chat", Some(Dialect::OllamaChat)),
        ("/api/generate", Some(Dialect::OllamaGenerate)),
        ("/completion", Some(Dialect::LlamaCpp)),
        ("/v1/audio/speech", Some(Dialect::Unknown)),
        ("/", Some(Dialect::Unknown)),
        ("", Some(Dialect::Unknown)),
        ("/v1/xcompletions", Some(Dialect::Unknown)),
        ("/v1/embeddings", None),
        ("/v1/messages/count_tokens", None),
        ("/tokenize", None),
        ("/api/pull", None),
        ("/api/embed", None),
    ];
    for (path, want) in cases {
        assert_eq!(
            for_request(&Method::POST, path),
            want,
            "POST {path:?} routes to {want:?}"
        );
    }
    for method in [Method::GET, Method::PUT, Method::DELETE, Method::OPTIONS] {
        assert_eq!(
            for_request(&method, "/v1/chat/completions"),
            None,
            "{method} is never metered"
        );
    }
}

#[test]
fn triton_model_names() {
    assert_eq!(
        triton_model("/v2/models/ensemble/generate_stream"),
        Some("ensemble")
    );
    assert_eq!(
        triton_model("/gw/v2/models/m/versions/2/generate_stream"),
        Some("m")
    );
    assert_eq!(
        triton_model("/v2/models//generate_stream"),
        None,
        "empty model"
    );
    assert_eq!(triton_model("/v2/models/m"), None, "no action");
    assert_eq!(
        triton_model("/v2/models/m/a/b/c"),
        None,
        "not the generate shape"
    );
    assert_eq!(
        for_request(&Method::POST, "/v2/models//generate_stream"),
        Some(Dialect::Tgi),
        "a malformed Triton path is read as TGI's route, never a panic"
    );
}

#[test]
fn framing_from_content_type() {
    let cases = [
        ("text/event-stream", Some(StreamFormat::Sse)),
        ("text/event-stream; charset=utf-8", Some(StreamFormat::Sse)),
        (" Text/Event-Stream ;x=y", Some(StreamFormat::Sse)),
        ("application/x-ndjson", Some(StreamFormat::NdJson)),
        (
            "application/jsonl; charset=utf-8",
            Some(StreamFormat::NdJson),
        ),
        ("application/json", None),
        ("text/plain", None),
        ("", None),
    ];
    for (content_type, want) in cases {
        assert_eq!(stream_format(content_type), want, "{content_type:?}");
    }
}
