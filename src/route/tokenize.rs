//! Asking a backend's own tokenizer how many tokens a prompt is.
//!
//! The prompt estimate ([`super::estimate`]) starts from a prior tokens-per-byte ratio that fits
//! English prose (~0.25) and learns the real one from responses. Until it has, a tokenizer that
//! splits text finer (a small vocabulary, code, CJK, the load generator's one-letter words: 0.5 on
//! llama.cpp's test model) makes a long document look short enough for the decode pool. vLLM,
//! SGLang, TGI and llama.cpp serve `POST /tokenize`, so the router asks one of them: at once for a
//! request whose pool depends on the answer, in the background to calibrate the next ones.
//!
//! One body serves every server: each reads its own field and ignores the rest (`prompt`: vLLM
//! and SGLang; `content`: llama.cpp; `inputs`: TGI), with special tokens off so the count is of
//! the text alone, as the estimate measures it. The count is the answer's `count` (vLLM), else
//! the length of its `tokens` array (llama.cpp, SGLang), else of the answer itself (TGI's list of
//! tokens). A backend that answers 404, 405 or 501 has no tokenizer endpoint and is not asked
//! again.
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde::Deserialize;

use super::backend::Backend;
use super::probe;
use crate::proxy::client::UpstreamClient;

/// The path every supported server serves its tokenizer on.
pub const PATH: &str = "/tokenize";

/// Why no count came back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizeError {
    #[error("the backend has no {PATH} endpoint (HTTP {0})")]
    Unsupported(u16),
    #[error("no answer within the timeout")]
    Timeout,
    #[error("{0}")]
    Failed(String),
}

impl TokenizeError {
    /// The `result` label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            TokenizeError::Unsupported(_) => "unsupported",
            TokenizeError::Timeout => "timeout",
            TokenizeError::Failed(_) => "error",
        }
    }
}

/// The request body for `text` (and the request's model, when it named one).
pub fn body(model: Option<&str>, text: &str) -> Bytes {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<&'a str>,
        prompt: &'a str,
        content: &'a str,
        inputs: &'a str,
        add_special_tokens: bool,
        add_special: bool,
    }
    let body = Body {
        model,
        prompt: text,
        content: text,
        inputs: text,
        add_special_tokens: false,
        add_special: false,
    };
    // Serializing strings and booleans cannot fail.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// Reads the token count from a `/tokenize` answer.
pub fn count(answer: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Answer {
        Counted { count: u64 },
        Listed { tokens: Vec<serde::de::IgnoredAny> },
        Bare(Vec<serde::de::IgnoredAny>),
    }
    match serde_json::from_slice::<Answer>(answer).ok()? {
        Answer::Counted { count } => Some(count),
        Answer::Listed { tokens } => Some(tokens.len() as u64),
        Answer::Bare(tokens) => Some(tokens.len() as u64),
    }
}

/// Asks `backend` how many tokens `text` is; a backend without the endpoint is marked so.
pub async fn ask(
    client: &UpstreamClient,
    backend: &Backend,
    model: Option<&str>,
    text: &str,
    timeout: Duration,
) -> Result<u64, TokenizeError> {
    let answer = probe::exchange(
        client,
        backend,
        Method::POST,
        PATH,
        body(model, text),
        timeout,
    )
    .await;
    let (status, body) = match answer {
        Ok(answer) => answer,
        Err(probe::ExchangeError::Timeout) => return Err(TokenizeError::Timeout),
        Err(probe::ExchangeError::Failed(detail)) => return Err(TokenizeError::Failed(detail)),
    };
    if matches!(
        status,
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
    ) {
        backend.no_tokenize();
        return Err(TokenizeError::Unsupported(status.as_u16()));
    }
    if !status.is_success() {
        return Err(TokenizeError::Failed(format!("HTTP {status}")));
    }
    count(&body).ok_or_else(|| TokenizeError::Failed("no token count in the answer".to_owned()))
}

#[cfg(test)]
mod tests;
