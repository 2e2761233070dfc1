//! The routing service: between the meter (which buffered the body) and forwarding.
//!
//! Per request: estimate the prompt, plan the candidate pools from the rules, pick a backend by
//! power of two choices, and put its [`Target`](crate::proxy::Target) and an [`InFlight`] load guard in the request
//! extensions for [`crate::proxy::Forward`]. A failure before any response byte (connect refused or
//! timed out, a connection that broke before the head) is retried on another backend, of the same
//! pool first, up to `routing.retries` times; nothing was streamed, so a retry cannot duplicate
//! output. Once a response head is back, the request is never retried. Every outcome feeds the
//! backend's passive health ([`super::health`] says what counts): connection failures count
//! outright, answer failures (5xx, a response-head timeout) make a run that the backend's health
//! endpoint must confirm, and a 5xx to a body that is not valid JSON does not count.
//!
//! While a model's prompt ratio is untrusted, a request whose pool depends on it (its estimate
//! could fall on either side of a rule's `min_prompt_tokens`) first asks a backend's tokenizer
//! for the exact count, for at most `routing.tokenize_timeout`; others send a sample in the
//! background ([`super::tokenize`]).
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Extensions, HeaderMap, Method, Request, Response, Uri, Version};
use http_body::Body;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::estimate::{self, Calibrator, PromptEstimate, PromptSize};
use super::health::{EjectPolicy, Failure, Verdict};
use super::pools::{Backend, LoadGuard, Pool};
use super::rules::{Facts, Plan, Rules};
use super::{balance, probe, tokenize, RouteError};
use crate::config::Config;
use crate::meter::layer::BufferedBody;
use crate::meter::request::RequestFacts;
use crate::metrics::Metrics;
use crate::proxy::client::UpstreamClient;
use crate::proxy::{InFlight, ProxyError, RequestBody, UpstreamBody};

/// Background tokenizer samples are taken of prompts at least this long: a shorter one says more
/// about its chat template than about its tokenizer.
const MIN_SAMPLE_BYTES: u64 = 256;

/// A request extension the meter creates and the router fills with the pool it chose, so the
/// `pool` label is known for errors as well as responses.
#[derive(Debug, Clone, Default)]
pub struct PoolSlot(Arc<Mutex<Option<Arc<str>>>>);

impl PoolSlot {
    pub fn set(&self, pool: &Arc<str>) {
        *self.lock() = Some(Arc::clone(pool));
    }

    pub fn get(&self) -> Option<Arc<str>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<str>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The pools, rules, calibration and health policy, shared by every request.
#[derive(Debug)]
pub struct Router {
    pub(crate) pools: Vec<Arc<Pool>>,
    rules: Rules,
    calibrator: Arc<Calibrator>,
    metrics: Arc<Metrics>,
    pub(crate) policy: EjectPolicy,
    retries: u32,
    fallback: bool,
    pub(crate) dns_refresh: Duration,
    /// Bound on one active health check or scrape.
    pub(crate) probe_timeout: Duration,
    tokenize: bool,
    tokenize_timeout: Duration,
    /// The client for the router's own requests (confirming checks, tokenizer calls); set once
    /// by [`Router::connect`]. Without it (a router used on its own) neither happens.
    client: OnceLock<UpstreamClient>,
}

impl Router {
    /// Builds the pools (the implicit `default` one when none are configured) and compiles the rules.
    pub fn from_config(config: &Config, metrics: Arc<Metrics>) -> Result<Self, RouteError> {
        let pools = config
            .effective_pools()
            .iter()
            .map(|pool| {
                Pool::new(pool, Some(Arc::clone(&metrics)))
                    .map(Arc::new)
                    .map_err(|source| RouteError::Target {
                        pool: pool.name.clone(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<&str> = pools.iter().map(|p| &*p.name).collect();
        let rules = Rules::new(&config.rules, &names)?;
        let routing = &config.routing;
        let priors: Vec<(Arc<str>, f64)> = routing
            .model_tokens_per_byte
            .iter()
            .map(|(model, ratio)| (metrics.model_label(Some(model)), *ratio))
            .collect();
        Ok(Self {
            pools,
            rules,
            calibrator: Arc::new(
                Calibrator::new(
                    routing.prior_tokens_per_byte,
                    routing.calibration_window,
                    Some(Arc::clone(&metrics)),
                )
                .with_priors(priors),
            ),
            metrics,
            policy: EjectPolicy::from_config(routing),
            retries: routing.retries,
            fallback: routing.fallback,
            dns_refresh: routing.dns_refresh,
            probe_timeout: config.upstream.connect_timeout + Duration::from_secs(1),
            tokenize: routing.tokenize,
            tokenize_timeout: routing.tokenize_timeout,
            client: OnceLock::new(),
        })
    }

    /// Gives the router the client for its own requests to backends (health checks that confirm
    /// answer failures, tokenizer calls). The server does this once at start.
    pub fn connect(&self, client: &UpstreamClient) {
        let _ = self.client.set(client.clone());
    }

    /// The pools, in configuration order.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// The prompt calibration (shared with every [`PromptEstimate`]).
    pub fn calibrator(&self) -> &Arc<Calibrator> {
        &self.calibrator
    }

    /// The backend to try next, and why its pool: `rule`, `spill`, `fallback`, or `panic` when
    /// every backend the plan allows is ejected (then the first pool's backends are balanced over
    /// whatever their health; see [`balance::choose_ignoring_health`]).
    fn pick(
        &self,
        plan: &Plan,
        tried: &[Arc<Backend>],
        now: Instant,
    ) -> Option<(usize, Arc<Backend>, &'static str)> {
        let mut rng = rand::thread_rng();
        let mut reason = "rule";
        for (i, &index) in plan.pools.iter().enumerate() {
            if i > 0 && reason == "fallback" && !self.fallback {
                break;
            }
            let pool = &self.pools[index];
            let spill = i == 0
                && plan.pools.len() > 1
                && plan
                    .spill_queue_tokens
                    .is_some_and(|limit| pool.shortest_queue(now).is_some_and(|q| q > limit));
            if spill {
                reason = "spill";
                continue;
            }
            if let Some(backend) = balance::choose(pool, now, tried, &mut rng) {
                return Some((index, backend, reason));
            }
            reason = "fallback";
        }
        let first = *plan.pools.first()?;
        balance::choose_ignoring_health(&self.pools[first], tried, &mut rng)
            .map(|backend| (first, backend, "panic"))
    }

    async fn route<S>(
        self: Arc<Self>,
        mut inner: S,
        req: Request<RequestBody>,
    ) -> Result<Response<UpstreamBody>, ProxyError>
    where
        S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = ProxyError>,
    {
        let model = req
            .extensions()
            .get::<RequestFacts>()
            .and_then(|facts| facts.model.clone());
        let model_label = self.metrics.model_label(model.as_deref());
        let buffered = req
            .extensions()
            .get::<BufferedBody>()
            .map(|body| body.0.clone());
        // A buffered chat / completions body the meter could not read as a JSON object: whatever
        // the backend answers, the request was at fault.
        let malformed = buffered.is_some() && req.extensions().get::<RequestFacts>().is_none();
        let size = buffered.as_deref().map(estimate::prompt_size);
        let path = req.uri().path().to_owned();
        let mut estimated = size.map_or(0, |size| self.calibrator.estimate(&model_label, size));
        if let (Some(size), Some(body)) = (size, &buffered) {
            if let Some(counted) = self
                .count_untrusted(&path, model.as_deref(), &model_label, size, body)
                .await
            {
                estimated = counted;
            }
        }
        let plan = self.rules.plan(Facts {
            path: &path,
            model: model.as_deref(),
            prompt_tokens: estimated,
        });
        let slot = req.extensions().get::<PoolSlot>().cloned();
        if let (Some(slot), Some(&first)) = (&slot, plan.pools.first()) {
            slot.set(&self.pools[first].name);
        }
        let replay = if self.retries > 0 {
            Replay::of(&req)
        } else {
            None
        };
        let mut pending = Some(req);
        let mut tried: Vec<Arc<Backend>> = Vec::new();
        let mut last_pool = None;
        let mut last_error = None;
        for _attempt in 0..=self.retries {
            let Some((index, backend, reason)) = self.pick(&plan, &tried, Instant::now()) else {
                break;
            };
            let Some(mut request) = pending
                .take()
                .or_else(|| replay.as_ref().map(Replay::build))
            else {
                break;
            };
            if let Some(failed) = tried.last() {
                failed.retried();
            }
            let pool = &self.pools[index];
            if last_pool != Some(index) {
                self.metrics.route_decision(&pool.name, reason);
                last_pool = Some(index);
            }
            if let Some(slot) = &slot {
                slot.set(&pool.name);
            }
            let guard = LoadGuard::new(Arc::clone(&backend), estimated);
            request.extensions_mut().insert(backend.target.clone());
            request.extensions_mut().insert(InFlight(Arc::new(guard)));
            let result = match inner.ready().await {
                Ok(service) => service.call(request).await,
                Err(err) => Err(err),
            };
            match result {
                Ok(mut response) => {
                    if !response.status().is_server_error() {
                        backend.on_success();
                    } else if !malformed {
                        self.failed(pool, &backend, Failure::Answer);
                    }
                    if let Some(size) = size {
                        response.extensions_mut().insert(PromptEstimate {
                            model: model_label,
                            size,
                            estimated_tokens: estimated,
                            calibrator: Arc::clone(&self.calibrator),
                        });
                    }
                    return Ok(response);
                }
                Err(err) => {
                    let before_head = matches!(
                        err,
                        ProxyError::Connect { .. } | ProxyError::Upstream { .. }
                    );
                    if before_head {
                        self.failed(pool, &backend, Failure::Connection);
                    } else if matches!(err, ProxyError::ResponseTimeout { .. }) {
                        self.failed(pool, &backend, Failure::Answer);
                    }
                    if !before_head || replay.is_none() {
                        return Err(err);
                    }
                    tracing::debug!(error = %err, "failed before any response byte: retrying elsewhere");
                    tried.push(backend);
                    last_error = Some(err);
                }
            }
        }
        Err(last_error.unwrap_or(ProxyError::NoUpstream))
    }

    /// Reports a failure to the backend's health; a run of answer failures has its health
    /// endpoint checked (see [`probe::confirm`]).
    fn failed(&self, pool: &Pool, backend: &Arc<Backend>, failure: Failure) {
        let verdict = backend.on_failure(Instant::now(), &self.policy, failure);
        if verdict == Verdict::Confirm {
            if let Some(client) = self.client.get() {
                probe::confirm(
                    client,
                    backend,
                    &pool.health_path,
                    self.policy,
                    self.probe_timeout,
                );
            }
        }
    }

    /// For a model whose prompt ratio is not trusted yet: when the prompt's pool depends on its
    /// true length (the low and high ends of [`Calibrator::range`] plan different first pools),
    /// asks a backend's tokenizer and returns the exact count, waiting at most
    /// `tokenize_timeout`; otherwise starts a background sample (at most one per model) and
    /// returns `None`. The count teaches the calibration either way, even when it comes after
    /// the wait was given up.
    async fn count_untrusted(
        self: &Arc<Self>,
        path: &str,
        model: Option<&str>,
        label: &Arc<str>,
        size: PromptSize,
        body: &Bytes,
    ) -> Option<u64> {
        let client = self.client.get()?;
        if !self.tokenize || size.text_bytes == 0 || self.calibrator.trusted(label) {
            return None;
        }
        let (low, high) = self.calibrator.range(label, size);
        let first_pool = |prompt_tokens| {
            self.rules
                .plan(Facts {
                    path,
                    model,
                    prompt_tokens,
                })
                .pools
                .first()
                .copied()
        };
        let decides = first_pool(low) != first_pool(high);
        if !decides && (size.text_bytes < MIN_SAMPLE_BYTES || !self.calibrator.claim_sample(label))
        {
            return None;
        }
        let estimated = self.calibrator.estimate(label, size);
        let Some(backend) = self.tokenizer(first_pool(estimated)) else {
            if !decides {
                self.calibrator.end_sample(label);
            }
            return None;
        };
        let text = estimate::prompt_text(body)?;
        let mode = if decides { "wait" } else { "background" };
        let router = Arc::clone(self);
        let client = client.clone();
        let model = model.map(str::to_owned);
        let label = Arc::clone(label);
        let timeout = self.probe_timeout.max(self.tokenize_timeout);
        let ask = tokio::spawn(async move {
            let counted = tokenize::ask(&client, &backend, model.as_deref(), &text, timeout).await;
            match &counted {
                Ok(tokens) => router.calibrator.learn(&label, size.text_bytes, *tokens),
                Err(err) => {
                    tracing::debug!(error = %err, backend = &*backend.target.label, "tokenize failed");
                    router.calibrator.end_sample(&label);
                }
            }
            let result = counted.as_ref().map_or_else(|err| err.as_str(), |_| "ok");
            router.metrics.prompt_tokenize(&label, mode, result);
            counted.ok().map(|tokens| size.token_ids + tokens)
        });
        if !decides {
            return None;
        }
        match tokio::time::timeout(self.tokenize_timeout, ask).await {
            Ok(joined) => joined.ok().flatten(),
            Err(_elapsed) => None,
        }
    }

    /// A backend to ask for a token count: an available one that serves `/tokenize`, from the
    /// pool the estimate points at first, else from any pool.
    fn tokenizer(&self, preferred: Option<usize>) -> Option<Arc<Backend>> {
        let now = Instant::now();
        let pools = preferred
            .and_then(|index| self.pools.get(index))
            .into_iter()
            .chain(self.pools.iter());
        pools
            .flat_map(|pool| pool.backends().iter().cloned().collect::<Vec<_>>())
            .find(|backend| backend.tokenizes() && backend.available(now))
    }
}

/// What is needed to send a request again: its head and its (buffered or empty) body.
#[derive(Debug)]
struct Replay {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
}

impl Replay {
    /// `None` for a streamed body: once sent it is gone, so such a request is not retried.
    fn of(req: &Request<RequestBody>) -> Option<Self> {
        let body = match req.body() {
            RequestBody::Buffered(_) => req.extensions().get::<BufferedBody>()?.0.clone(),
            RequestBody::Streaming(incoming) if incoming.is_end_stream() => Bytes::new(),
            RequestBody::Streaming(_) => return None,
        };
        Some(Self {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: req.headers().clone(),
            extensions: req.extensions().clone(),
            body,
        })
    }

    fn build(&self) -> Request<RequestBody> {
        let mut req = Request::new(RequestBody::buffered(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        *req.extensions_mut() = self.extensions.clone();
        req
    }
}

/// Configures [`Route`].
#[derive(Debug, Clone)]
pub struct RouteLayer {
    router: Arc<Router>,
}

impl RouteLayer {
    pub fn new(router: Arc<Router>) -> Self {
        Self { router }
    }
}

impl<S> Layer<S> for RouteLayer {
    type Service = Route<S>;

    fn layer(&self, inner: S) -> Route<S> {
        Route {
            inner,
            router: Arc::clone(&self.router),
        }
    }
}

/// Routes each request to a backend of the right pool.
#[derive(Debug, Clone)]
pub struct Route<S> {
    inner: S,
    router: Arc<Router>,
}

impl<S> Service<Request<RequestBody>> for Route<S>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = ProxyError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<UpstreamBody>;
    type Error = ProxyError;
    // One allocation per request: the future spans the retries.
    type Future = Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, ProxyError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        // The inner service's readiness is awaited per attempt inside the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody>) -> Self::Future {
        let inner = self.inner.clone();
        let router = Arc::clone(&self.router);
        Box::pin(router.route(inner, req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BalanceLoad, PoolConfig, RuleConfig};

    fn router(edit: impl FnOnce(&mut Config)) -> Router {
        let pools = vec![
            PoolConfig {
                name: "prefill".to_owned(),
                urls: vec!["http://127.0.0.1:8101".to_owned()],
                balance: BalanceLoad::PromptTokens,
                ..PoolConfig::default()
            },
            PoolConfig {
                name: "decode".to_owned(),
                urls: vec!["http://127.0.0.1:8102".to_owned()],
                ..PoolConfig::default()
            },
        ];
        let rules = vec![
            RuleConfig {
                pool: "prefill".to_owned(),
                min_prompt_tokens: Some(2048),
                spill_queue_tokens: Some(10_000),
                ..RuleConfig::default()
            },
            RuleConfig {
                pool: "decode".to_owned(),
                ..RuleConfig::default()
            },
        ];
        let mut config = Config {
            pools,
            rules,
            ..Config::default()
        };
        edit(&mut config);
        config.validate().expect("valid config");
        let metrics = Arc::new(Metrics::new(&config).expect("metrics"));
        Router::from_config(&config, metrics).expect("router")
    }

    fn long_plan(router: &Router) -> Plan {
        router.rules.plan(Facts {
            path: "/v1/chat/completions",
            model: None,
            prompt_tokens: 4000,
        })
    }

    fn picked(router: &Router, plan: &Plan) -> Option<(String, &'static str)> {
        router
            .pick(plan, &[], Instant::now())
            .map(|(i, _, reason)| (router.pools[i].name.to_string(), reason))
    }

    #[test]
    fn falls_back_when_the_pool_has_no_healthy_backend() {
        let router = router(|_| {});
        let plan = long_plan(&router);
        assert_eq!(
            picked(&router, &plan),
            Some(("prefill".to_owned(), "rule")),
            "a long prompt goes to prefill"
        );
        let prefill = Arc::clone(&router.pools[0].backends()[0]);
        for _ in 0..router.policy.after {
            prefill.on_failure(Instant::now(), &router.policy, Failure::Connection);
        }
        assert_eq!(
            picked(&router, &plan),
            Some(("decode".to_owned(), "fallback")),
            "prefill ejected: the next matching rule's pool"
        );
        let strict = self::router(|c| c.routing.fallback = false);
        let prefill = Arc::clone(&strict.pools[0].backends()[0]);
        for _ in 0..strict.policy.after {
            prefill.on_failure(Instant::now(), &strict.policy, Failure::Connection);
        }
        assert_eq!(
            picked(&strict, &long_plan(&strict)),
            Some(("prefill".to_owned(), "panic")),
            "fallback disabled: the rule's pool, whatever its health (panic mode)"
        );
        let decode = Arc::clone(&router.pools[1].backends()[0]);
        for _ in 0..router.policy.after {
            decode.on_failure(Instant::now(), &router.policy, Failure::Connection);
        }
        assert_eq!(
            picked(&router, &plan),
            Some(("prefill".to_owned(), "panic")),
            "every pool ejected: the first pool of the plan, in panic mode"
        );
    }

    #[test]
    fn spills_when_the_prefill_queue_is_deeper_than_the_threshold() {
        let router = router(|_| {});
        let plan = long_plan(&router);
        let prefill = Arc::clone(&router.pools[0].backends()[0]);
        let _queued = LoadGuard::new(Arc::clone(&prefill), 10_000);
        assert_eq!(
            picked(&router, &plan),
            Some(("prefill".to_owned(), "rule")),
            "10 000 queued tokens is not more than the threshold"
        );
        let _more = LoadGuard::new(prefill, 1);
        assert_eq!(
            picked(&router, &plan),
            Some(("decode".to_owned(), "spill")),
            "10 001 queued tokens spill to decode"
        );
    }
}
