//! Choosing a dialect from the request path, and a stream format from the response content type.
//!
//! Paths are matched on whole trailing segments, so a gateway prefix (`/openai/v1/...`) does not
//! hide the endpoint and `/v1/xcompletions` is not `/completions`.

use http::Method;

use super::Dialect;
use crate::sse::StreamFormat;

/// Last path segments of POST routes that are not generation (their responses, streamed or not,
/// are not token streams).
const NOT_GENERATION: &[&str] = &[
    "embeddings",
    "embed",
    "tokenize",
    "detokenize",
    "count_tokens",
    "rerank",
    "score",
    "classify",
    "pooling",
    "moderations",
];

/// See [`Dialect::for_request`].
pub(super) fn for_request(method: &Method, path: &str) -> Option<Dialect> {
    if method != Method::POST {
        return None;
    }
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.ends_with("/generate_stream") && triton_model(path).is_some() {
        return Some(Dialect::Triton);
    }
    let dialect = if path.ends_with("/chat/completions") {
        Dialect::OpenAiChat
    } else if path.ends_with("/completions") {
        Dialect::OpenAiCompletions
    } else if path.ends_with("/responses") {
        Dialect::OpenAiResponses
    } else if path.ends_with("/messages") {
        Dialect::AnthropicMessages
    } else if path.ends_with("/api/chat") {
        Dialect::OllamaChat
    } else if path.ends_with("/api/generate") {
        Dialect::OllamaGenerate
    } else if path.contains("/api/") {
        // Ollama's model management (`/api/pull`, `/api/create`, ...) streams progress.
        return None;
    } else if path.ends_with("/generate_stream") {
        Dialect::Tgi
    } else if path.ends_with("/completion") {
        Dialect::LlamaCpp
    } else {
        let last = path.rsplit('/').next().unwrap_or_default();
        if NOT_GENERATION.contains(&last) {
            return None;
        }
        Dialect::Unknown
    };
    Some(dialect)
}

/// The model of `…/v2/models/<model>[/versions/<v>]/<action>`.
pub(super) fn triton_model(path: &str) -> Option<&str> {
    const MODELS: &str = "/v2/models/";
    let at = path.find(MODELS)?;
    let rest = &path[at + MODELS.len()..];
    let (model, tail) = rest.split_once('/')?;
    let tail = tail.strip_suffix('/').unwrap_or(tail);
    let shaped = match tail.split_once('/') {
        None => !tail.is_empty(),
        Some(("versions", versioned)) => versioned.split_once('/').is_some_and(|(v, action)| {
            !v.is_empty() && !action.is_empty() && !action.contains('/')
        }),
        Some(_) => false,
    };
    (!model.is_empty() && shaped).then_some(model)
}

/// The media type of a `content-type` value: its parameters (`; charset=utf-8`) and surrounding
/// spaces removed (compare it case-insensitively).
pub fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or_default().trim()
}

/// See [`Dialect::stream_format`].
pub(super) fn stream_format(content_type: &str) -> Option<StreamFormat> {
    let media = media_type(content_type);
    let is = |name: &str| media.eq_ignore_ascii_case(name);
    if is("text/event-stream") {
        Some(StreamFormat::Sse)
    } else if is("application/x-ndjson")
        || is("application/ndjson")
        || is("application/jsonl")
        || is("application/x-jsonlines")
        || is("application/jsonlines")
    {
        Some(StreamFormat::NdJson)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
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
}
