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
mod tests;
