use super::*;

/// POST `path` routes to `want`, with the reason in the message.
fn routes(cases: &[(&str, Option<Dialect>, &str)]) {
    for &(path, want, why) in cases {
        assert_eq!(
            for_request(&Method::POST, path),
            want,
            "POST {path:?} routes to {want:?}: {why}"
        );
    }
}

#[test]
fn every_documented_path_of_every_dialect() {
    routes(&[
        (
            "/v1/chat/completions",
            Some(Dialect::OpenAiChat),
            "OpenAI chat",
        ),
        (
            "/chat/completions",
            Some(Dialect::OpenAiChat),
            "llama.cpp's unversioned chat route",
        ),
        (
            "/v1/completions",
            Some(Dialect::OpenAiCompletions),
            "OpenAI completions",
        ),
        (
            "/v1/responses",
            Some(Dialect::OpenAiResponses),
            "OpenAI Responses",
        ),
        (
            "/v1/messages",
            Some(Dialect::AnthropicMessages),
            "Anthropic Messages",
        ),
        ("/generate_stream", Some(Dialect::Tgi), "TGI"),
        (
            "/v2/models/ensemble/generate_stream",
            Some(Dialect::Triton),
            "Triton",
        ),
        (
            "/v2/models/llama/versions/3/generate_stream",
            Some(Dialect::Triton),
            "Triton, versioned",
        ),
        ("/api/chat", Some(Dialect::OllamaChat), "Ollama chat"),
        (
            "/api/generate",
            Some(Dialect::OllamaGenerate),
            "Ollama generate",
        ),
        ("/completion", Some(Dialect::LlamaCpp), "llama.cpp"),
        (
            "/completions",
            Some(Dialect::LlamaCpp),
            "llama.cpp's legacy alias, its native format",
        ),
    ]);
    // Every generation path llama-server serves, as it serves them.
    routes(&[
        ("/completion", Some(Dialect::LlamaCpp), "native"),
        ("/completions", Some(Dialect::LlamaCpp), "native, legacy"),
        (
            "/v1/completions",
            Some(Dialect::OpenAiCompletions),
            "its OpenAI completions",
        ),
        (
            "/chat/completions",
            Some(Dialect::OpenAiChat),
            "its OpenAI chat",
        ),
        (
            "/v1/chat/completions",
            Some(Dialect::OpenAiChat),
            "its OpenAI chat",
        ),
    ]);
}

#[test]
fn a_path_that_only_ends_like_an_api_is_not_that_api() {
    routes(&[
        (
            "/v1/chat/completion",
            Some(Dialect::Unknown),
            "the typo is not llama.cpp's /completion",
        ),
        (
            "/v1/chat/completions2",
            Some(Dialect::Unknown),
            "a longer last segment",
        ),
        (
            "/v1/caht/completions",
            Some(Dialect::Unknown),
            "a typo before /completions",
        ),
        (
            "/v1/chat/completions/x",
            Some(Dialect::Unknown),
            "a segment after the API",
        ),
        (
            "/v1/xcompletions",
            Some(Dialect::Unknown),
            "part of a segment",
        ),
        (
            "/v1/threads/t1/messages",
            Some(Dialect::Unknown),
            "OpenAI Assistants, not Anthropic",
        ),
        (
            "/v1/responses/resp_1/cancel",
            Some(Dialect::Unknown),
            "a Responses sub-route",
        ),
        (
            "/llama/completion",
            Some(Dialect::Unknown),
            "a native path behind a prefix",
        ),
        (
            "/tgi/generate_stream",
            Some(Dialect::Unknown),
            "a native path behind a prefix",
        ),
        (
            "/gw/v2/models/m/generate_stream",
            Some(Dialect::Unknown),
            "Triton behind a prefix",
        ),
        (
            "/v2/models//generate_stream",
            Some(Dialect::Unknown),
            "Triton without a model",
        ),
        (
            "/openai/completions",
            Some(Dialect::Unknown),
            "completions without /v1 under a prefix",
        ),
        (
            "/v1/Chat/Completions",
            Some(Dialect::Unknown),
            "paths are case-sensitive",
        ),
        ("/v1/audio/speech", Some(Dialect::Unknown), "another API"),
        ("/", Some(Dialect::Unknown), "the root"),
        ("", Some(Dialect::Unknown), "empty"),
    ]);
}

#[test]
fn a_base_url_prefix_is_kept_where_clients_put_one() {
    routes(&[
        (
            "/openai/v1/chat/completions",
            Some(Dialect::OpenAiChat),
            "a gateway's base URL",
        ),
        (
            "/openai/v1/chat/completions/",
            Some(Dialect::OpenAiChat),
            "a trailing slash ignored",
        ),
        (
            "/api/v1/chat/completions",
            Some(Dialect::OpenAiChat),
            "OpenRouter's base URL",
        ),
        (
            "/openai/deployments/gpt/chat/completions",
            Some(Dialect::OpenAiChat),
            "an Azure deployment",
        ),
        (
            "/openai/v1/completions",
            Some(Dialect::OpenAiCompletions),
            "completions under /v1",
        ),
        (
            "/openai/v1/responses",
            Some(Dialect::OpenAiResponses),
            "Responses under /v1",
        ),
        (
            "/anthropic/v1/messages",
            Some(Dialect::AnthropicMessages),
            "Messages under /v1",
        ),
        (
            "/xv1/completions",
            Some(Dialect::Unknown),
            "the prefix ends where /v1 starts",
        ),
    ]);
}

#[test]
fn what_is_not_a_generation_is_not_metered() {
    routes(&[
        ("/v1/embeddings", None, "embeddings"),
        ("/v1/messages/count_tokens", None, "counting tokens"),
        ("/tokenize", None, "tokenizing"),
        ("/api/pull", None, "Ollama's model management"),
        ("/api/embed", None, "Ollama's embeddings"),
    ]);
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
        triton_model("/v2/models/m/versions/2/generate_stream"),
        Some("m")
    );
    assert_eq!(
        triton_model("/gw/v2/models/m/versions/2/generate_stream"),
        None,
        "from the root only"
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
        Some(Dialect::Unknown),
        "a malformed Triton path is timed only, never a panic"
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
