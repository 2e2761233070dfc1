use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Clients connecting at once to a listener that accepts nothing yet (a busy accept loop).
const BURST: usize = 300;

/// How long each connect is given. Not a race with the kernel's SYN retry: a connect the accept
/// queue takes completes in the kernel at once, and one whose SYN the full queue dropped never
/// completes while nothing accepts (its retries, 1 s and 3 s later, find the queue as full). So the
/// count does not depend on this bound, only on the queue; it is seconds so that a loaded machine,
/// slow to poll 300 connect tasks, still counts every connect that was taken.
const CONNECT_WITHIN: Duration = Duration::from_secs(3);

/// How many of `BURST` connects complete (the accept queue took them) while nothing accepts.
async fn connected_at_once(listener: &TcpListener) -> usize {
    let addr: SocketAddr = listener.local_addr().expect("bound");
    let mut connects = JoinSet::new();
    for _ in 0..BURST {
        connects.spawn(async move {
            tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(addr)).await
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
    // are retried, and dropped again: the queue stays full while nothing accepts.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let connected = connected_at_once(&listener).await;
    assert!(connected < BURST, "{connected} of {BURST} connected");
    assert!(
        connected >= 128,
        "{connected}: the queue holds at least its backlog"
    );
}
