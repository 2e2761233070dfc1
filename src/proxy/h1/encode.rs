//! Writing a request to an upstream: the head in origin form, then the body, framed by
//! `content-length` when its size is known and `transfer-encoding: chunked` otherwise.
use std::io::Write;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::request::Parts;
use http::Method;
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::proxy::headers::{InstanceId, VIA};
use crate::proxy::RequestBody;

/// A buffered body up to this size goes out in the same write as the head (one segment).
const COALESCE_BODY: usize = 64 * 1024;

/// Why a request could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing the request upstream: {0}")]
    Io(std::io::Error),
    #[error("reading the request body from the client: {0}")]
    ClientBody(hyper::Error),
    #[error("the request body did not match its content-length")]
    LengthMismatch,
}

/// How the body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequestDelimiter {
    None,
    Length(u64),
    Chunked,
}

/// Encodes the request head. `host` is set to `authority` when the request has none (the
/// forwarder moves the client's to `x-forwarded-host`); the body's own framing replaces any
/// `content-length` / `transfer-encoding` the client sent; with `hop`, the hop header's line
/// names it after the ids the request came with ([`InstanceId::write_line`]).
pub fn head(
    parts: &Parts,
    authority: &str,
    body: &RequestBody,
    hop: Option<&InstanceId>,
) -> Vec<u8> {
    let delimiter = delimiter(&parts.method, body);
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let mut out = Vec::with_capacity(256 + header_bytes(&parts.headers));
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{} {} HTTP/1.1\r\n", parts.method, path);
    if !parts.headers.contains_key(header::HOST) {
        let _ = write!(out, "host: {authority}\r\n");
    }
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || (hop.is_some() && name == VIA)
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(hop) = hop {
        hop.write_line(&parts.headers, &mut out);
    }
    match delimiter {
        RequestDelimiter::None => {}
        RequestDelimiter::Length(n) => {
            let _ = write!(out, "content-length: {n}\r\n");
        }
        RequestDelimiter::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Writes `head` and the body.
pub async fn write<W: AsyncWrite + Unpin>(
    io: &mut W,
    method: &Method,
    head: &[u8],
    body: RequestBody,
) -> Result<(), WriteError> {
    let delimiter = delimiter(method, &body);
    match body {
        RequestBody::Buffered(bytes) if bytes.len() <= COALESCE_BODY => {
            let mut whole = Vec::with_capacity(head.len() + bytes.len());
            whole.extend_from_slice(head);
            whole.extend_from_slice(&bytes);
            io.write_all(&whole).await.map_err(WriteError::Io)?;
        }
        RequestBody::Buffered(bytes) => {
            io.write_all(head).await.map_err(WriteError::Io)?;
            io.write_all(&bytes).await.map_err(WriteError::Io)?;
        }
        RequestBody::Streaming(mut incoming) => {
            io.write_all(head).await.map_err(WriteError::Io)?;
            let mut sent: u64 = 0;
            while let Some(frame) = incoming.frame().await {
                let frame = frame.map_err(WriteError::ClientBody)?;
                // Trailers of a streamed request are dropped (HTTP/1.1 upstreams rarely read them).
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                sent += data.len() as u64;
                match delimiter {
                    RequestDelimiter::Chunked => write_chunk(io, &data).await,
                    _ => io.write_all(&data).await,
                }
                .map_err(WriteError::Io)?;
                // A no-op on TCP; on TLS, sends what the session still holds of this piece.
                io.flush().await.map_err(WriteError::Io)?;
            }
            match delimiter {
                RequestDelimiter::Chunked => {
                    io.write_all(b"0\r\n\r\n").await.map_err(WriteError::Io)?
                }
                RequestDelimiter::Length(n) if n != sent => return Err(WriteError::LengthMismatch),
                RequestDelimiter::None if sent != 0 => return Err(WriteError::LengthMismatch),
                _ => {}
            }
        }
    }
    io.flush().await.map_err(WriteError::Io)
}

async fn write_chunk<W: AsyncWrite + Unpin>(io: &mut W, data: &Bytes) -> std::io::Result<()> {
    let mut size = Vec::with_capacity(20);
    let _ = write!(size, "{:x}\r\n", data.len());
    io.write_all(&size).await?;
    io.write_all(data).await?;
    io.write_all(b"\r\n").await
}

/// A known size is sent as `content-length` (none at all for an empty body on a method that
/// has no body by definition); an unknown one as chunked.
fn delimiter(method: &Method, body: &RequestBody) -> RequestDelimiter {
    match body.size_hint().exact() {
        Some(0)
            if matches!(
                *method,
                Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
            ) =>
        {
            RequestDelimiter::None
        }
        Some(n) => RequestDelimiter::Length(n),
        None => RequestDelimiter::Chunked,
    }
}

fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}
