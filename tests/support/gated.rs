//! A backend whose streams the test, not a timer, holds open.
//!
//! A scripted pause ("the rest of the stream after 300 ms") makes a test a race on a loaded machine:
//! the stream may end before the test has done what must happen while it is in flight (a reload,
//! a shutdown, a client leaving). Here each stream writes its first events at once and, while the
//! gate is shut, holds the rest until the test opens it.
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::backend::{read_request, Seen};
use super::{events_of, fixture};

/// A running gated backend streaming `vllm-chat-usage.sse`.
pub struct Gated {
    pub url: String,
    /// Each request, as the backend read it.
    pub requests: mpsc::UnboundedReceiver<Seen>,
    gate: watch::Sender<bool>,
}

impl Gated {
    /// Starts with the gate `open` or shut; a stream that starts while it is shut writes its first
    /// `held_after` events and holds the rest until [`Gated::open`].
    pub async fn start(open: bool, held_after: usize) -> Gated {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (gate, opened) = watch::channel(open);
        let (seen, requests) = mpsc::unbounded_channel();
        let events = events_of(&fixture("vllm-chat-usage.sse"));
        assert!(
            held_after < events.len(),
            "the fixture has {} events",
            events.len()
        );
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (events, opened, seen) = (events.clone(), opened.clone(), seen.clone());
                tokio::spawn(serve(stream, events, held_after, opened, seen));
            }
        });
        Gated {
            url,
            requests,
            gate,
        }
    }

    /// Lets every stream, held or to come, run to its end.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// Holds the streams that start from now on after their first events.
    pub fn close(&self) {
        self.gate.send_replace(false);
    }
}

const STREAM_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// One HTTP chunk of `bytes`.
fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
    chunk.extend_from_slice(bytes);
    chunk.extend_from_slice(b"\r\n");
    chunk
}

async fn serve(
    mut stream: TcpStream,
    events: Vec<Vec<u8>>,
    held_after: usize,
    mut opened: watch::Receiver<bool>,
    seen: mpsc::UnboundedSender<Seen>,
) {
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let _ = seen.send(request);
        let mut first = STREAM_HEAD.to_vec();
        first.extend(events[..held_after].iter().flat_map(|event| chunk(event)));
        if stream.write_all(&first).await.is_err() || opened.wait_for(|open| *open).await.is_err() {
            return;
        }
        let mut rest: Vec<u8> = events[held_after..]
            .iter()
            .flat_map(|event| chunk(event))
            .collect();
        rest.extend_from_slice(b"0\r\n\r\n");
        if stream.write_all(&rest).await.is_err() {
            return;
        }
    }
}
