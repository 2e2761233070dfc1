//! The example embedder: a program that runs tokenmeter inside its own process and hears of every
//! finished request, written against the API `src/lib.rs` lists at its top (`tokenmeter::{Config,
//! spawn_with_hooks, FinishHook, Finished, Outcome}`) and the testbed's simulated replica, nothing
//! deeper. If that API changes, this stops compiling; what it asserts is what an embedder relies
//! on: its hook runs once per request, with the stream's exact token count, its TTFT and how it
//! ended.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokenmeter::testbed::sim::{self, SimConfig};
use tokenmeter::{spawn_with_hooks, Config, FinishHook, Finished, Outcome};
use tokio::net::TcpListener;

use crate::support::client;

/// What the embedder keeps of a finished request: how it ended, its output tokens, its TTFT.
type Entry = (Outcome, Option<u64>, Option<Duration>);

/// Every finished request's [`Entry`].
#[derive(Debug, Default)]
struct Ledger(Mutex<Vec<Entry>>);

impl FinishHook for Ledger {
    fn finished(&self, request: &Finished<'_>) {
        let (_, output) = request.counted_tokens();
        let entry = (request.outcome, output, request.figures.ttft);
        self.0.lock().expect("ledger").push(entry);
    }
}

#[tokio::test]
async fn an_embedder_hears_of_each_stream_with_its_tokens_and_ttft() {
    let replica = sim::spawn(
        TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        SimConfig::profile("fast").expect("profile"),
    )
    .await
    .expect("the simulated replica starts");
    let mut config = Config::default();
    config.upstream.urls = vec![format!("http://{}", replica.local_addr())];
    let ledger = Arc::new(Ledger::default());
    let proxy = spawn_with_hooks(
        config,
        TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        vec![Arc::clone(&ledger) as Arc<dyn FinishHook>],
    )
    .expect("the proxy starts");

    let streamed = client::post(
        proxy.traffic_addr,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"one two three"}],"max_tokens":7,"stream":true}"#,
    )
    .await;
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    // The hook runs as the stream ends, on the connection's task; the graceful shutdown waits
    // for that task, so after it the ledger holds every ending.
    proxy.shutdown().await;
    let ended = ledger.0.lock().expect("ledger").clone();
    assert_eq!(ended.len(), 1, "one request, one ending: {ended:?}");
    let (outcome, output, ttft) = ended[0];
    assert_eq!(outcome, Outcome::Ok);
    assert_eq!(output, Some(7), "max_tokens generated, counted exactly");
    assert!(ttft.is_some(), "the first token was stamped");
}
