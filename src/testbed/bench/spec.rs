//! What one load point is: the target, the shape of the load (closed or open loop), when to
//! stop, what to send (the workload) and the SLO that decides goodput.
use std::time::Duration;

use hyper::Uri;
use serde::{Deserialize, Serialize};

use super::workload::Workload;
use super::BenchError;

/// Which OpenAI-compatible API to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
}

impl Endpoint {
    /// The request path below the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }
}

/// How the gaps between open-loop arrivals are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arrival {
    /// Exponential gaps (a Poisson process): what independent users look like.
    Poisson,
    /// Evenly spaced arrivals: no burst at all.
    Constant,
    /// Gamma-distributed gaps with shape `burstiness` (vLLM's `--burstiness`): below 1 is
    /// burstier than Poisson, above 1 is smoother, exactly 1 is Poisson.
    Gamma { burstiness: f64 },
}

/// Closed loop (a fixed number of users, each waiting for its answer) or open loop (arrivals
/// at a rate, whatever the server does): the second exposes queueing, the first hides it. A
/// session run is open loop in sessions, each a conversation of several turns
/// ([`super::session`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LoadMode {
    /// `concurrency` requests always in flight.
    Closed { concurrency: usize },
    /// Arrivals at `rate` requests per second (`inf`: all at once; JSON `null`).
    Open {
        #[serde(with = "inf_as_null")]
        rate: f64,
        arrival: Arrival,
    },
    /// Sessions arriving at `rate` per second (`inf`: all at once; JSON `null`), each a
    /// multi-turn conversation; run by [`run_sessions`](super::run_sessions), not `run_point`.
    Sessions {
        #[serde(with = "inf_as_null")]
        rate: f64,
        arrival: Arrival,
    },
    /// Open-loop requests at `rate` per second and sessions at `session_rate` per second
    /// against the same server at once, both with the same arrival process (independent
    /// draws); run by [`run_mixed`](super::run_mixed).
    Mixed {
        #[serde(with = "inf_as_null")]
        rate: f64,
        #[serde(with = "inf_as_null")]
        session_rate: f64,
        arrival: Arrival,
    },
}

impl LoadMode {
    /// The value a sweep varies (concurrency or rate): the x axis of the plot.
    pub fn x(&self) -> f64 {
        match *self {
            LoadMode::Closed { concurrency } => concurrency as f64,
            LoadMode::Open { rate, .. }
            | LoadMode::Sessions { rate, .. }
            | LoadMode::Mixed { rate, .. } => rate,
        }
    }

    /// A short label such as `concurrency=4`, `rate=2 (poisson)`, `sessions rate=0.5 (poisson)`
    /// or `rate=12 + sessions rate=0.6 (poisson)`.
    pub fn label(&self) -> String {
        let arrival_label = |arrival| match arrival {
            Arrival::Poisson => "poisson".to_string(),
            Arrival::Constant => "constant".to_string(),
            Arrival::Gamma { burstiness } => format!("gamma b={burstiness}"),
        };
        match *self {
            LoadMode::Closed { concurrency } => format!("concurrency={concurrency}"),
            LoadMode::Open { rate, arrival } => format!("rate={rate} ({})", arrival_label(arrival)),
            LoadMode::Sessions { rate, arrival } => {
                format!("sessions rate={rate} ({})", arrival_label(arrival))
            }
            LoadMode::Mixed {
                rate,
                session_rate,
                arrival,
            } => format!(
                "rate={rate} + sessions rate={session_rate} ({})",
                arrival_label(arrival)
            ),
        }
    }
}

/// When a load point ends. Requests already sent are always waited for (each is bounded by
/// [`LoadSpec::request_timeout`]), so every point ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Send exactly this many requests.
    Requests(u64),
    /// Send requests until this much time has passed since the point started (session runs:
    /// start sessions until then; each started session runs all its turns).
    Duration(#[serde(with = "secs")] Duration),
    /// Start exactly this many sessions (session runs only).
    Sessions(u64),
}

/// The service-level objective a request must meet to count towards goodput: the proxy's
/// `[slo]`, judged on the client's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slo {
    #[serde(rename = "ttft_s", with = "secs")]
    pub ttft: Duration,
    #[serde(rename = "tpot_s", with = "secs")]
    pub tpot: Duration,
    /// The largest gap between two token events a request may have (`[slo] max_gap`); `None`:
    /// not judged, and goodput is vLLM's (TTFT and TPOT).
    #[serde(
        rename = "max_gap_s",
        default,
        with = "some_secs",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_gap: Option<Duration>,
}

impl Default for Slo {
    fn default() -> Self {
        Slo {
            ttft: Duration::from_millis(800),
            tpot: Duration::from_millis(35),
            max_gap: None,
        }
    }
}

/// Everything one load point needs.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Base URL of the server, e.g. `http://127.0.0.1:8000` (plain HTTP).
    pub url: String,
    pub endpoint: Endpoint,
    /// The model to request; `None` asks `GET /v1/models` (first entry, else `"default"`).
    pub model: Option<String>,
    pub mode: LoadMode,
    pub stop: Stop,
    pub workload: Workload,
    pub slo: Slo,
    /// Seeds the arrival process and every request's workload sample.
    pub seed: u64,
    /// Upper bound on one request, head to end of stream; past it the request is a `timeout`.
    pub request_timeout: Duration,
}

impl LoadSpec {
    /// A spec with the defaults of the command line: chat, concurrency 1, 100 requests,
    /// 128-token prompts and outputs, SLO 800 ms / 35 ms, seed 0, 120 s request timeout.
    pub fn new(url: impl Into<String>) -> Self {
        LoadSpec {
            url: url.into(),
            endpoint: Endpoint::Chat,
            model: None,
            mode: LoadMode::Closed { concurrency: 1 },
            stop: Stop::Requests(100),
            workload: Workload::single(super::Dist::Fixed(128), super::Dist::Fixed(128)),
            slo: Slo::default(),
            seed: 0,
            request_timeout: Duration::from_secs(120),
        }
    }

    /// Checks what the types cannot: positive counts and rates, a bounded stop, a usable URL.
    pub fn validate(&self) -> Result<(), BenchError> {
        match self.mode {
            LoadMode::Closed { concurrency: 0 } => {
                return Err(BenchError::Spec("concurrency must be at least 1".into()))
            }
            LoadMode::Open { rate, arrival } => {
                validate_arrivals(rate, arrival, self.stop, "a request count")?
            }
            LoadMode::Sessions { .. } => {
                return Err(BenchError::Spec(
                    "a session load runs with run_sessions and a SessionSpec".into(),
                ))
            }
            LoadMode::Mixed { .. } => {
                return Err(BenchError::Spec(
                    "a mixed load runs with run_mixed and a MixedSpec".into(),
                ))
            }
            LoadMode::Closed { .. } => {}
        }
        validate_bounds(self.stop, self.request_timeout, Counted::Requests)?;
        self.endpoint_uri().map(|_| ())
    }

    /// The full URI of the generation endpoint.
    pub fn endpoint_uri(&self) -> Result<Uri, BenchError> {
        join_url(&self.url, self.endpoint.path())
    }
}

/// Checks an open-loop rate and arrival process: a rate > 0, an unlimited rate only with a
/// count to stop at (`count` names it), a usable gamma shape.
pub(crate) fn validate_arrivals(
    rate: f64,
    arrival: Arrival,
    stop: Stop,
    count: &str,
) -> Result<(), BenchError> {
    if rate.is_nan() || rate <= 0.0 {
        return Err(BenchError::Spec(format!("rate must be > 0, got {rate}")));
    }
    if rate.is_infinite() && matches!(stop, Stop::Duration(_)) {
        return Err(BenchError::Spec(format!(
            "rate inf sends everything at once: stop it with {count}"
        )));
    }
    if let Arrival::Gamma { burstiness } = arrival {
        if !(burstiness.is_finite() && burstiness > 0.0) {
            return Err(BenchError::Spec(format!(
                "burstiness must be a finite number > 0, got {burstiness}"
            )));
        }
    }
    Ok(())
}

/// What a run counts: which [`Stop`] counts bound it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// A request run ([`LoadSpec`]): [`Stop::Requests`] or a duration.
    Requests,
    /// A session run ([`SessionSpec`](super::SessionSpec)): [`Stop::Sessions`] or a duration.
    Sessions,
}

/// Checks what bounds every request of a run that counts `counted`: a stop it can reach (at
/// least one of what it counts, or a duration > 0) and a request timeout > 0. One place says
/// which stop fits which run.
pub(crate) fn validate_bounds(
    stop: Stop,
    request_timeout: Duration,
    counted: Counted,
) -> Result<(), BenchError> {
    let refuse = |why: &str| Err(BenchError::Spec(why.into()));
    match (stop, counted) {
        (Stop::Requests(0), Counted::Requests) => return refuse("requests must be at least 1"),
        (Stop::Sessions(0), Counted::Sessions) => return refuse("sessions must be at least 1"),
        (Stop::Duration(d), _) if d.is_zero() => return refuse("duration must be > 0"),
        (Stop::Sessions(_), Counted::Requests) => {
            return refuse("a session count stops session runs only")
        }
        (Stop::Requests(_), Counted::Sessions) => {
            return refuse("a session run stops after a number of sessions or a duration")
        }
        _ => {}
    }
    if request_timeout.is_zero() {
        return refuse("request timeout must be > 0");
    }
    Ok(())
}

/// Appends `path` to a base URL that must be plain `http://` (the client has no TLS: a load
/// generator belongs next to the server, not across the internet).
pub(crate) fn join_url(base: &str, path: &str) -> Result<Uri, BenchError> {
    let bad = |reason: &str| BenchError::Url {
        url: base.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = format!("{}{}", base.trim_end_matches('/'), path)
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// URLs are supported"));
    }
    if uri.host().is_none() {
        return Err(bad("no host"));
    }
    Ok(uri)
}

/// Durations as seconds (`f64`) in JSON, so tools read them without a duration parser.
pub(crate) mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

/// [`secs`] for an optional duration.
mod some_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::secs::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?
            .map(|v| Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// JSON has no infinity: an unlimited rate is written as `null`.
mod inf_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
    }
}
