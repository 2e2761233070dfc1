//! Stream dialects: which API a metered stream speaks, how its body is framed into events, and
//! what counts as a token event in each (REFERENCE.md §1, §4).
//!
//! The metering body has one code path for every dialect: [`Dialect::for_request`] picks the
//! dialect from the request (method + path), [`Dialect::stream_format`] confirms from the response's
//! content type that the body is a stream and how it is framed, a [`Framer`] cuts the frames into
//! events, and [`Dialect::classify`] says what each event means ([`EventSummary`]): whether it is
//! a token event (its arrival is stamped for TTFT / ITL), how many tokens it carries when the
//! dialect says so, what cumulative usage it reports, and whether it is an error or the end.
//!
//! | dialect | path (POST) | framing | token event | usage |
//! |---|---|---|---|---|
//! | [`Dialect::OpenAiChat`] | `…/chat/completions` | SSE | delta with content / reasoning / tool calls | `usage` (injected `include_usage`) |
//! | [`Dialect::OpenAiCompletions`] | `…/v1/completions` | SSE | choice with non-empty `text` | `usage` (injected) |
//! | [`Dialect::OpenAiResponses`] | `…/v1/responses` | SSE | `response.*.delta` of text, refusal, reasoning, tool args | `response.usage` of `response.completed` / `incomplete` / `failed` |
//! | [`Dialect::AnthropicMessages`] | `…/v1/messages` | SSE | `content_block_delta` with text / thinking / input JSON | input: `message_start`; output: `message_delta` (cumulative) |
//! | [`Dialect::Tgi`] | `/generate_stream` | SSE | non-`special` `token` (1 token each) | `details.generated_tokens`, `details.input_length` |
//! | [`Dialect::Triton`] | `/v2/models/<m>[/versions/<v>]/generate_stream` | SSE | non-empty `text_output` | none: token events are counted |
//! | [`Dialect::OllamaChat`], [`Dialect::OllamaGenerate`] | `/api/chat`, `/api/generate` | NDJSON | line with content / response / thinking / tool calls (1 token each) | `prompt_eval_count`, `eval_count` of the `done` line |
//! | [`Dialect::LlamaCpp`] | `/completion`, `/completions` | SSE | non-empty `content` | `tokens_predicted`, `tokens_evaluated` |
//! | [`Dialect::Unknown`] | any other POST | SSE or NDJSON | none: TTFB and E2E only | none |
//!
//! `…` is any prefix (a gateway's base URL); the other paths are matched whole, so a path that
//! only ends like an API (the typo `/v1/chat/completion`) is not that API (`choose.rs` says why).
//!
//! A non-streaming answer (`"stream": false`: one `application/json` body) has no events; its
//! usage is read once the body is whole, by [`Dialect::body_usage`] with each API's own field
//! names (OpenAI `usage.prompt_tokens` / `completion_tokens`, Responses and Anthropic
//! `usage.input_tokens` / `output_tokens`, Ollama `prompt_eval_count` / `eval_count`, llama.cpp
//! `tokens_evaluated` / `tokens_predicted`); see [`crate::meter::whole`].
//!
//! Every classifier is allocation-free on ordinary events and never panics on any bytes: input
//! that is not the expected JSON means "nothing here" ([`EventSummary::default()`]).
//!
//! This file holds the enum and what each dialect does with its events, handing them to each
//! API's file; choosing a dialect (from the path, and the framing from the content type) is
//! `choose.rs`'s, methods included, as it uses the enum and the enum needs none of it.

pub mod anthropic;
mod choose;
mod event;
pub mod llamacpp;
pub mod ollama;
pub mod openai;
mod operation;
mod output;
pub mod responses;
pub(crate) mod skim;
pub mod tgi;
pub mod triton;
mod typed;
pub(crate) mod walk;

pub use choose::media_type;
pub use event::{EventSummary, Usage};
pub use operation::Operation;

/// Which API a stream speaks; chosen per request from method + path (+ response content type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions, as vLLM, SGLang, TGI, llama.cpp and Ollama's `/v1` serve it.
    OpenAiChat,
    /// OpenAI (legacy) text completions.
    OpenAiCompletions,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Anthropic Messages.
    AnthropicMessages,
    /// Hugging Face TGI's native `/generate_stream`.
    Tgi,
    /// NVIDIA Triton's generate extension.
    Triton,
    /// Ollama's native `/api/chat` (NDJSON).
    OllamaChat,
    /// Ollama's native `/api/generate` (NDJSON; the same stream format as `/api/chat`, a prompt
    /// in and text out, hence its own operation label).
    OllamaGenerate,
    /// llama.cpp server's native `/completion` (and its legacy alias `/completions`).
    LlamaCpp,
    /// Any other POST: metered for TTFB and E2E when the response is a stream; never fails.
    Unknown,
}

impl Dialect {
    /// Every dialect, for code and tests that must cover them all.
    pub const ALL: [Dialect; 10] = [
        Dialect::OpenAiChat,
        Dialect::OpenAiCompletions,
        Dialect::OpenAiResponses,
        Dialect::AnthropicMessages,
        Dialect::Tgi,
        Dialect::Triton,
        Dialect::OllamaChat,
        Dialect::OllamaGenerate,
        Dialect::LlamaCpp,
        Dialect::Unknown,
    ];

    /// Classifies one event. `event` is the SSE `event:` field (empty when none / for NDJSON).
    pub fn classify(self, event: &[u8], data: &[u8]) -> EventSummary {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions => openai::classify(data),
            Dialect::OpenAiResponses => responses::classify(event, data),
            Dialect::AnthropicMessages => anthropic::classify(event, data),
            Dialect::Tgi => tgi::classify(data),
            Dialect::Triton => triton::classify(data),
            Dialect::OllamaChat | Dialect::OllamaGenerate => ollama::classify(data),
            Dialect::LlamaCpp => llamacpp::classify(data),
            Dialect::Unknown => EventSummary::default(),
        }
    }

    /// Reads the usage of a whole non-streaming response body (`"stream": false`, one JSON
    /// object), with the field names of each public API (see each module's `body_usage`).
    /// `None` when the body carries no readable usage, is not JSON, or the dialect has no
    /// non-streaming answer it routes: TGI's and Triton's non-streaming `/generate` are not their
    /// dialects' paths (they are [`Dialect::Unknown`], timed only), and an unknown API's usage
    /// cannot be told apart from any other JSON. Never panics on any bytes.
    pub fn body_usage(self, body: &[u8]) -> Option<Usage> {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions => openai::body_usage(body),
            Dialect::OpenAiResponses => responses::body_usage(body),
            Dialect::AnthropicMessages => anthropic::body_usage(body),
            Dialect::OllamaChat | Dialect::OllamaGenerate => ollama::body_usage(body),
            Dialect::LlamaCpp => llamacpp::body_usage(body),
            Dialect::Tgi | Dialect::Triton | Dialect::Unknown => None,
        }
    }

    /// OpenTelemetry GenAI `gen_ai.operation.name`: `chat` for conversational APIs (chat
    /// completions, Responses, Messages, Ollama's `/api/chat`), `text_completion` for prompt-in /
    /// text-out APIs (completions, TGI, Triton, Ollama's `/api/generate`, llama.cpp `/completion`),
    /// `_OTHER` for an unknown endpoint.
    pub fn operation(self) -> &'static str {
        match self {
            Dialect::OpenAiChat
            | Dialect::OpenAiResponses
            | Dialect::AnthropicMessages
            | Dialect::OllamaChat => "chat",
            Dialect::OpenAiCompletions
            | Dialect::Tgi
            | Dialect::Triton
            | Dialect::OllamaGenerate
            | Dialect::LlamaCpp => "text_completion",
            Dialect::Unknown => OTHER,
        }
    }

    /// OpenTelemetry GenAI `gen_ai.provider.name`. A proxy sees the wire API, not the vendor
    /// behind it, so the value names the API family the stream speaks: `openai` for every
    /// OpenAI-compatible API (vLLM, SGLang, TGI's and llama.cpp's `/v1` included, as OTel's own
    /// OpenAI instrumentation would report them), `anthropic` for Messages; the native APIs that
    /// OTel has no well-known value for get their project's name in OTel's lowercase style
    /// (`tgi`, `triton`, `ollama`, `llama_cpp`); an unknown endpoint is `_OTHER`.
    pub fn provider(self) -> &'static str {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiCompletions | Dialect::OpenAiResponses => "openai",
            Dialect::AnthropicMessages => "anthropic",
            Dialect::Tgi => "tgi",
            Dialect::Triton => "triton",
            Dialect::OllamaChat | Dialect::OllamaGenerate => "ollama",
            Dialect::LlamaCpp => "llama_cpp",
            Dialect::Unknown => OTHER,
        }
    }

    /// Whether `stream_options.include_usage` injection applies (OpenAI chat/completions only:
    /// the other dialects always report usage, or have no way to ask for it).
    pub fn injects_usage(self) -> bool {
        matches!(self, Dialect::OpenAiChat | Dialect::OpenAiCompletions)
    }

    /// A short stable name (`openai_chat`, `anthropic_messages`, ...) for logs and tests.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "openai_chat",
            Dialect::OpenAiCompletions => "openai_completions",
            Dialect::OpenAiResponses => "openai_responses",
            Dialect::AnthropicMessages => "anthropic_messages",
            Dialect::Tgi => "tgi",
            Dialect::Triton => "triton",
            Dialect::OllamaChat | Dialect::OllamaGenerate => "ollama",
            Dialect::LlamaCpp => "llama_cpp",
            Dialect::Unknown => "unknown",
        }
    }
}

/// The operation and provider of a request that is none of the known APIs: `_OTHER`, the fallback
/// OpenTelemetry's semantic conventions give every attribute with well-known values (as
/// `http.request.method` and `error.type` use it), for a POST to an unknown endpoint and, in
/// [`Operation::PASSTHROUGH`], for a path that is not a generation alike. Defined with the values
/// of the known APIs ([`Dialect::operation`], [`Dialect::provider`]), which `operation.rs` reads.
const OTHER: &str = "_OTHER";

#[cfg(test)]
mod tests;
