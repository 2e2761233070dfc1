//! Upstream keep-alive on the token path: sequential streams through the proxy arrive at the backend
//! on one TCP connection (the pooled client reuses it), each stream complete, whether the backend
//! answers with a content length or chunked.

use crate::support;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use support::{client, config_for, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
const STREAM: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n\
    data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"}}]}\n\n\
    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n\
    data: [DONE]\n\n";

/// The stream as two frames of unknown total length: hyper sends it chunked.
struct Chunked(Vec<Bytes>);

impl Body for Chunked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop().map(|bytes| Ok(Frame::data(bytes))))
    }
}

type AnyBody = Either<Full<Bytes>, Chunked>;

fn stream_body(chunked: bool) -> AnyBody {
    if chunked {
        let (first, rest) = STREAM.split_at(STREAM.len() / 2);
        // Popped from the back: the first half goes last in the Vec.
        Either::Right(Chunked(vec![
            Bytes::from_static(rest.as_bytes()),
            Bytes::from_static(first.as_bytes()),
        ]))
    } else {
        Either::Left(Full::new(Bytes::from_static(STREAM.as_bytes())))
    }
}

/// A keep-alive HTTP/1.1 backend that reports the peer address of every request it serves.
async fn backend(chunked: bool) -> (String, mpsc::UnboundedReceiver<SocketAddr>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let _ = request.into_body().collect().await;
                        let _ = tx.send(peer);
                        let mut response = Response::new(stream_body(chunked));
                        response.headers_mut().insert(
                            "content-type",
                            http::HeaderValue::from_static("text/event-stream"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, rx)
}

async fn three_streams_on_one_connection(chunked: bool) {
    let (url, mut peers) = backend(chunked).await;
    let proxy = start_proxy(config_for(&url)).await;
    let mut seen = Vec::new();
    for i in 0..3 {
        let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
        assert_eq!(streamed.status, 200, "request {i} answered");
        assert_eq!(streamed.error, None, "request {i} ended cleanly");
        assert_eq!(streamed.text(), STREAM, "request {i} streamed whole");
        seen.push(peers.recv().await.expect("the backend saw the request"));
    }
    // No race with the next request: the proxy's client checks the connection back into its pool
    // as it reads the body's end, before it can forward that end, so before the client (which
    // sends the next request only after the end) can ask again (src/proxy/h1/body.rs).
    assert!(
        seen.iter().all(|peer| *peer == seen[0]),
        "all three requests came on one upstream connection (chunked: {chunked}): {seen:?}"
    );
}

#[tokio::test]
async fn sequential_streams_reuse_one_upstream_connection_content_length() {
    three_streams_on_one_connection(false).await;
}

#[tokio::test]
async fn sequential_streams_reuse_one_upstream_connection_chunked() {
    three_streams_on_one_connection(true).await;
}
