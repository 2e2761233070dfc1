//! Parsing an upstream's response head, and deciding how its body is framed (RFC 9112 §6.3).
use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode, Version};

/// hyper's default header count limit; a head with more is refused.
const MAX_HEADERS: usize = 100;
/// A head longer than this is refused (hyper's default read buffer limit is ~400 KiB; real
/// inference servers send a few hundred bytes).
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delimiter {
    /// No body (HEAD, 204, 304).
    Empty,
    /// `content-length` bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub response: Response<()>,
    pub delimiter: Delimiter,
    /// Whether the connection may carry another request once this body is read.
    pub keep_alive: bool,
}

/// Why a head is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("invalid response head: {0}")]
    Parse(httparse::Error),
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("invalid response head: {0}")]
    Invalid(&'static str),
}

/// Parses a whole head off the front of `buf`; `Ok(None)` when more bytes are needed. Interim
/// (1xx) responses are consumed and skipped: the proxy answers `100 Continue` to its own client.
pub fn parse(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, HeadError> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut headers);
        let len = match parsed.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
                return Err(HeadError::TooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(err) => return Err(HeadError::Parse(err)),
        };
        let code = parsed.code.ok_or(HeadError::Invalid("no status code"))?;
        let status = StatusCode::from_u16(code).map_err(|_| HeadError::Invalid("status code"))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(HeadError::Invalid(
                "101 Switching Protocols: upgrades are not proxied",
            ));
        }
        if status.is_informational() {
            buf.advance(len);
            continue;
        }
        let version = match parsed.version {
            Some(1) => Version::HTTP_11,
            _ => Version::HTTP_10,
        };
        let mut map = HeaderMap::with_capacity(parsed.headers.len());
        for h in parsed.headers.iter() {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| HeadError::Invalid("header name"))?;
            let value =
                HeaderValue::from_bytes(h.value).map_err(|_| HeadError::Invalid("header value"))?;
            map.append(name, value);
        }
        buf.advance(len);
        let (delimiter, reusable) = delimiter(&map, status, method)?;
        let keep_alive = reusable
            && version == Version::HTTP_11
            && !has_token(&map, header::CONNECTION, "close");
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = version;
        *response.headers_mut() = map;
        return Ok(Some(Head {
            response,
            delimiter,
            keep_alive,
        }));
    }
}

/// How the body is delimited (RFC 9112 §6.3), and whether it leaves the connection usable
/// afterwards.
fn delimiter(
    headers: &HeaderMap,
    status: StatusCode,
    method: &Method,
) -> Result<(Delimiter, bool), HeadError> {
    if method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Delimiter::Empty, true));
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        let chunked_last = headers
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .is_some_and(|coding| coding.trim().eq_ignore_ascii_case("chunked"));
        // With a content-length too, the message was made by something confused: read it
        // as chunked (the RFC's rule) but do not trust the connection with another request.
        let reusable = !headers.contains_key(header::CONTENT_LENGTH);
        return Ok(if chunked_last {
            (Delimiter::Chunked, reusable)
        } else {
            (Delimiter::UntilClose, false)
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value
            .to_str()
            .map_err(|_| HeadError::Invalid("content-length"))?
            .split(',')
        {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HeadError::Invalid("content-length"));
            }
            let n: u64 = part
                .parse()
                .map_err(|_| HeadError::Invalid("content-length"))?;
            if length.is_some_and(|previous| previous != n) {
                return Err(HeadError::Invalid("conflicting content-length values"));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => (Delimiter::Empty, true),
        Some(n) => (Delimiter::Length(n), true),
        None => (Delimiter::UntilClose, false),
    })
}

/// Whether a comma-separated header has `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests;
