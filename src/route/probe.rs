//! Background tasks of the router: DNS re-resolution, active health checks, and scraping of the
//! backends' vLLM gauges. Each runs on a fixed interval; the server aborts them at shutdown. Also
//! the proxy's own requests to a backend ([`exchange`]): the check that confirms a run of answer
//! failures ([`confirm`]) and the tokenizer calls of [`super::tokenize`].
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::backend::{Backend, Confirmation};
use super::health::EjectPolicy;
use super::members::Members;
use super::settings::Settings;
use crate::proxy::client::UpstreamClient;
use crate::proxy::RequestBody;

/// Largest `/metrics` body read from a backend.
const MAX_SCRAPE_BYTES: usize = 4 * 1024 * 1024;

/// Starts every background task the pools' members need.
pub fn spawn<'a>(
    pools: impl Iterator<Item = &'a Arc<Members>>,
    settings: &Settings,
    client: &UpstreamClient,
) -> Vec<JoinHandle<()>> {
    let (dns_refresh, policy, timeout) = (
        settings.dns_refresh,
        settings.policy,
        settings.probe_timeout,
    );
    let mut tasks = Vec::new();
    for pool in pools {
        if let Some(name) = &pool.dns {
            tasks.push(tokio::spawn(resolve_loop(
                Arc::clone(pool),
                name.clone(),
                dns_refresh,
            )));
        }
        let checks = Rounds {
            every: pool.health_check,
            path: Arc::clone(&pool.health_path),
            timeout,
        };
        tasks.extend(
            checks.spawn(pool, client, move |backend, answer| match answer {
                Ok((status, _)) if status.is_success() => backend.on_success(),
                _ => backend.eject(Instant::now(), &policy),
            }),
        );
        let scrapes = Rounds {
            every: pool.scrape_metrics,
            path: Arc::from("/metrics"),
            timeout,
        };
        tasks.extend(scrapes.spawn(pool, client, |backend, answer| {
            if let Ok((status, body)) = answer {
                if status.is_success() {
                    let gauges = VllmGauges::parse(&String::from_utf8_lossy(&body));
                    backend.set_scraped(gauges.running, gauges.waiting, gauges.kv_usage);
                }
            }
        }));
    }
    tasks
}

async fn resolve_loop(pool: Arc<Members>, name: String, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        match tokio::net::lookup_host(name.as_str()).await {
            Ok(addrs) => {
                let mut addrs: Vec<_> = addrs.collect();
                addrs.sort_unstable();
                addrs.dedup();
                pool.set_resolved(&addrs);
            }
            // Keep the last known set: passive health covers backends that really went away.
            Err(err) => {
                tracing::warn!(pool = &*pool.name, %name, error = %err, "DNS lookup failed")
            }
        }
    }
}

/// Rounds of a `GET` on every backend of a pool: the active health checks and the scrapes.
struct Rounds {
    /// Between the starts of two rounds; zero: no rounds.
    every: Duration,
    path: Arc<str>,
    /// For each backend's answer.
    timeout: Duration,
}

impl Rounds {
    /// The task that runs the rounds on `pool`'s backends (its current set at each round), all of
    /// a round's requests at once, each answer (or why there was none) handed to `then`; a round
    /// ends with its last answer. `None` when there are no rounds.
    fn spawn<F>(
        self,
        pool: &Arc<Members>,
        client: &UpstreamClient,
        then: F,
    ) -> Option<JoinHandle<()>>
    where
        F: Fn(&Backend, Result<(StatusCode, Bytes), ExchangeError>) + Send + Sync + 'static,
    {
        if self.every.is_zero() {
            return None;
        }
        let Self {
            every,
            path,
            timeout,
        } = self;
        let (pool, client, then) = (Arc::clone(pool), client.clone(), Arc::new(then));
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let mut round = JoinSet::new();
                for backend in pool.backends().iter() {
                    let backend = Arc::clone(backend);
                    let (client, path, then) =
                        (client.clone(), Arc::clone(&path), Arc::clone(&then));
                    round.spawn(async move {
                        then(&backend, get(&client, &backend, &path, timeout).await);
                    });
                }
                while round.join_next().await.is_some() {}
            }
        }))
    }
}

/// Why a probe exchange gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeError {
    Timeout,
    Failed(String),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Timeout => f.write_str("no answer in time"),
            ExchangeError::Failed(detail) => f.write_str(detail),
        }
    }
}

/// `GET path` on a backend, bounded in time and size.
async fn get(
    client: &UpstreamClient,
    backend: &Backend,
    path: &str,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), ExchangeError> {
    exchange(client, backend, Method::GET, path, Bytes::new(), timeout).await
}

/// One request of the proxy's own to a backend (a check, a scrape, a tokenizer call), bounded
/// in time and in the size of the answer read.
pub async fn exchange(
    client: &UpstreamClient,
    backend: &Backend,
    method: Method,
    path: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), ExchangeError> {
    let failed = |err: &dyn std::fmt::Display| ExchangeError::Failed(err.to_string());
    let uri = Uri::builder()
        .scheme(backend.target.scheme.clone())
        .authority(backend.target.authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|err| failed(&err))?;
    let json = !body.is_empty();
    let mut req = Request::new(RequestBody::buffered(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    if json {
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
    }
    let exchange = async {
        let response = client
            .request(req, backend.target.tls.as_ref())
            .await
            .map_err(|err| failed(&err))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_SCRAPE_BYTES)
            .collect()
            .await
            .map_err(|err| failed(&err))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ExchangeError::Timeout)?
}

/// Checks a backend whose answers failed `eject_after_failures` times in a row (a
/// [`super::health::Verdict::Confirm`]): its health endpoint decides. A failing check (an error
/// status, no answer, a refused connection) ejects it; a passing one clears its record, since
/// the failures were then the requests' doing. A backend without the endpoint (404, 405) cannot
/// be checked and stays: answers alone never eject. At most one check per backend is under way.
pub fn confirm(
    client: &UpstreamClient,
    backend: &Arc<Backend>,
    path: &Arc<str>,
    policy: EjectPolicy,
    timeout: Duration,
) {
    if !backend.start_check() {
        return;
    }
    let client = client.clone();
    let backend = Arc::clone(backend);
    let path = Arc::clone(path);
    tokio::spawn(async move {
        match get(&client, &backend, &path, timeout).await {
            Ok((status, _)) if status.is_success() => {
                tracing::info!(
                    pool = &*backend.pool,
                    backend = &*backend.target.label,
                    "answers failed but the health check passed: kept in rotation"
                );
                backend.confirmed(Confirmation::Kept);
                backend.on_success();
            }
            Ok((StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED, _)) => {
                tracing::warn!(
                    pool = &*backend.pool,
                    backend = &*backend.target.label,
                    path = &*path,
                    "answers failed and the backend has no health endpoint to confirm it \
                     (set the pool's health_path): kept in rotation"
                );
                backend.confirmed(Confirmation::Unavailable);
            }
            outcome => {
                tracing::warn!(
                    pool = &*backend.pool,
                    backend = &*backend.target.label,
                    check = ?outcome.map(|(status, _)| status),
                    "answers failed and so did the health check"
                );
                backend.confirmed(Confirmation::Ejected);
                backend.eject(Instant::now(), &policy);
            }
        }
        backend.end_check();
    });
}

/// The engine's gauges that weight a backend's load, summed over the series of every model it
/// serves: vLLM's, and SGLang's and llama.cpp's like of its requests running and waiting.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct VllmGauges {
    pub running: u64,
    pub waiting: u64,
    pub kv_usage: f64,
}

impl VllmGauges {
    /// Reads `vllm:num_requests_running` (SGLang `sglang:num_running_reqs`, llama.cpp
    /// `llamacpp:requests_processing`), `vllm:num_requests_waiting` (`sglang:num_queue_reqs`,
    /// `llamacpp:requests_deferred`) and `vllm:kv_cache_usage_perc` (a fraction in 0..=1 in vLLM
    /// V1, despite the name) from Prometheus text.
    pub fn parse(text: &str) -> Self {
        let mut gauges = VllmGauges::default();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            match name {
                "vllm:num_requests_running"
                | "sglang:num_running_reqs"
                | "llamacpp:requests_processing" => gauges.running += value.max(0.0) as u64,
                "vllm:num_requests_waiting"
                | "sglang:num_queue_reqs"
                | "llamacpp:requests_deferred" => gauges.waiting += value.max(0.0) as u64,
                "vllm:kv_cache_usage_perc" => gauges.kv_usage = gauges.kv_usage.max(value),
                _ => {}
            }
        }
        gauges
    }
}

#[cfg(test)]
mod tests;
