use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Clients connecting at once to a listener that accepts nothing yet (a busy accept loop).
const BURST: usize = 300;

/// How many of `BURST` connects complete well before a dropped SYN's one-second retry.
async fn connected_at_once(listener: &TcpListener) -> usize {
    let addr: SocketAddr = listener.local_addr().expect("bound");
    let mut connects = JoinSet::new();
    for _ in 0..BURST {
        connects.spawn(async move {
            tokio::time::timeout(Duration::from_millis(800), TcpStream::connect(addr)).await
        });
    }
    let mut streams = Vec::new();
    while let Some(done) = connects.join_next().await {
        if let Ok(Ok(stream)) = done.expect("connect task") {
            streams.push(stream);
        }
    }
    streams.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_clients_fits_in_the_accept_queue() {
    let listener = super::listen("127.0.0.1:0".parse().expect("addr"), 4096).expect("listen");
    assert_eq!(connected_at_once(&listener).await, BURST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokios_default_backlog_drops_part_of_the_burst() {
    // The control: what `TcpListener::bind` (backlog 128) does to the same burst. Dropped SYNs
    // are retried after a second, past the 800 ms each connect is given.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let connected = connected_at_once(&listener).await;
    assert!(connected < BURST, "{connected} of {BURST} connected");
    assert!(
        connected >= 128,
        "{connected}: the queue holds at least its backlog"
    );
}
