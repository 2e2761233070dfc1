use super::*;

fn parse_all(wire: &[u8], method: &Method) -> Result<Option<Head>, HeadError> {
    let mut buf = BytesMut::from(wire);
    parse(&mut buf, method)
}

fn head(wire: &str) -> Head {
    parse_all(wire.as_bytes(), &Method::POST)
        .expect("valid head")
        .expect("whole head")
}

#[test]
fn a_vllm_stream_head_is_chunked_and_keeps_the_connection() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-a: 1\r\nx-a: 2\r\n\
           transfer-encoding: chunked\r\n\r\n5\r\nhello"[..],
    );
    let head = parse(&mut buf, &Method::POST)
        .expect("valid")
        .expect("whole");
    assert_eq!(head.response.status(), StatusCode::OK, "status");
    assert_eq!(head.delimiter, Delimiter::Chunked, "framing");
    assert!(
        head.keep_alive,
        "HTTP/1.1 without close keeps the connection"
    );
    let values: Vec<_> = head.response.headers().get_all("x-a").iter().collect();
    assert_eq!(values, ["1", "2"], "repeated headers kept in order");
    assert_eq!(
        &buf[..],
        b"5\r\nhello",
        "the body's first bytes stay in the buffer"
    );
}

#[test]
fn a_partial_head_waits_and_leaves_the_buffer_alone() {
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\ncontent-le"[..]);
    assert!(
        parse(&mut buf, &Method::GET)
            .expect("valid so far")
            .is_none(),
        "needs more"
    );
    assert_eq!(buf.len(), 27, "nothing consumed");
}

#[test]
fn interim_responses_are_skipped() {
    let head = head("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n");
    assert_eq!(
        head.response.status(),
        StatusCode::CREATED,
        "the final response"
    );
    assert_eq!(head.delimiter, Delimiter::Length(2), "its framing");
}

#[test]
fn framing_follows_rfc_9112_section_6_3() {
    let cases = [
        (
            "HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n",
            Delimiter::Empty,
            true,
        ),
        ("HTTP/1.1 304 Not Modified\r\n\r\n", Delimiter::Empty, true),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            Delimiter::Empty,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\n\r\n",
            Delimiter::Length(7),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 7\r\n\r\n",
            Delimiter::Chunked,
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            Delimiter::UntilClose,
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            Delimiter::Chunked,
            true,
        ),
        ("HTTP/1.1 200 OK\r\n\r\n", Delimiter::UntilClose, false),
        (
            "HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n",
            Delimiter::Length(3),
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 3\r\n\r\n",
            Delimiter::Length(3),
            false,
        ),
    ];
    for (wire, framing, keep_alive) in cases {
        let head = head(wire);
        assert_eq!(head.delimiter, framing, "framing of {wire:?}");
        assert_eq!(head.keep_alive, keep_alive, "keep-alive of {wire:?}");
    }
    let to_head = parse_all(
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
        &Method::HEAD,
    )
    .expect("valid")
    .expect("whole");
    assert_eq!(
        to_head.delimiter,
        Delimiter::Empty,
        "a HEAD response has no body"
    );
}

#[test]
fn bad_heads_are_errors() {
    for wire in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: -3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 3x\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
    ] {
        assert!(
            parse_all(wire, &Method::GET).is_err(),
            "refused: {:?}",
            String::from_utf8_lossy(wire)
        );
    }
    let endless = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES));
    assert_eq!(
        parse_all(endless.as_bytes(), &Method::GET).err(),
        Some(HeadError::TooLarge),
        "a head that never ends is bounded"
    );
}
