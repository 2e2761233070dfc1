use proptest::prelude::*;

use super::*;

const LIMIT: usize = 65_536;

fn scan(bytes: &[u8]) -> FramingScanner {
    let mut scanner = FramingScanner::new(LIMIT);
    scanner.feed(bytes);
    scanner
}

fn scan_split(bytes: &[u8], cuts: &[usize]) -> FramingScanner {
    let mut scanner = FramingScanner::new(LIMIT);
    let mut at = 0;
    for &cut in cuts {
        let cut = cut.clamp(at, bytes.len());
        scanner.feed(&bytes[at..cut]);
        at = cut;
    }
    scanner.feed(&bytes[at..]);
    scanner
}

const SMUGGLE: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

#[test]
fn both_framing_headers_flag_the_request() {
    let scanner = scan(SMUGGLE);
    assert_eq!(
        scanner.conflicting(),
        Some(0),
        "the first request is flagged"
    );
    let reversed = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n";
    assert_eq!(
        scan(reversed).conflicting(),
        Some(0),
        "in either order, any case"
    );
    let bad_length = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n";
    assert_eq!(
        scan(bad_length).conflicting(),
        Some(0),
        "an invalid length after transfer-encoding (which hyper skips unread) still conflicts"
    );
}

#[test]
fn well_framed_requests_are_followed_to_the_flagged_one() {
    let mut stream = Vec::new();
    stream.extend_from_slice(b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    stream.extend_from_slice(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    stream.extend_from_slice(
        b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
    );
    // A body that looks like a smuggling head must be read as a body.
    let decoy = b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.extend_from_slice(
        format!(
            "POST /d HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            decoy.len()
        )
        .as_bytes(),
    );
    stream.extend_from_slice(decoy);
    stream.extend_from_slice(SMUGGLE);
    let scanner = scan(&stream);
    assert_eq!(
        scanner.conflicting(),
        Some(4),
        "the fifth request, not the decoy body"
    );
    assert_eq!(scanner.heads(), 5, "five heads read");
}

#[test]
fn off_for_http2_upgrades_and_malformed_heads() {
    let h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    assert!(!scan(h2).active(), "an HTTP/2 preface turns it off");
    let mut split = FramingScanner::new(LIMIT);
    split.feed(b"PR");
    assert!(split.active(), "too early to tell");
    split.feed(b"I * HTTP/2.0\r\n");
    assert!(!split.active(), "a split preface too");
    let connect = b"CONNECT host:443 HTTP/1.1\r\n\r\nanything";
    assert!(!scan(connect).active(), "CONNECT switches protocols");
    let upgrade = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
    assert!(!scan(upgrade).active(), "upgrade switches protocols");
    assert!(
        !scan(b"garbage\r\n\r\n").active(),
        "not an HTTP/1.1 request line"
    );
    assert!(
        !scan(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n").active(),
        "chunked not last: hyper refuses it"
    );
    assert!(
        !scan(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").active(),
        "a chunk size that is not hex"
    );
    let mut long = FramingScanner::new(64);
    long.feed(b"GET / HTTP/1.1\r\n");
    long.feed(&[b'a'; 64]);
    assert!(!long.active(), "a head over the limit");
    assert_eq!(long.carry.capacity(), 0, "and its bytes released");
}

#[test]
fn a_plain_request_leaves_nothing_held() {
    let scanner = scan(b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(scanner.active(), "still following");
    assert_eq!(scanner.heads(), 1, "one head, leading empty line ignored");
    assert_eq!(
        scanner.carry.capacity(),
        0,
        "a head read in one piece is not copied"
    );
    assert_eq!(scanner.conflicting(), None, "nothing flagged");
}

/// A request with a random body framing; `smuggle` gives it both headers.
fn request(body: &[u8], chunks: &[usize], chunked: bool, smuggle: bool) -> Vec<u8> {
    let mut out = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n".to_vec();
    if chunked || smuggle {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if !chunked || smuggle {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if chunked || smuggle {
        let mut at = 0;
        for &size in chunks {
            let size = size.min(body.len() - at);
            if size == 0 {
                continue;
            }
            out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
            out.extend_from_slice(&body[at..at + size]);
            out.extend_from_slice(b"\r\n");
            at += size;
        }
        if at < body.len() {
            out.extend_from_slice(format!("{:X}\r\n", body.len() - at).as_bytes());
            out.extend_from_slice(&body[at..]);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
    } else {
        out.extend_from_slice(body);
    }
    out
}

proptest! {
    /// Any pipeline of well-framed requests, cut anywhere, is followed to its end with nothing
    /// flagged; a smuggling request placed anywhere in it is flagged at its index. Bodies are
    /// made of request-like bytes, so a lost boundary would show.
    #[test]
    fn every_split_of_a_pipeline_gives_the_same_verdict(
        requests in prop::collection::vec(
            (prop::collection::vec(prop::sample::select(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0".to_vec()), 0..200),
             prop::collection::vec(1usize..40, 0..6),
             any::<bool>()),
            1..6),
        smuggle_at in prop::option::of(0usize..6),
        cuts in prop::collection::vec(0usize..4000, 0..12),
    ) {
        let mut stream = Vec::new();
        for (i, (body, chunks, chunked)) in requests.iter().enumerate() {
            stream.extend(request(body, chunks, *chunked, smuggle_at == Some(i)));
        }
        let mut cuts = cuts;
        cuts.sort_unstable();
        let scanner = scan_split(&stream, &cuts);
        let expected = smuggle_at.filter(|&i| i < requests.len()).map(|i| i as u64);
        prop_assert_eq!(scanner.conflicting(), expected, "verdict");
        if expected.is_none() {
            prop_assert!(scanner.active(), "still following after {} requests", requests.len());
            prop_assert_eq!(scanner.heads(), requests.len() as u64, "every head found");
            prop_assert_eq!(scanner.carry.capacity(), 0, "nothing held between requests");
        }
    }
}
