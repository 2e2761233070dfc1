//! The client against scripted upstreams on loopback: what goes on the wire, what comes back,
//! and when a connection is reused, retried or closed.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::*;
use crate::config::UpstreamConfig;
use crate::proxy::headers::VIA;

/// What the scripted upstream does with one request on a connection.
#[derive(Clone, Copy)]
enum Reply {
    /// Writes these byte pieces, one write each, and keeps the connection.
    Pieces(&'static [&'static [u8]]),
    /// Writes the bytes, then closes the connection.
    ThenClose(&'static [u8]),
}

/// A scripted upstream: every connection answers its requests with `replies` in turn, sending
/// each request's raw bytes (head and body) to the channel. Returns the address and the number
/// of connections accepted.
async fn upstream(
    replies: &'static [Reply],
) -> (String, Arc<AtomicUsize>, mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::unbounded_channel();
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut next = 0;
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            let first = next;
            next += 1;
            tokio::spawn(async move {
                for reply in replies.iter().skip(first) {
                    let Some(request) = read_request(&mut socket).await else {
                        return;
                    };
                    let _ = tx.send(request);
                    match reply {
                        Reply::Pieces(pieces) => {
                            for piece in pieces.iter() {
                                if socket.write_all(piece).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Reply::ThenClose(bytes) => {
                            let _ = socket.write_all(bytes).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted, rx)
}

/// One request's bytes: the head, then `content-length` bytes or chunks to the last one.
async fn read_request(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        bytes.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    if let Some(len) = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse::<usize>().ok())
    {
        let mut body = vec![0u8; len];
        socket.read_exact(&mut body).await.ok()?;
        bytes.extend_from_slice(&body);
    } else if head.contains("transfer-encoding: chunked") {
        while !bytes.ends_with(b"\r\n0\r\n\r\n") && !bytes.ends_with(b"\r\n\r\n0\r\n\r\n") {
            if socket.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            bytes.push(byte[0]);
        }
    }
    Some(bytes)
}

/// The whole body of a response.
async fn body_bytes(response: Response<IncomingBody>) -> Bytes {
    let body = response.into_body().collect().await.expect("body");
    body.to_bytes()
}

/// `client`'s answer to a POST of `body` to `addr`: the head (the body is the caller's to read).
async fn answer(client: &Client, addr: &str, body: &'static str) -> Response<IncomingBody> {
    client
        .request(post(addr, body), None)
        .await
        .expect("response")
}

fn client() -> Client {
    Client::new(&UpstreamConfig::default())
}

fn post(addr: &str, body: &'static str) -> Request<RequestBody> {
    let mut req = Request::new(RequestBody::buffered(Bytes::from_static(body.as_bytes())));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = format!("http://{addr}/v1/chat/completions")
        .parse()
        .expect("uri");
    req.headers_mut()
        .insert("content-type", "application/json".parse().expect("value"));
    // The client's own framing header is replaced by the body's.
    req.headers_mut()
        .insert("transfer-encoding", "chunked".parse().expect("value"));
    req
}

const SSE_REPLY: &[Reply] = &[Reply::Pieces(&[
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    b"f\r\ndata: {\"a\":1}\n\n\r\n",
    b"f\r\ndata: {\"a\":2}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
])];

#[tokio::test]
async fn a_stream_arrives_chunk_by_chunk_and_its_connection_is_reused() {
    static TWICE: &[Reply] = &[SSE_REPLY[0], SSE_REPLY[0]];
    let (addr, accepted, mut requests) = upstream(TWICE).await;
    let client = client();
    for round in 0..2 {
        let response = answer(&client, &addr, "{\"x\":1}").await;
        assert_eq!(response.status(), StatusCode::OK, "status");
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "headers pass"
        );
        let mut body = response.into_body();
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.expect("frame").into_data().expect("data"));
        }
        assert_eq!(
            frames,
            [
                &b"data: {\"a\":1}\n\n"[..],
                b"data: {\"a\":2}\n\n",
                b"data: [DONE]\n\n"
            ],
            "one frame per upstream chunk, bytes unchanged (round {round})"
        );
        assert!(body.is_end_stream(), "ended");
        assert_eq!(client.idle_connections(&addr), 1, "pooled after the end");
        let sent = requests.recv().await.expect("request seen");
        let sent = String::from_utf8(sent).expect("ascii");
        assert!(
            sent.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
            "origin form: {sent}"
        );
        assert!(sent.contains(&format!("host: {addr}\r\n")), "host: {sent}");
        assert!(sent.contains("content-length: 7\r\n"), "length: {sent}");
        assert!(
            !sent.contains("transfer-encoding"),
            "client framing dropped: {sent}"
        );
        assert!(sent.ends_with("\r\n\r\n{\"x\":1}"), "body last: {sent}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for both"
    );
}

#[tokio::test]
async fn length_and_close_delimited_bodies() {
    static REPLIES: &[Reply] = &[
        Reply::Pieces(&[
            b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello",
            b" world",
        ]),
        Reply::ThenClose(b"HTTP/1.1 200 OK\r\n\r\nuntil the end"),
    ];
    let (addr, accepted, _requests) = upstream(REPLIES).await;
    let client = client();
    let response = answer(&client, &addr, "{}").await;
    let body = response.into_body();
    assert_eq!(
        body.size_hint().exact(),
        Some(11),
        "the whole length before any frame"
    );
    let bytes = body.collect().await.expect("body").to_bytes();
    assert_eq!(&bytes[..], b"hello world", "length-delimited");
    let response = answer(&client, &addr, "{}").await;
    let bytes = body_bytes(response).await;
    assert_eq!(&bytes[..], b"until the end", "close-delimited");
    assert_eq!(
        client.idle_connections(&addr),
        0,
        "a close-delimited exchange is not pooled"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the length body left it reusable"
    );
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_replaced() {
    static REPLIES: &[Reply] = &[
        Reply::ThenClose(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        Reply::ThenClose(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nagain"),
    ];
    let (addr, accepted, _requests) = upstream(REPLIES).await;
    let client = client();
    for expected in [&b"ok"[..], b"again"] {
        let response = answer(&client, &addr, "{}").await;
        let bytes = body_bytes(response).await;
        assert_eq!(&bytes[..], expected, "answered");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a new connection for the second"
    );
}

#[tokio::test]
async fn an_upstream_closing_mid_body_is_an_error() {
    static REPLIES: &[Reply] = &[Reply::ThenClose(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
    )];
    let (addr, _accepted, _requests) = upstream(REPLIES).await;
    let response = answer(&client(), &addr, "{}").await;
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(
        first.into_data().expect("data"),
        "abc",
        "what came is forwarded"
    );
    let err = body
        .frame()
        .await
        .expect("an error frame")
        .expect_err("cut short");
    assert!(matches!(err, ReadError::ClosedEarly), "{err}");
}

#[tokio::test]
async fn no_response_head_is_an_error_that_says_so() {
    static REPLIES: &[Reply] = &[Reply::ThenClose(b"HTTP/1.1 200 O")];
    let (addr, _accepted, _requests) = upstream(REPLIES).await;
    let err = client()
        .request(post(&addr, "{}"), None)
        .await
        .expect_err("no head");
    assert!(matches!(err, Error::ClosedBeforeHead), "{err}");
    assert!(!err.is_connect(), "the connection was made");

    // An address that refuses: a socket held bound and not listening (as tests/support/ports.rs's
    // `Refusing`), not a port a listener let go, which another test's `bind(0)` may take meanwhile.
    let refusing = tokio::net::TcpSocket::new_v4().expect("a socket");
    refusing
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let dead = refusing.local_addr().expect("addr").to_string();
    let err = client()
        .request(post(&dead, "{}"), None)
        .await
        .expect_err("refused");
    drop(refusing);
    assert!(err.is_connect() && !err.is_connect_timeout(), "{err}");
    assert!(err.to_string().contains("tcp connect error"), "{err}");
}

#[tokio::test]
async fn dropping_the_body_closes_the_upstream_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let upstream = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        read_request(&mut socket).await.expect("request");
        socket
            .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
            .await
            .expect("write");
        let mut rest = Vec::new();
        // Returns when the proxy side closes.
        socket.read_to_end(&mut rest).await.map(|_| rest.len())
    });
    let response = answer(&client(), &addr, "{}").await;
    let mut body = response.into_body();
    body.frame().await.expect("frame").expect("data");
    drop(body);
    // The close is sent when the body drops; 5 s only bounds a broken test (the read would
    // otherwise wait forever), and is seconds so that a loaded machine never reaches it.
    let after = tokio::time::timeout(Duration::from_secs(5), upstream)
        .await
        .expect("the upstream sees the close")
        .expect("task");
    assert_eq!(after.expect("read"), 0, "nothing more was sent");
}

#[tokio::test]
async fn a_streamed_request_body_of_unknown_length_goes_chunked() {
    // A request body hyper could not size (h2 without content-length) is simulated by a
    // hyper server receiving a chunked request and handing its Incoming to the client.
    static REPLIES: &[Reply] = &[Reply::Pieces(&[
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
    ])];
    let (addr, _accepted, mut requests) = upstream(REPLIES).await;
    let front = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let front_addr = front.local_addr().expect("addr");
    let target = addr.clone();
    tokio::spawn(async move {
        let (socket, _) = front.accept().await.expect("accept");
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let target = target.clone();
            async move {
                let (mut parts, body) = req.into_parts();
                parts.uri = format!("http://{target}/upload").parse().expect("uri");
                let req = Request::from_parts(parts, RequestBody::Streaming(body));
                let response = client().request(req, None).await.expect("upstream");
                Ok::<_, std::convert::Infallible>(
                    response.map(|_| http_body_util::Empty::<Bytes>::new()),
                )
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(socket), service)
            .await;
    });
    let mut socket = TcpStream::connect(front_addr).await.expect("connect");
    socket
        .write_all(b"PUT /upload HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n")
        .await
        .expect("write");
    // (5 s bounds a broken test only: the request is sent at once.)
    let sent = tokio::time::timeout(Duration::from_secs(5), requests.recv())
        .await
        .expect("the request reached the upstream")
        .expect("request");
    let sent = String::from_utf8(sent).expect("ascii");
    assert!(
        sent.contains("transfer-encoding: chunked\r\n"),
        "chunked: {sent}"
    );
    let body = &sent[sent.find("\r\n\r\n").expect("head end") + 4..];
    let mut decoder = chunked::Decoder::default();
    let mut buf = bytes::BytesMut::from(body.as_bytes());
    let mut data = Vec::new();
    while let chunked::Step::Data(piece) = decoder.decode(&mut buf).expect("valid") {
        data.extend_from_slice(&piece);
    }
    assert_eq!(data, b"abcdef", "every byte of the streamed body");
}

#[tokio::test]
async fn an_answer_before_the_body_is_read_reaches_the_client() {
    // The upstream reads the head only and refuses the upload without reading it; the body is
    // larger than both sockets' buffers, so the write cannot finish until something reads it.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let upstream = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).await.expect("head");
            head.push(byte[0]);
        }
        socket
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 7\r\n\r\ntoo big")
            .await
            .expect("answer");
        // Holds the connection open without reading, as a server that waits for the client to
        // give up would, until the test ends.
        std::future::pending::<()>().await;
        drop(socket);
    });
    let client = client();
    let mut req = Request::new(RequestBody::buffered(Bytes::from(vec![b'x'; 32 << 20])));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = format!("http://{addr}/v1/audio/transcriptions")
        .parse()
        .expect("uri");
    // Without the answer the write would wait forever (nobody reads the upload): the bound only
    // turns that into a failure, and is seconds so that a loaded machine never reaches it.
    let response = tokio::time::timeout(Duration::from_secs(10), client.request(req, None))
        .await
        .expect("the answer arrives while the body is still being written")
        .expect("response");
    assert_eq!(
        response.status(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "the upstream's answer"
    );
    let body = body_bytes(response).await;
    assert_eq!(&body[..], b"too big", "its body");
    assert_eq!(
        client.idle_connections(&addr),
        0,
        "a connection whose request was not sent whole is not reused"
    );
    upstream.abort();
}

#[tokio::test]
async fn a_named_client_appends_its_id_to_the_hop_header_in_one_line() {
    static THREE: &[Reply] = &[SSE_REPLY[0], SSE_REPLY[0], SSE_REPLY[0]];
    let (addr, _, mut requests) = upstream(THREE).await;
    let ours = InstanceId::random();
    let named = client().naming(ours.clone());
    let via_lines = |sent: Vec<u8>| -> Vec<String> {
        String::from_utf8(sent)
            .expect("ascii")
            .lines()
            .filter_map(|line| line.strip_prefix("x-tokenmeter-via: "))
            .map(str::to_owned)
            .collect()
    };
    let send = |client: &Client, earlier: &[&'static str]| {
        let mut req = post(&addr, "{}");
        for value in earlier {
            req.headers_mut()
                .append(VIA, http::HeaderValue::from_static(value));
        }
        let client = client.clone();
        async move {
            let response = client.request(req, None).await.expect("response");
            body_bytes(response).await;
        }
    };

    send(&named, &[]).await;
    let first = via_lines(requests.recv().await.expect("sent"));
    assert_eq!(first, [ours.to_string()], "from a client: our id alone");

    send(&named, &["aaaaaaaaaaaaaaaa", "b, c"]).await;
    let chained = via_lines(requests.recv().await.expect("sent"));
    assert_eq!(
        chained,
        [format!("aaaaaaaaaaaaaaaa, b, c, {ours}")],
        "earlier hops first, every line joined into one, ours last"
    );

    send(&client(), &["aaaaaaaaaaaaaaaa"]).await;
    let unnamed = via_lines(requests.recv().await.expect("sent"));
    assert_eq!(
        unnamed,
        ["aaaaaaaaaaaaaaaa"],
        "a client of no server passes the header as it came"
    );
}
