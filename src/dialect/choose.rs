//! Choosing a dialect from the request path, and a stream format from the response content type.
//!
//! **An API is metered only on its own path** (POST; one trailing `/` ignored; case-sensitive):
//!
//! | path | dialect | a prefix before it |
//! |---|---|---|
//! | `…/chat/completions` | OpenAI chat | any: a base URL (`/openai/v1`, OpenRouter's `/api/v1`, an Azure deployment), llama.cpp's unversioned `/chat/completions` |
//! | `…/v1/completions`, `…/v1/responses`, `…/v1/messages` | OpenAI completions, Responses, Anthropic Messages | any, ending where `/v1` starts |
//! | `/completion`, `/completions` | llama.cpp (its native format) | none |
//! | `/generate_stream` | TGI | none |
//! | `/api/chat`, `/api/generate` | Ollama | none |
//! | `/v2/models/<m>[/versions/<v>]/generate_stream` | Triton | none |
//!
//! Any other POST is [`Dialect::Unknown`] (timed, never refused, labelled `_OTHER`), or not a
//! generation at all (`None`: Ollama's other `/api/*` routes, and a last segment that names a
//! non-generation operation such as `embeddings`).
//!
//! Why whole paths and not suffixes: a path that merely *ends* like an API is not that API. The
//! typo `/v1/chat/completion` ends in llama.cpp's `/completion`, OpenAI Assistants'
//! `/v1/threads/<id>/messages` in Anthropic's `/messages`, `/v1/caht/completions` in
//! `/completions`: matched by suffix, each was metered under another API's labels (and its
//! request read and refused by that API's rules). So a prefix is allowed only where clients
//! really put one, before a tail that names the API unambiguously: the OpenAI and Anthropic SDKs
//! append `/chat/completions`, `/completions`, `/responses`, `/messages` to whatever base URL a
//! gateway mounts them under, and `chat/completions` (two segments) or `v1/` plus the resource
//! says which API it is. The native servers serve their one-word paths at the root, where they
//! are matched whole; behind a prefix (llama.cpp's `--api-prefix`, a gateway's `/llama/...`)
//! they are `Unknown`, timed only.
//!
//! `/completions` without `/v1` is llama.cpp's legacy alias of `/completion` (its server routes
//! it to the native handler; `/v1/completions` is its OpenAI one), so it is llama.cpp's dialect;
//! no OpenAI-compatible engine serves completions there (vLLM, SGLang, TGI and Ollama serve
//! `/v1/completions`).
//!
//! [`Dialect::for_request`], [`Dialect::stream_format`] and [`Dialect::model_from_path`] are
//! defined here, with the rules they apply: choosing a dialect depends on the dialects
//! (`mod.rs`), and the dialects, which only say what each API's events mean, need nothing of the
//! choosing.

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

/// The APIs clients reach under a base URL: the tail, after any prefix.
const UNDER_A_BASE_URL: [(&str, Dialect); 4] = [
    ("/chat/completions", Dialect::OpenAiChat),
    ("/v1/completions", Dialect::OpenAiCompletions),
    ("/v1/responses", Dialect::OpenAiResponses),
    ("/v1/messages", Dialect::AnthropicMessages),
];

/// The native APIs: the whole path (Triton's, which names a model, is [`triton_model`]'s).
const AT_THE_ROOT: [(&str, Dialect); 5] = [
    ("/completion", Dialect::LlamaCpp),
    ("/completions", Dialect::LlamaCpp),
    ("/generate_stream", Dialect::Tgi),
    ("/api/chat", Dialect::OllamaChat),
    ("/api/generate", Dialect::OllamaGenerate),
];

impl Dialect {
    /// From the request: POST paths `…/chat/completions`, `…/v1/completions`, `…/v1/responses`,
    /// `…/v1/messages` (after any gateway prefix), and, matched whole, `/completion`,
    /// `/completions`, `/generate_stream`, `/v2/models/<m>[/versions/<v>]/generate_stream`,
    /// `/api/chat`, `/api/generate` (a trailing `/` ignored; the rule and why: the module docs); any
    /// other POST is [`Dialect::Unknown`]. `None` = not a generation endpoint (proxied, not
    /// metered): every other method, Ollama's other `/api/*` routes (model pulls stream NDJSON
    /// progress, which is not generation), and POSTs whose last path segment names a
    /// non-generation operation (`embeddings`, `tokenize`, `count_tokens`, ...).
    pub fn for_request(method: &Method, path: &str) -> Option<Dialect> {
        for_request(method, path)
    }

    /// How the response body is framed into events, from the response content type:
    /// `text/event-stream` is SSE, `application/x-ndjson` (and its `ndjson` / `jsonl`
    /// spellings) is NDJSON, whatever the dialect (a server answering in the other framing still
    /// gets TTFB and E2E metered, its events just carry no tokens this dialect recognises).
    /// `None` when the body is not a stream (a JSON error body, a non-streaming response, no
    /// content type).
    pub fn stream_format(self, content_type: Option<&str>) -> Option<StreamFormat> {
        stream_format(content_type?)
    }

    /// The model named by the path (Triton: `/v2/models/<model>/...`), if any.
    pub fn model_from_path(self, path: &str) -> Option<&str> {
        match self {
            Dialect::Triton => triton_model(path),
            _ => None,
        }
    }
}

/// See [`Dialect::for_request`] and the module docs.
pub(super) fn for_request(method: &Method, path: &str) -> Option<Dialect> {
    if method != Method::POST {
        return None;
    }
    let path = path.strip_suffix('/').unwrap_or(path);
    let known = UNDER_A_BASE_URL
        .iter()
        .find(|(tail, _)| path.ends_with(tail))
        .or_else(|| AT_THE_ROOT.iter().find(|(whole, _)| path == *whole))
        .map(|&(_, dialect)| dialect);
    if let Some(dialect) = known {
        return Some(dialect);
    }
    if path.ends_with("/generate_stream") && triton_model(path).is_some() {
        return Some(Dialect::Triton);
    }
    if path.contains("/api/") {
        // Ollama's model management (`/api/pull`, `/api/create`, ...) streams progress.
        return None;
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    if NOT_GENERATION.contains(&last) {
        return None;
    }
    Some(Dialect::Unknown)
}

/// The model of `/v2/models/<model>[/versions/<v>]/<action>` (from the root, as Triton serves it).
pub(super) fn triton_model(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v2/models/")?;
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
