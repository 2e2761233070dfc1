//! The API keys file: which tenant a key belongs to, without the keys themselves.
//!
//! One `sha256:<64 lowercase hex digits> <tenant>` per line, `#` starts a comment. The file
//! holds the SHA-256 of each key, never a key, so a leaked ConfigMap or a backup of the file does
//! not leak access; a request's key is hashed once and looked up. Hashing is not a password
//! scheme: API keys are long random strings, for which a plain digest is what gateways use.
//!
//! ```text
//! # printf %s "$KEY" | sha256sum
//! sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 team-search
//! ```
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Keys by their digest.
#[derive(Debug, Default)]
pub(crate) struct KeyTable {
    by_digest: HashMap<[u8; 32], Arc<str>>,
}

/// Why a keys file did not load; the text names the file and the line.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("tenants.keys_file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("tenants.keys_file {path}, line {line}: {message}")]
    Line {
        path: String,
        line: usize,
        message: &'static str,
    },
    #[error(
        "tenants.keys_file: the api_key source needs a keys file (or TOKENMETER_TENANT_KEYS_FILE)"
    )]
    Missing,
    /// The backend's key file (`tenants.upstream_key_file`, [`super::identity`]); the text never
    /// holds the key.
    #[error("tenants.upstream_key_file {path}: {message}")]
    UpstreamKey { path: String, message: String },
}

impl KeyTable {
    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Self, KeysError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeysError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, message)| KeysError::Line {
            path: shown,
            line,
            message,
        })
    }

    /// Parses the file's text; an error names the line (1-based) and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, (usize, &'static str)> {
        let mut by_digest = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(digest), Some(tenant), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err((i + 1, "expected `sha256:<hex> <tenant>`"));
            };
            let digest = digest.strip_prefix("sha256:").and_then(hex32).ok_or((
                i + 1,
                "the digest is not sha256: and 64 lowercase hex digits",
            ))?;
            if by_digest.insert(digest, Arc::from(tenant)).is_some() {
                return Err((i + 1, "the same key twice"));
            }
        }
        Ok(Self { by_digest })
    }

    /// The tenant of `key`, if the file knows it.
    pub(crate) fn tenant_of(&self, key: &[u8]) -> Option<&Arc<str>> {
        self.by_digest.get(&digest(key))
    }

    /// Every tenant the file names (each gets its own label value).
    pub fn tenants(&self) -> impl Iterator<Item = &Arc<str>> {
        self.by_digest.values()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }
}

/// The SHA-256 of `key`.
pub fn digest(key: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, key).as_ref());
    out
}

/// 32 bytes from 64 lowercase hex digits.
fn hex32(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
