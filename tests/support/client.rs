//! A test client that opens its own connection per request and stamps every body frame on arrival.
use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A response being read frame by frame.
pub struct OpenStream {
    pub sent_at: Instant,
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    connection: JoinHandle<()>,
}

/// A fully read response.
#[derive(Debug)]
pub struct Streamed {
    pub sent_at: Instant,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub frames: Vec<(Instant, Bytes)>,
    /// The body ended with an error (a broken stream) rather than cleanly.
    pub error: Option<String>,
    /// When the client saw the body end (cleanly or not).
    pub ended_at: Instant,
}

impl Streamed {
    pub fn bytes(&self) -> Vec<u8> {
        self.frames
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

/// Which protocol the client speaks to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    H2c,
}

/// Sends a POST with a JSON body over a new connection.
pub async fn open(addr: SocketAddr, path: &str, body: &str) -> OpenStream {
    open_with(addr, Protocol::Http1, "POST", path, body, &[]).await
}

/// Sends any request over a new connection.
pub async fn open_with(
    addr: SocketAddr,
    protocol: Protocol,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> OpenStream {
    send_over(
        connect(addr).await,
        addr,
        protocol,
        method,
        path,
        body,
        headers,
    )
    .await
}

/// Sends a POST over TLS (`config` trusting the proxy's CA), speaking what ALPN agreed.
pub async fn open_tls(
    addr: SocketAddr,
    config: std::sync::Arc<rustls::ClientConfig>,
    path: &str,
    body: &str,
) -> OpenStream {
    let stream = connect(addr).await;
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .expect("TLS handshake with the proxy");
    let protocol = match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::H2c,
        _ => Protocol::Http1,
    };
    send_over(stream, addr, protocol, "POST", path, body, &[]).await
}

/// A new TCP connection to the proxy, `TCP_NODELAY` like a real client's.
async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr)
        .await
        .expect("connect to the proxy");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

/// Sends one request over `stream` (`Protocol::H2c` means HTTP/2, over TLS or not).
async fn send_over<S>(
    stream: S,
    addr: SocketAddr,
    protocol: Protocol,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> OpenStream
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(stream);
    // HTTP/1.1 clients send the origin form (`/path`) with a Host header, as real servers
    // (llama.cpp's among them) expect; h2 carries the authority in its pseudo-headers.
    let uri = match protocol {
        Protocol::Http1 => path.to_owned(),
        Protocol::H2c => format!("http://{addr}{path}"),
    };
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if protocol == Protocol::Http1 {
        builder = builder.header("host", addr.to_string());
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    let sent_at = Instant::now();
    let (response, connection) = match protocol {
        Protocol::Http1 => {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("handshake");
            let connection = tokio::spawn(async move {
                let _ = connection.await;
            });
            (sender.send_request(request).await, connection)
        }
        Protocol::H2c => {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            let connection = tokio::spawn(async move {
                let _ = connection.await;
            });
            (sender.send_request(request).await, connection)
        }
    };
    let response = response.expect("a response head from the proxy");
    let (parts, body) = response.into_parts();
    OpenStream {
        sent_at,
        status: parts.status,
        headers: parts.headers,
        body,
        connection,
    }
}

impl OpenStream {
    /// The next data frame, `None` at a clean end, `Some(Err)` for a broken stream.
    pub async fn next_frame(&mut self) -> Option<Result<(Instant, Bytes), String>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(Ok((Instant::now(), data)));
                    }
                }
                Err(err) => return Some(Err(err.to_string())),
            }
        }
    }

    /// Reads to the end.
    pub async fn collect(mut self) -> Streamed {
        let mut frames = Vec::new();
        let mut error = None;
        while let Some(frame) = self.next_frame().await {
            match frame {
                Ok(frame) => frames.push(frame),
                Err(err) => {
                    error = Some(err);
                    break;
                }
            }
        }
        Streamed {
            sent_at: self.sent_at,
            status: self.status,
            headers: self.headers,
            frames,
            error,
            ended_at: Instant::now(),
        }
    }

    /// Reads to the end a stream whose `first` frame was already taken with
    /// [`OpenStream::next_frame`]; the result holds every frame, the first included.
    pub async fn collect_after(self, first: (Instant, Bytes)) -> Streamed {
        let mut streamed = self.collect().await;
        streamed.frames.insert(0, first);
        streamed
    }

    /// Hangs up: the connection is closed at once.
    pub fn disconnect(self) {
        self.connection.abort();
        drop(self.body);
    }
}

/// POSTs and reads the whole response.
pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Streamed {
    open(addr, path, body).await.collect().await
}

/// GETs a path and returns status and body text.
pub async fn get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let streamed = open_with(addr, Protocol::Http1, "GET", path, "", &[])
        .await
        .collect()
        .await;
    (streamed.status, streamed.text())
}

/// Reads the answer on `stream` to its last chunk (`0\r\n\r\n`), so that its request has ended
/// when this returns; panics if the connection closes first.
pub async fn read_chunked_answer(stream: &mut TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    while !answer.ends_with(b"0\r\n\r\n") {
        let mut buffer = [0u8; 1024];
        let n = stream.read(&mut buffer).await.expect("read");
        assert!(n > 0, "answered: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..n]);
    }
    answer
}
