use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Sends `bytes` (then closes when `close`) from a client; returns the sniff result and what a
/// read on the server side gets afterwards.
async fn sniff(bytes: &'static [u8], close: bool) -> (bool, Vec<u8>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let client = tokio::spawn(async move {
        let mut client = TcpStream::connect(addr).await.expect("connect");
        client.write_all(bytes).await.expect("write");
        if close {
            client.shutdown().await.expect("shutdown");
        }
        client
    });
    let (mut server, _) = listener.accept().await.expect("accept");
    let mut client = client.await.expect("client task");
    let http1 = speaks_http1(&server).await;
    client.shutdown().await.ok();
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).await.expect("read");
    (http1, rest)
}

#[tokio::test]
async fn an_http1_request_is_http1_and_stays_unread() {
    let request: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n";
    let (http1, rest) = sniff(request, false).await;
    assert!(http1, "a POST head is HTTP/1");
    assert_eq!(rest, request, "peeking must leave every byte for hyper");
}

#[tokio::test]
async fn the_h2_preface_is_not_http1() {
    let (http1, rest) = sniff(H2_PREFACE, false).await;
    assert!(!http1, "the h2c preface goes to the auto builder");
    assert_eq!(rest, H2_PREFACE, "the preface stays in the socket");
}

#[tokio::test]
async fn a_prefix_of_the_preface_is_left_to_the_auto_builder() {
    let (http1, _) = sniff(b"PRI * HT", false).await;
    assert!(!http1, "a partial preface could still be HTTP/2");
}

#[tokio::test]
async fn a_peer_that_closes_without_a_byte_is_left_to_the_auto_builder() {
    let (http1, rest) = sniff(b"", true).await;
    assert!(!http1, "an empty read says nothing about the version");
    assert!(rest.is_empty(), "nothing was sent: {rest:?}");
}
