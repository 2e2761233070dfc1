//! A proxy running in a background task, for tests, the demo and embedders: [`spawn`] it on bound
//! listeners, reload it, shut it down.
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::admission::Limits;
use super::reload::{self, Applied, ReloadRequest};
use super::{Server, ServerError};
use crate::config::Config;
use crate::context::FinishHook;
use crate::metrics::Metrics;

/// A running proxy started by [`spawn`] (tests and the demo use it).
#[derive(Debug)]
pub struct ServerHandle {
    pub traffic_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    /// Admission state: open connections, requests in flight, rejections.
    pub limits: Arc<Limits>,
    reloads: mpsc::Sender<ReloadRequest>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ServerHandle {
    /// Applies `config` as a reload would (SIGHUP with this file): new requests get it, streams
    /// in flight finish where they are; refused (and the running config kept) when it does not
    /// load, with the reason.
    pub async fn reload(&self, config: Config) -> Result<Applied, String> {
        let (reply, answer) = oneshot::channel();
        let request = ReloadRequest {
            trigger: reload::Trigger::Handle,
            config: Some(config),
            reply: Some(reply),
        };
        self.reloads
            .send(request)
            .await
            .map_err(|_| "the server has stopped".to_owned())?;
        answer
            .await
            .map_err(|_| "the server has stopped".to_owned())?
    }

    /// Starts the graceful shutdown and waits until it is complete.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Starts the proxy on bound listeners in a background task.
pub fn spawn(
    config: Config,
    traffic: TcpListener,
    admin: TcpListener,
) -> Result<ServerHandle, ServerError> {
    spawn_with_hooks(config, traffic, admin, Vec::new())
}

/// [`spawn`], with `hooks` run at the end of every request after the proxy's own (see
/// [`crate::context::finish`]).
pub fn spawn_with_hooks(
    config: Config,
    traffic: TcpListener,
    admin: TcpListener,
    hooks: Vec<Arc<dyn FinishHook>>,
) -> Result<ServerHandle, ServerError> {
    let traffic_addr = local_addr(&traffic)?;
    let admin_addr = local_addr(&admin)?;
    let metrics = Arc::new(Metrics::new(&config)?);
    let (stop, mut stopped) = watch::channel(false);
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let server = hooks.into_iter().try_fold(
        Server::new(config, Arc::clone(&metrics))?,
        |server, hook| Ok::<_, ServerError>(server.with_finish_hook(hook)),
    )?;
    let limits = Arc::clone(&server.limits);
    let reloads = server.reloads();
    let task = tokio::spawn(server.run(traffic, admin, shutdown));
    Ok(ServerHandle {
        traffic_addr,
        admin_addr,
        metrics,
        limits,
        reloads,
        stop,
        task,
    })
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, ServerError> {
    listener.local_addr().map_err(|source| ServerError::Bind {
        what: "local",
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        origin: "a listener the caller bound".to_owned(),
        source,
    })
}
