//! tokenmeter's HTTP/1.1 client to upstreams: keep-alive pooled, one task per exchange.
//!
//! Why not hyper-util's pooled client: it runs every upstream connection as a task of its own
//! and hands each body frame to the forwarding task through a channel, so every token chunk
//! costs a read in one task, a wake-up, and a write in another; that hand-off was the largest
//! user-space cost of forwarding a chunk, and its per-connection channel and buffers most of an
//! idle stream's memory (docs/performance.md). Here the forwarding task reads the socket itself
//! ([`IncomingBody`]). The server side, where clients connect, stays hyper.
//!
//! What it speaks: HTTP/1.1 in origin form, `content-length` or chunked request bodies, every
//! response framing of RFC 9112 §6.3 (length, chunked, until close, none), interim 1xx responses
//! skipped, a response that comes before the request body was sent whole (the connection is then
//! not reused). Heads are parsed by `httparse`, hyper's own parser. TLS (`https://` targets) is
//! rustls over the same TCP connection ([`crate::tls::connector`]); pooled TLS connections are
//! keyed by the TLS table and verified name as well as the authority. Not spoken: HTTP/2 to
//! upstreams, protocol upgrades (the forwarder strips `upgrade`).
//!
//! ```text
//! request ──▶ pool.checkout(authority) ─(none)─▶ connect (timeout, TCP_NODELAY)
//!         ──▶ write head + body ──▶ read head (1xx skipped) ──▶ Response<IncomingBody>
//!                         body read to its end on keep-alive ──▶ pool.checkin
//! ```
mod body;
pub mod chunked;
mod conn;
mod encode;
pub mod head;
mod idle;

use std::sync::Arc;
use std::time::Duration;

use http::uri::Authority;
use http::{Request, Response};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub use body::{IncomingBody, ReadError};
pub(crate) use encode::WriteError;
pub(crate) use head::HeadError;

use crate::config::UpstreamConfig;
use crate::proxy::headers::InstanceId;
use crate::proxy::RequestBody;
use crate::tls::UpstreamTls;
use conn::{Conn, Io};
use head::Head;
use idle::IdlePool;

/// Why an exchange produced no response head.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tcp connect error: {0}")]
    Connect(std::io::Error),
    #[error("tcp connect error: timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// The TLS handshake failed: the certificate did not verify (expired, wrong name, unknown
    /// CA), the backend refused ours, or it does not speak TLS.
    #[error("TLS handshake with {server_name} failed: {source}")]
    Tls {
        server_name: String,
        source: std::io::Error,
    },
    #[error(
        "the upstream URI {0:?} has no authority, or its scheme does not match the target's TLS"
    )]
    Uri(String),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("reading the response head: {0}")]
    Read(std::io::Error),
    #[error("the upstream closed the connection before sending a complete response head")]
    ClosedBeforeHead,
    #[error(transparent)]
    Head(#[from] HeadError),
}

impl Error {
    /// The connection could not be made (nothing was sent): TCP, or the TLS handshake.
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            Error::Connect(_) | Error::ConnectTimeout(_) | Error::Tls { .. }
        )
    }

    /// The connect timed out (ours, or the kernel's `ETIMEDOUT`), the TLS handshake included.
    pub(crate) fn is_connect_timeout(&self) -> bool {
        match self {
            Error::ConnectTimeout(_) => true,
            Error::Connect(err) | Error::Tls { source: err, .. } => {
                err.kind() == std::io::ErrorKind::TimedOut
            }
            _ => false,
        }
    }
}

/// The shared upstream client (cheap to clone).
#[derive(Debug, Clone)]
pub struct Client {
    pool: IdlePool,
    connect_timeout: Duration,
    /// The server's id, written into every request's hop header (`None`: a client of its own,
    /// as the tests and examples build).
    hop: Option<InstanceId>,
}

impl Client {
    pub fn new(config: &UpstreamConfig) -> Self {
        Self {
            pool: IdlePool::new(config.pool_idle_timeout, config.pool_max_idle_per_host),
            connect_timeout: config.connect_timeout,
            hop: None,
        }
    }

    /// The client of the server `hop` names: every request it sends (a forward, its retries, a
    /// hand-off's prefill, a probe) carries the id in [`crate::proxy::headers::VIA`].
    pub fn naming(mut self, hop: InstanceId) -> Self {
        self.hop = Some(hop);
        self
    }

    /// Sends `req` (absolute URI: `http://authority/path`) and returns the response once its
    /// head arrived. A request on a pooled connection that the upstream closed meanwhile (no
    /// response byte came back) is sent again on a new connection when its body is buffered.
    ///
    /// `tls` is the target's ([`crate::upstream::Target::tls`]): given exactly for `https://`.
    pub async fn request(
        &self,
        req: Request<RequestBody>,
        tls: Option<&Arc<UpstreamTls>>,
    ) -> Result<Response<IncomingBody>, Error> {
        self.request_marked(req, tls)
            .await
            .map(|(response, _)| response)
    }

    /// [`Client::request`], with when the exchange had its connection and had written the
    /// request (the TTFT split's `connect` and the proxy's own write time).
    pub(crate) async fn request_marked(
        &self,
        req: Request<RequestBody>,
        tls: Option<&Arc<UpstreamTls>>,
    ) -> Result<(Response<IncomingBody>, ExchangeMarks), Error> {
        let (parts, body) = req.into_parts();
        let authority = match (parts.uri.scheme_str(), parts.uri.authority(), tls) {
            (Some("http") | None, Some(authority), None)
            | (Some("https"), Some(authority), Some(_)) => authority.clone(),
            _ => return Err(Error::Uri(parts.uri.to_string())),
        };
        let key: Arc<str> = match tls {
            None => Arc::from(authority.as_str()),
            Some(tls) => Arc::from(format!("{}@{}", tls.pool_tag, authority.as_str())),
        };
        let head = encode::head(&parts, authority.as_str(), &body, self.hop.as_ref());
        let replay = match &body {
            RequestBody::Buffered(bytes) => Some(bytes.clone()),
            RequestBody::Streaming(_) => None,
        };
        let mut marks = ExchangeMarks {
            connected: Instant::now(),
            new_connection: false,
            written: None,
        };
        let (conn, response) = match self.pool.checkout(&key) {
            Some(conn) => match exchange(conn, &parts.method, &head, body, &mut marks).await {
                Err(failure) if failure.may_retry && replay.is_some() => {
                    let body = RequestBody::Buffered(replay.unwrap_or_default());
                    let conn = self.connect(&authority, key, tls).await?;
                    marks.connected = Instant::now();
                    marks.new_connection = true;
                    exchange(conn, &parts.method, &head, body, &mut marks).await
                }
                result => result,
            },
            None => {
                let conn = self.connect(&authority, key, tls).await?;
                marks.connected = Instant::now();
                marks.new_connection = true;
                exchange(conn, &parts.method, &head, body, &mut marks).await
            }
        }
        .map_err(|failure| failure.error)?;
        let Head {
            response,
            delimiter,
            keep_alive,
        } = response;
        let body = IncomingBody::new(conn, delimiter, keep_alive, self.pool.clone());
        Ok((response.map(|()| body), marks))
    }

    /// Connects (and, for TLS, completes the handshake) within `connect_timeout`.
    async fn connect(
        &self,
        authority: &Authority,
        key: Arc<str>,
        tls: Option<&Arc<UpstreamTls>>,
    ) -> Result<Conn, Error> {
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority
            .port_u16()
            .unwrap_or(if tls.is_some() { 443 } else { 80 });
        let started = tokio::time::Instant::now();
        let io = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| Error::ConnectTimeout(self.connect_timeout))?
            .map_err(Error::Connect)?;
        // A token chunk must not wait for Nagle's algorithm.
        io.set_nodelay(true).map_err(Error::Connect)?;
        let Some(tls) = tls else {
            return Ok(Conn::new(Io::Plain(io), key));
        };
        let left = self.connect_timeout.saturating_sub(started.elapsed());
        let handshake = tls.connector.connect(tls.server_name.clone(), io);
        let tls_failed = |source| Error::Tls {
            server_name: tls.server_name.to_str().into_owned(),
            source,
        };
        let stream = tokio::time::timeout(left, handshake)
            .await
            .map_err(|_| Error::ConnectTimeout(self.connect_timeout))?
            .map_err(tls_failed)?;
        Ok(Conn::new(Io::Tls(Box::new(stream)), key))
    }

    /// The same client (and connection pool) with another connect timeout: a config reload's.
    pub fn with_connect_timeout(&self, connect_timeout: Duration) -> Self {
        Self {
            pool: self.pool.clone(),
            connect_timeout,
            hop: self.hop.clone(),
        }
    }

    #[cfg(test)]
    /// Idle pooled connections to `authority` (tests).
    pub(crate) fn idle_connections(&self, authority: &str) -> usize {
        self.pool.idle_count(authority)
    }
}

/// When an exchange had its connection and had sent its request: two clock reads per request,
/// none per chunk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExchangeMarks {
    /// The connection was ready: checked out of the pool, or connected (TCP, and TLS).
    pub connected: Instant,
    /// It was a new connection (the time to `connected` was a connect).
    pub new_connection: bool,
    /// The request was written whole; `None` when the response came before it was.
    pub written: Option<Instant>,
}

/// A failed exchange, and whether it failed the way a pooled connection closed by the upstream
/// fails: on a reused connection, with no byte of a response received.
struct ExchangeFailure {
    error: Error,
    may_retry: bool,
}

/// Writes the request and reads the response head on `conn`. The head is read while the body is
/// still being written: an upstream may answer (a 413, a 401) without reading a large upload, and
/// that answer is what the client gets, on a connection then not reused.
async fn exchange(
    mut conn: Conn,
    method: &http::Method,
    head: &[u8],
    body: RequestBody,
    marks: &mut ExchangeMarks,
) -> Result<(Conn, Head), ExchangeFailure> {
    let reused = conn.reused;
    let fail = |error: Error, nothing_back: bool| ExchangeFailure {
        may_retry: reused && nothing_back,
        error,
    };
    // The `Some(Ok)` of `sent`: the whole request is sent; `Some(Err)`: sending failed (the
    // head may still come, say a 413 before the upstream closed).
    let (outcome, sent) = {
        let (mut reader, mut writer) = conn.split();
        let write = encode::write(&mut writer, method, head, body);
        let read = read_head(&mut reader, method);
        tokio::pin!(write, read);
        let mut sent: Option<Result<(), WriteError>> = None;
        loop {
            tokio::select! {
                biased;
                result = &mut write, if sent.is_none() => match result {
                    Err(err) if !matches!(err, WriteError::Io(_)) => {
                        return Err(fail(err.into(), false));
                    }
                    result => {
                        if result.is_ok() {
                            marks.written = Some(Instant::now());
                        }
                        sent = Some(result);
                    }
                },
                outcome = &mut read => break (outcome, sent),
            }
        }
    };
    match (outcome, sent) {
        (Ok(head), Some(Ok(()))) => Ok((conn, head)),
        // Answered before the request was sent whole: where the next request would start on
        // this connection is unknown, so it is not reused.
        (Ok(mut head), _) => {
            head.keep_alive = false;
            Ok((conn, head))
        }
        (Err((_, received)), Some(Err(err))) => Err(fail(err.into(), !received)),
        (Err((err, received)), _) => Err(fail(err, !received)),
    }
}

/// Reads until a whole (final) response head is in the buffer; the error says whether any byte
/// of a response had come.
async fn read_head(
    reader: &mut conn::Reader<'_>,
    method: &http::Method,
) -> Result<Head, (Error, bool)> {
    let mut received = false;
    loop {
        match head::parse(reader.buf, method) {
            Ok(Some(head)) => return Ok(head),
            Ok(None) => {}
            Err(err) => return Err((err.into(), true)),
        }
        match reader.fill().await {
            Ok(0) => return Err((Error::ClosedBeforeHead, received)),
            Ok(_) => received = true,
            Err(err) => return Err((Error::Read(err), received)),
        }
    }
}

#[cfg(test)]
mod tests;
