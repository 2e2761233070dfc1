//! The dialect table as the proxy sees it: request routing, response framing, and the
//! OpenTelemetry GenAI labels each dialect is metered under.
use http::Method;
use tokenmeter::dialect::Dialect;
use tokenmeter::sse::StreamFormat;

#[test]
fn routing_framing_and_labels() {
    // path, dialect, content type it streams with, framing, operation, provider, injects usage
    let table = [
        (
            "/v1/chat/completions",
            Dialect::OpenAiChat,
            "text/event-stream",
            StreamFormat::Sse,
            "chat",
            "openai",
            true,
        ),
        (
            "/v1/completions",
            Dialect::OpenAiCompletions,
            "text/event-stream",
            StreamFormat::Sse,
            "text_completion",
            "openai",
            true,
        ),
        (
            "/v1/responses",
            Dialect::OpenAiResponses,
            "text/event-stream",
            StreamFormat::Sse,
            "chat",
            "openai",
            false,
        ),
        (
            "/v1/messages",
            Dialect::AnthropicMessages,
            "text/event-stream",
            StreamFormat::Sse,
            "chat",
            "anthropic",
            false,
        ),
        (
            "/generate_stream",
            Dialect::Tgi,
            "text/event-stream",
            StreamFormat::Sse,
            "text_completion",
            "tgi",
            false,
        ),
        (
            "/v2/models/llama/generate_stream",
            Dialect::Triton,
            "text/event-stream; charset=utf-8",
            StreamFormat::Sse,
            "text_completion",
            "triton",
            false,
        ),
        (
            "/api/chat",
            Dialect::OllamaChat,
            "application/x-ndjson",
            StreamFormat::NdJson,
            "chat",
            "ollama",
            false,
        ),
        (
            "/api/generate",
            Dialect::OllamaGenerate,
            "application/x-ndjson",
            StreamFormat::NdJson,
            "text_completion",
            "ollama",
            false,
        ),
        (
            "/completion",
            Dialect::LlamaCpp,
            "text/event-stream",
            StreamFormat::Sse,
            "text_completion",
            "llama_cpp",
            false,
        ),
        (
            "/completions",
            Dialect::LlamaCpp,
            "text/event-stream",
            StreamFormat::Sse,
            "text_completion",
            "llama_cpp",
            false,
        ),
        (
            "/chat/completions",
            Dialect::OpenAiChat,
            "text/event-stream",
            StreamFormat::Sse,
            "chat",
            "openai",
            true,
        ),
        (
            "/openai/v1/chat/completions",
            Dialect::OpenAiChat,
            "text/event-stream",
            StreamFormat::Sse,
            "chat",
            "openai",
            true,
        ),
        (
            "/v1/chat/completion",
            Dialect::Unknown,
            "text/event-stream",
            StreamFormat::Sse,
            "_OTHER",
            "_OTHER",
            false,
        ),
        (
            "/v1/audio/speech",
            Dialect::Unknown,
            "text/event-stream",
            StreamFormat::Sse,
            "_OTHER",
            "_OTHER",
            false,
        ),
    ];
    for (path, dialect, content_type, framing, operation, provider, injects) in table {
        assert_eq!(
            Dialect::for_request(&Method::POST, path),
            Some(dialect),
            "POST {path} speaks {dialect:?}"
        );
        assert_eq!(
            dialect.stream_format(Some(content_type)),
            Some(framing),
            "{path}: {content_type}"
        );
        assert_eq!(
            dialect.stream_format(Some("application/json")),
            None,
            "{path}: a JSON body (an error, or stream: false) is not a stream"
        );
        assert_eq!(
            dialect.stream_format(None),
            None,
            "{path}: no content type, no stream"
        );
        assert_eq!(
            dialect.operation(),
            operation,
            "{path}: gen_ai.operation.name"
        );
        assert_eq!(dialect.provider(), provider, "{path}: gen_ai.provider.name");
        assert_eq!(
            dialect.injects_usage(),
            injects,
            "{path}: include_usage injection"
        );
    }
}

#[test]
fn one_spelling_of_other_for_unknown_apis_and_passthrough() {
    use tokenmeter::dialect::Operation;
    let unknown = Operation::of(Dialect::Unknown);
    assert_eq!(
        (unknown.as_str(), unknown.provider()),
        ("_OTHER", "_OTHER"),
        "an unknown POST"
    );
    let passthrough = Operation::of_request(Dialect::for_request(&Method::GET, "/v1/models"));
    assert_eq!(
        passthrough, unknown,
        "a path that is no generation has the same labels"
    );
}

#[test]
fn not_generation_endpoints_are_not_metered() {
    for (method, path) in [
        (Method::GET, "/v1/models"),
        (Method::GET, "/health"),
        (Method::GET, "/v1/responses/resp_123"),
        (Method::POST, "/v1/embeddings"),
        (Method::POST, "/v1/messages/count_tokens"),
        (Method::POST, "/api/pull"),
        (Method::POST, "/api/embeddings"),
        (Method::POST, "/tokenize"),
    ] {
        assert_eq!(
            Dialect::for_request(&method, path),
            None,
            "{method} {path} is not metered"
        );
    }
}

#[test]
fn the_model_comes_from_the_path_only_for_triton() {
    let triton = Dialect::Triton;
    assert_eq!(
        triton.model_from_path("/v2/models/ensemble/generate_stream"),
        Some("ensemble"),
        "plain"
    );
    assert_eq!(
        triton.model_from_path("/v2/models/llama-3-8b/versions/2/generate_stream"),
        Some("llama-3-8b"),
        "versioned"
    );
    assert_eq!(
        triton.model_from_path("/generate_stream"),
        None,
        "no model in the path"
    );
    assert_eq!(
        Dialect::Tgi.model_from_path("/v2/models/x/generate_stream"),
        None,
        "other dialects name the model in the body"
    );
}

#[test]
fn odd_paths_never_panic() {
    for path in [
        "",
        "/",
        "//",
        "/v2/models/",
        "/v2/models//",
        "/api/",
        "\u{1F600}/completion",
        "/v1/chat/completions/",
    ] {
        let dialect = Dialect::for_request(&Method::POST, path);
        if let Some(dialect) = dialect {
            let _ = dialect.model_from_path(path);
        }
    }
    assert_eq!(
        Dialect::for_request(&Method::POST, "/v1/chat/completions/"),
        Some(Dialect::OpenAiChat),
        "a trailing slash is ignored"
    );
}
