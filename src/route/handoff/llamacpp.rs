//! llama.cpp's slot save and restore (`llama-server --slot-save-path DIR`), as a KV transfer:
//! 1. the prefill server computes the prompt in a slot the proxy reserved (`id_slot`,
//!    `cache_prompt`, one token, not streamed);
//! 2. `POST /slots/S?action=save {"filename": F}` writes that slot's KV cache to `DIR/F`;
//! 3. on the decode server, `POST /slots/T?action=restore {"filename": F}` loads it into a slot the
//!    proxy reserved there (both servers load the same model and read the same directory);
//! 4. the client's request goes to the decode server with `id_slot` T: its prompt is in the slot's
//!    cache, so only the last token is computed.
//!
//! The proxy names the files, and removes each once its restore is over (whatever its result), or
//! when the request ends before that: the directory holds only transfers in progress.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{prefill, splice};
use crate::proxy::client::UpstreamClient;
use crate::route::backend::Backend;
use crate::route::probe::{self, ExchangeError};

/// The member naming a request's slot.
const ID_SLOT: &str = "id_slot";

/// Whether `body` names a slot itself (then the proxy does not manage its slot).
pub(crate) fn mentions_slot(body: &[u8]) -> bool {
    splice::mentions(body, ID_SLOT)
}

/// The prefill request's body: the client's, in slot `slot`, one token, not streamed, its prompt
/// kept in the slot's cache.
pub(crate) fn prefill_body(body: &[u8], slot: usize) -> Result<Bytes, serde_json::Error> {
    let mut object: Map<String, Value> = serde_json::from_slice(body)?;
    object.insert(ID_SLOT.to_owned(), Value::from(slot));
    object.insert("cache_prompt".to_owned(), Value::Bool(true));
    // `max_tokens` for the OpenAI endpoints, `n_predict` for the native `/completion`.
    prefill::one_unstreamed_token(&mut object);
    object.insert("n_predict".to_owned(), Value::from(1));
    serde_json::to_vec(&object).map(Bytes::from)
}

/// The client's body, byte for byte, with `"id_slot":SLOT` as its first member; `None` when it
/// does not start with a JSON object.
pub(crate) fn with_slot(body: &[u8], slot: usize) -> Option<Bytes> {
    splice::first_member(body, ID_SLOT, &slot.to_string())
}

/// Why a save or restore failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SlotActionError {
    #[error("{0}")]
    Exchange(String),
    #[error("HTTP {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("the answer moved no tokens: {0}")]
    Empty(String),
}

/// `POST /slots/SLOT?action=ACTION {"filename": FILE}`; the tokens it moved.
pub(crate) async fn slot_action(
    client: &UpstreamClient,
    backend: &Backend,
    slot: usize,
    action: &'static str,
    file: &str,
    timeout: Duration,
) -> Result<u64, SlotActionError> {
    #[derive(Deserialize)]
    struct Moved {
        #[serde(alias = "n_saved", alias = "n_restored")]
        tokens: u64,
    }
    let path = format!("/slots/{slot}?action={action}");
    let body = Bytes::from(serde_json::json!({ "filename": file }).to_string());
    let (status, answer) = probe::exchange(client, backend, Method::POST, &path, body, timeout)
        .await
        .map_err(|err| match err {
            ExchangeError::Timeout => SlotActionError::Exchange("no answer in time".to_owned()),
            ExchangeError::Failed(detail) => SlotActionError::Exchange(detail),
        })?;
    let text = || String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned();
    if !status.is_success() {
        return Err(SlotActionError::Refused {
            status: status.as_u16(),
            body: text(),
        });
    }
    match serde_json::from_slice::<Moved>(&answer) {
        Ok(moved) if moved.tokens > 0 => Ok(moved.tokens),
        _ => Err(SlotActionError::Empty(text())),
    }
}

/// How many slots a server has (`GET /props`: `total_slots`).
pub(crate) async fn total_slots(
    client: &UpstreamClient,
    backend: &Backend,
    timeout: Duration,
) -> Option<usize> {
    #[derive(Deserialize)]
    struct Props {
        total_slots: usize,
    }
    let (status, answer) = probe::exchange(
        client,
        backend,
        Method::GET,
        "/props",
        Bytes::new(),
        timeout,
    )
    .await
    .ok()?;
    if !status.is_success() {
        return None;
    }
    let props: Props = serde_json::from_slice(&answer).ok()?;
    (props.total_slots > 0).then_some(props.total_slots)
}

/// A transfer file's name: unique per transfer (the servers take it relative to their
/// `--slot-save-path`).
pub fn file_name() -> String {
    format!("tokenmeter-{:032x}.bin", rand::random::<u128>())
}

/// A transfer file in the proxy's view of the slot directory, removed when dropped. A save still
/// running on the server when the request ends may write the file after a first removal, so the
/// removal is tried again once such a save must be over.
#[derive(Debug)]
pub(crate) struct TransferFile {
    name: String,
    path: Arc<PathBuf>,
    /// How long a save may still be running after the request let go of it.
    linger: Duration,
}

impl TransferFile {
    pub fn new(dir: &Path, name: &str, linger: Duration) -> Self {
        Self {
            name: name.to_owned(),
            path: Arc::new(dir.join(name)),
            linger,
        }
    }

    /// The name the servers know it by (relative to their `--slot-save-path`).
    pub fn name(&self) -> &str {
        &self.name
    }

    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TransferFile {
    fn drop(&mut self) {
        let path = Arc::clone(&self.path);
        let linger = self.linger;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let _ = std::fs::remove_file(&*path);
            return;
        };
        runtime.spawn(async move {
            remove(&path).await;
            tokio::time::sleep(linger).await;
            remove(&path).await;
        });
    }
}

async fn remove(path: &Path) {
    match tokio::fs::remove_file(path).await {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "cannot remove a KV transfer file")
        }
    }
}

#[cfg(test)]
mod tests;
