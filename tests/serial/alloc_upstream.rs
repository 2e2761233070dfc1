//! Reading a token stream off an upstream connection allocates nothing per chunk in the steady
//! state: a counting global allocator watches tokenmeter's upstream client decode thousands of
//! chunked vLLM SSE events from a real socket after a warm-up.
//!
//! The counter is per thread; the upstream writes from a thread of its own and the client runs
//! on a current-thread runtime on the test's thread, so only the client's work is counted.

use crate::alloc_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::BodyExt;
use tokenmeter::config::UpstreamConfig;
use tokenmeter::proxy::h1::Client;
use tokenmeter::proxy::RequestBody;

use alloc_support::allocations;

/// A vLLM chat chunk as one HTTP chunk (size line, event, CRLF).
const EVENT: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
const WARM_UP: usize = 1_000;
const MEASURED: usize = 20_000;

#[test]
fn reading_a_chunk_off_the_upstream_allocates_nothing_in_the_steady_state() {
    let _alone = crate::alone_blocking();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let upstream = std::thread::spawn(move || {
        let (socket, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(socket.try_clone().expect("clone"));
        let mut line = String::new();
        let mut length = 0;
        while reader.read_line(&mut line).expect("head") > 2 {
            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length: ") {
                length = n.trim().parse().expect("length");
            }
            line.clear();
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("body");
        let mut socket = socket;
        socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .expect("head");
        let mut chunk = format!("{:x}\r\n", EVENT.len()).into_bytes();
        chunk.extend_from_slice(EVENT);
        chunk.extend_from_slice(b"\r\n");
        let batch = chunk.repeat(100);
        for _ in 0..(WARM_UP + MEASURED + 1_000) / 100 {
            socket.write_all(&batch).expect("chunks");
        }
        socket.write_all(b"0\r\n\r\n").expect("end");
    });

    // Built outside the runtime: no idle-connection sweep task runs on this thread.
    let client = Client::new(&UpstreamConfig::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (frames, bytes, allocated) = runtime.block_on(async {
        let mut req = Request::new(RequestBody::buffered(Bytes::from_static(b"{}")));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = format!("http://{addr}/v1/chat/completions")
            .parse()
            .expect("uri");
        let mut body = client
            .request(req, None)
            .await
            .expect("response")
            .into_body();
        let (mut frames, mut bytes, mut before, mut after) = (0usize, 0usize, None, None);
        let event_bytes = |events: usize| events * EVENT.len();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("frame").into_data().expect("data");
            // A chunk that straddles two socket reads leaves as two frames; the bytes are the
            // stream's, in order.
            for (i, byte) in data.iter().enumerate() {
                assert_eq!(
                    *byte,
                    EVENT[(bytes + i) % EVENT.len()],
                    "byte {} unchanged",
                    bytes + i
                );
            }
            frames += 1;
            bytes += data.len();
            drop(data);
            if before.is_none() && bytes >= event_bytes(WARM_UP) {
                before = Some(allocations());
            } else if after.is_none() && bytes >= event_bytes(WARM_UP + MEASURED) {
                after = Some(allocations());
            }
        }
        let (before, after) = (before.expect("warmed up"), after.expect("measured"));
        (frames, bytes, after - before)
    });
    upstream.join().expect("upstream thread");
    assert_eq!(
        bytes,
        (WARM_UP + MEASURED + 1_000) * EVENT.len(),
        "every byte"
    );
    assert!(
        frames >= WARM_UP + MEASURED + 1_000,
        "at least one frame per chunk: {frames}"
    );
    assert_eq!(
        allocated, 0,
        "heap allocations while reading {MEASURED} chunks off the upstream"
    );
}
