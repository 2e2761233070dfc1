//! News: each replica tells the others at once, over the store's pub/sub, that its load on a
//! backend changed because it placed a request there, instead of waiting for its next payload
//! up to an interval later ([`super::board`] keeps whichever is newer).
//!
//! Why: the gateway queues of four gateways released requests into the room each saw on a
//! backend at the last sync, up to 250 ms old, so together they filled it up to four times over;
//! and a chat started beside a document another gateway had put there since (docs/deploying.md,
//! "Several gateway replicas").
//!
//! Nothing of it waits on the store on the request path: a placement (a load guard made, a
//! stall mark set) marks its backend changed and wakes this replica's sync task (an atomic load,
//! and with a fleet a store and a wake; `backend/news.rs`), which writes one message for every backend marked since it last did, at most one per
//! [`GAP`] (so at most 200 a second however many requests it places), and `PUBLISH`es it on the
//! fleet's channel. A task of its own listens on the channel and hands what it hears to the sync
//! task. A message is the replica's name on its first line, then payload lines
//! ([`super::payload`]): a `stamp` and a `load` line per backend changed, zeros written.
//!
//! Off with `[fleet] news = false`, and through a Redis Cluster (where a subscriber would have
//! to pick a node): the payloads alone then carry the load, as before.
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Label};
use redis::Client;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::board::Board;
use super::payload::{self, Figures, Line, Payload, Stamp};
use super::pool::{self, SharedPool};
use crate::metrics::Metrics;
use crate::store::Connection;

/// The least time between two news of one replica.
pub const GAP: Duration = Duration::from_millis(5);
/// News heard and not yet taken by the sync task before more are dropped (counted).
const BACKLOG: usize = 1024;

/// News sent and heard, by outcome.
pub(crate) const FLEET_NEWS: &str = "tokenmeter_fleet_news_total";
/// 1 while the replica listens on its fleet's channel.
pub(crate) const FLEET_NEWS_LISTENING: &str = "tokenmeter_fleet_news_listening";

/// The news' series.
#[derive(Clone)]
struct Series {
    pub sent: Counter,
    pub failed: Counter,
    pub heard: Counter,
    pub dropped: Counter,
    pub listening: Gauge,
}

impl Series {
    fn new(metrics: &Metrics) -> Self {
        metrics.describe_counter(
            FLEET_NEWS,
            "News of this replica's load on a backend, told to the fleet as it places requests ([fleet] news): sent, failed (the store refused or did not answer), heard (from the others), dropped (heard faster than taken).",
        );
        metrics.describe_gauge(
            FLEET_NEWS_LISTENING,
            "1 while this replica listens to its fleet's news (subscribed to the store's channel).",
        );
        let outcome = |outcome: &'static str| {
            metrics.counter(FLEET_NEWS, vec![Label::new("outcome", outcome)])
        };
        Self {
            sent: outcome("sent"),
            failed: outcome("failed"),
            heard: outcome("heard"),
            dropped: outcome("dropped"),
            listening: metrics.gauge(FLEET_NEWS_LISTENING, Vec::new()),
        }
    }
}

/// A news message: `replica`'s name on the first line, then `payload`.
fn message(replica: &str, payload: &str) -> String {
    let mut message = String::with_capacity(replica.len() + 1 + payload.len());
    message.push_str(replica);
    message.push('\n');
    message.push_str(payload);
    message
}

/// A news as read: who sent it, which of its writings it is, and its load per backend.
#[derive(Debug, PartialEq)]
struct Heard<'a> {
    pub replica: &'a str,
    pub stamp: Stamp,
    pub loads: Vec<(&'a str, &'a str, Figures)>,
}

/// Reads a news `message`; `None` when it has no sender or no stamp.
fn read(message: &str) -> Option<Heard<'_>> {
    let (replica, body) = message.split_once('\n')?;
    let mut stamp = None;
    let mut loads = Vec::new();
    for line in payload::read(body) {
        match line {
            Line::Stamp(read) => stamp = Some(read),
            Line::Load {
                pool,
                backend,
                figures,
            } => loads.push((pool, backend, figures)),
            _ => {}
        }
    }
    Some(Heard {
        replica: (!replica.is_empty()).then_some(replica)?,
        stamp: stamp?,
        loads,
    })
}

/// The task listening on the fleet's channel; stopped when dropped (with the sync task that
/// holds it).
pub(super) struct Listener(JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Subscribes to `channel` through `client` and hands every message to the returned receiver,
/// subscribing again `retry` after the subscription fails or ends.
fn listen(
    client: Client,
    channel: String,
    retry: Duration,
    series: Series,
) -> (Listener, mpsc::Receiver<String>) {
    let (heard, receiver) = mpsc::channel(BACKLOG);
    let task = tokio::spawn(async move {
        loop {
            let subscribed = tokio::time::timeout(retry, async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            if let Ok(Ok(pubsub)) = subscribed {
                series.listening.set(1.0);
                let mut messages = pubsub.into_on_message();
                while let Some(message) = futures_util::StreamExt::next(&mut messages).await {
                    let Ok(text) = message.get_payload::<String>() else {
                        continue;
                    };
                    match heard.try_send(text) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => series.dropped.increment(1),
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                series.listening.set(0.0);
                tracing::debug!("fleet: the news' subscription ended; subscribing again");
            }
            if heard.is_closed() {
                return;
            }
            tokio::time::sleep(retry).await;
        }
    });
    (Listener(task), receiver)
}

/// Where news go and come from: the store's pub/sub and the news' series.
pub(super) struct NewsLink {
    client: Client,
    channel: String,
    series: Series,
}

/// The news as the sync task runs them: the task listening to the others' (stopped when
/// dropped), what it heard, and the desk this replica's placements wake. All `None` without
/// news.
pub(super) type Newsroom = (
    Option<Listener>,
    Option<mpsc::Receiver<String>>,
    Option<Arc<Notify>>,
);

impl NewsLink {
    /// The news of the fleet whose load is kept under `key`, through `client`.
    pub fn new(client: Client, key: &str, metrics: &Metrics) -> Self {
        Self {
            client,
            channel: format!("{key}:news"),
            series: Series::new(metrics),
        }
    }

    /// Starts listening to the others' news, subscribing again `retry` after a failure.
    pub fn newsroom(&self, retry: Duration) -> Newsroom {
        let (listener, heard) = listen(
            self.client.clone(),
            self.channel.clone(),
            retry,
            self.series.clone(),
        );
        (Some(listener), Some(heard), Some(Arc::new(Notify::new())))
    }

    /// Tells the others, as `replica`'s writing `stamp`, its load on every backend of `pools` it
    /// placed a request on since it last told them: one `PUBLISH` through `connection`, given up
    /// after `timeout`.
    pub async fn tell(
        &self,
        replica: &str,
        stamp: Stamp,
        pools: &[SharedPool],
        connection: &Connection,
        timeout: Duration,
    ) {
        let now = Instant::now();
        let mut payload = Payload::default();
        payload.stamp(stamp);
        let mut changed = false;
        for pool in pools {
            for backend in pool.members.backends().iter() {
                if backend.take_news() {
                    let figures = pool::own_figures(backend, now);
                    payload.posted(&backend.pool, &backend.target.label, figures);
                    changed = true;
                }
            }
        }
        if !changed {
            return;
        }
        let message = message(replica, &payload.into_string());
        let mut connection = connection.clone();
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(&self.channel).arg(message);
        let sent = tokio::time::timeout(timeout, publish.query_async::<i64>(&mut connection)).await;
        match sent {
            Ok(Ok(_)) => self.series.sent.increment(1),
            Ok(Err(_)) | Err(_) => self.series.failed.increment(1),
        }
    }

    /// Takes a news `message` another replica than `me` sent onto `board`, at `now`: the
    /// (pool, backend) pairs whose figures changed, or none.
    pub fn hear<'a>(
        &self,
        me: &str,
        board: &mut Board,
        message: &'a str,
        now: Instant,
    ) -> Vec<(&'a str, &'a str)> {
        let Some(heard) = read(message).filter(|heard| heard.replica != me) else {
            return Vec::new();
        };
        self.series.heard.increment(1);
        let named: Vec<(&str, &str)> = heard.loads.iter().map(|&(p, b, _)| (p, b)).collect();
        if board.hear(heard.replica, heard.stamp, heard.loads, now) {
            named
        } else {
            Vec::new()
        }
    }
}

/// Has every backend of `pools` wake `desk` when this replica places a request on it (a
/// backend DNS added since the last round too).
pub(super) fn attach(pools: &[SharedPool], desk: &Arc<Notify>) {
    for pool in pools {
        for backend in pool.members.backends().iter() {
            backend.attach_news(desk);
        }
    }
}

/// The next news heard; never without news.
pub(super) async fn heard(heard: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match heard {
        Some(heard) => heard.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves when this replica placed a request since it last told; never without news.
pub(super) async fn placed(desk: Option<&Notify>) {
    match desk {
        Some(desk) => desk.notified().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_its_sender_its_stamp_and_each_backends_load() {
        let mut body = payload::Payload::default();
        body.stamp(Stamp { epoch: 0xab, n: 7 });
        let figures = Figures {
            streams: 2,
            queued_tokens: 9000,
            stall: Duration::from_millis(400),
        };
        body.posted("p", "10.0.0.1:8000", figures);
        body.posted("p", "10.0.0.2:8000", Figures::default());
        let text = message("gw-1", &body.into_string());
        assert_eq!(
            text,
            "gw-1\nstamp\t00000000000000ab\t7\nload\tp\t10.0.0.1:8000\t2\t9000\t400\n\
             load\tp\t10.0.0.2:8000\t0\t0\t0\n"
        );
        assert_eq!(
            read(&text),
            Some(Heard {
                replica: "gw-1",
                stamp: Stamp { epoch: 0xab, n: 7 },
                loads: vec![
                    ("p", "10.0.0.1:8000", figures),
                    ("p", "10.0.0.2:8000", Figures::default())
                ],
            }),
            "a backend whose load fell to none is told too"
        );
        assert_eq!(read("gw-1\nload\tp\tx\t1\t0\t0\n"), None, "no stamp");
        assert_eq!(read("\nstamp\t00000000000000ab\t7\n"), None, "no sender");
        assert_eq!(read("gw-1"), None, "no body");
        assert_eq!(
            read("gw-1\nstamp\tab\t7\n"),
            None,
            "an epoch not of 16 digits"
        );
    }
}
