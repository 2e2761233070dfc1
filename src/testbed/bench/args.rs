//! `tokenmeter bench`'s command line, and the load specs it describes.
use std::path::PathBuf;
use std::time::Duration;

use super::{
    Arrival, BenchError, Dist, Endpoint, LoadMode, LoadSpec, MixedSpec, SessionSpec,
    SessionWorkload, Slo, Stop, Workload, WorkloadError,
};

/// How `--arrival` names the arrival processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalKind {
    Poisson,
    Constant,
    Gamma,
}

const WORKLOAD_HELP: &str = "\
Request classes with prompt and output length distributions.
DIST: fixed:N (or N) | uniform:A-B (inclusive) | lognormal:MEDIAN,SIGMA[,MAX] (clamped to 1..=MAX, \
default MAX = MEDIAN*e^(3*SIGMA)).
CLASS: NAME:WEIGHT:prompt=DIST:output=DIST[:header=NAME=VALUE]. Classes are separated by ';' or ','; \
weights are relative. header= adds one request header to the class's requests (e.g. a tenant: \
header=x-tenant-id=acme; the VALUE without ':', ';', ',' or spaces).
Example: \"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128\"
Prompts are N words (one token each on the simulated replica); outputs are max_tokens with ignore_eos.";

const SESSIONS_HELP: &str = "\
Multi-turn sessions instead of single requests: sessions arrive open loop at R per second \
(--arrival, default Poisson; \"inf\": all at once) for --sessions N (default 20) or --duration \
(sessions start until then, and every started session runs all its turns).
Each session picks one of --system-prompts shared system prompts, then runs --turns turns: turn 1 \
sends [system, user]; turn k+1 resends turn k's messages, the reply exactly as received and a new \
user message (--endpoint completions: the same texts joined by newlines), after an exponential \
--think-time. Per turn: --user-tokens words of question, --output-tokens of answer.
The report adds one row per turn (turns 8 and later share a row): TTFT, mean prompt tokens and the \
share of prompt tokens the server served from its prefix cache \
(usage.prompt_tokens_details.cached_tokens, or llama.cpp's timings.cache_n; \"-\" when not reported).
Example: --session-rate 0.5 --sessions 40 --turns uniform:3-6 --think-time 2s --session-header x-session-id
With --rate R and --workload W as well (one rate, and --duration), a mixed run: requests of W arrive at R \
per second while the sessions run, until the last session has ended; the report has a row per class of \
W and one for \"session\" (--output-tokens is then the sessions'; W's classes give their own).";

/// Command-line arguments of `tokenmeter bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Base URL of the OpenAI-compatible server (plain http://).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// Which API to call.
    #[arg(long, value_enum, default_value_t = Endpoint::Chat)]
    pub endpoint: Endpoint,
    /// Model name; default: the first of GET /v1/models, else "default".
    #[arg(long)]
    pub model: Option<String>,
    /// Closed loop: requests kept in flight. A comma list sweeps, e.g. 1,2,4,8 [default: 1].
    #[arg(long, value_delimiter = ',', conflicts_with = "rate")]
    pub concurrency: Vec<usize>,
    /// Open loop: arrivals per second ("inf": all at once). A comma list sweeps, e.g. 1,2,4.
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Open-loop arrival process.
    #[arg(long, value_enum, default_value_t = ArrivalKind::Poisson)]
    pub arrival: ArrivalKind,
    /// Gamma shape for --arrival gamma: <1 burstier than Poisson, 1 = Poisson [default: 1].
    #[arg(long)]
    pub burstiness: Option<f64>,
    /// Seed of the arrival process and the workload draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Requests per load point [default: 100 unless --duration].
    #[arg(long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Time per load point instead of a request count, e.g. 30s.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// A mix of request classes, e.g. "chat:0.9:prompt=uniform:200-600:output=64;doc:0.1:prompt=8000:output=128" (--help: syntax).
    #[arg(long, value_parser = parse_workload, long_help = WORKLOAD_HELP,
          conflicts_with = "prompt_tokens")]
    pub workload: Option<Workload>,
    /// Prompt length DIST of a single-class workload (words = tokens on the simulated replica).
    #[arg(long, value_parser = parse_dist, default_value = "128")]
    pub prompt_tokens: Dist,
    /// Output length DIST of a single-class workload or of each session turn (max_tokens, with ignore_eos) [default: 128].
    #[arg(long, value_parser = parse_dist)]
    pub output_tokens: Option<Dist>,
    /// TTFT target for goodput.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "800ms")]
    pub slo_ttft: Duration,
    /// TPOT target for goodput (ignored for requests with fewer than 2 output tokens).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "35ms")]
    pub slo_tpot: Duration,
    /// Gap target for goodput: a request's largest gap between token events must be within it
    /// too (the proxy's `[slo] max_gap`). Unset: goodput is vLLM's (TTFT and TPOT).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub slo_max_gap: Option<Duration>,
    /// Per-request bound, head to end of stream; past it the request counts as `timeout`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    pub timeout: Duration,
    /// Write the full results as JSON (schema: docs/bench-results.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Include per-request records in the JSON.
    #[arg(long, requires = "json")]
    pub raw: bool,
    /// Draw p50/p99 TTFT and ITL against concurrency or rate into an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Multi-turn sessions arriving at R per second (open loop), instead of single requests or with --rate and --workload (--help: details).
    #[arg(long, value_name = "R", help_heading = "Multi-turn sessions", long_help = SESSIONS_HELP,
          conflicts_with_all = ["concurrency", "requests", "prompt_tokens", "plot"])]
    pub session_rate: Option<f64>,
    /// Sessions to start [default: 20 unless --duration].
    #[arg(
        long,
        value_name = "N",
        help_heading = "Multi-turn sessions",
        requires = "session_rate",
        conflicts_with = "duration"
    )]
    pub sessions: Option<u64>,
    /// Distinct system prompts the sessions share (each session picks one uniformly).
    #[arg(
        long,
        value_name = "K",
        help_heading = "Multi-turn sessions",
        default_value_t = 4,
        requires = "session_rate"
    )]
    pub system_prompts: u32,
    /// Length DIST of each system prompt, in words (drawn once per prompt).
    #[arg(long, value_name = "DIST", help_heading = "Multi-turn sessions", value_parser = parse_dist,
          default_value = "1000", requires = "session_rate")]
    pub system_tokens: Dist,
    /// Turns per session (DIST).
    #[arg(long, value_name = "DIST", help_heading = "Multi-turn sessions", value_parser = parse_dist,
          default_value = "uniform:3-6", requires = "session_rate")]
    pub turns: Dist,
    /// Length DIST of each user message, in words.
    #[arg(long, value_name = "DIST", help_heading = "Multi-turn sessions", value_parser = parse_dist,
          default_value = "100", requires = "session_rate")]
    pub user_tokens: Dist,
    /// Mean think time between a reply and the next turn (exponential; 0s: none).
    #[arg(long, value_name = "DURATION", help_heading = "Multi-turn sessions",
          value_parser = humantime::parse_duration, default_value = "2s", requires = "session_rate")]
    pub think_time: Duration,
    /// Send a NAME header holding the session id on every turn (for header-keyed affinity in the proxy).
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "Multi-turn sessions",
        requires = "session_rate"
    )]
    pub session_header: Option<String>,
}

fn parse_workload(s: &str) -> Result<Workload, WorkloadError> {
    s.parse()
}

fn parse_dist(s: &str) -> Result<Dist, WorkloadError> {
    s.parse()
}

/// `--output-tokens` when not given.
const DEFAULT_OUTPUT_TOKENS: Dist = Dist::Fixed(128);

impl BenchArgs {
    /// The open-loop arrival process of `--arrival` and `--burstiness`.
    fn arrival(&self) -> Result<Arrival, BenchError> {
        Ok(match (self.arrival, self.burstiness) {
            (ArrivalKind::Gamma, b) => Arrival::Gamma {
                burstiness: b.unwrap_or(1.0),
            },
            (_, Some(_)) => {
                return Err(BenchError::Spec(
                    "--burstiness needs --arrival gamma".into(),
                ))
            }
            (ArrivalKind::Poisson, None) => Arrival::Poisson,
            (ArrivalKind::Constant, None) => Arrival::Constant,
        })
    }

    /// The goodput targets of `--slo-ttft`, `--slo-tpot` and `--slo-max-gap`, for a load point
    /// and a session run alike.
    fn slo(&self) -> Slo {
        Slo {
            ttft: self.slo_ttft,
            tpot: self.slo_tpot,
            max_gap: self.slo_max_gap,
        }
    }

    /// The spec shared by every point (its `mode` is the first point's) and the sweep.
    pub fn to_specs(&self) -> Result<(LoadSpec, Vec<LoadMode>), BenchError> {
        let arrival = self.arrival()?;
        let modes: Vec<LoadMode> = if !self.rate.is_empty() {
            self.rate
                .iter()
                .map(|&rate| LoadMode::Open { rate, arrival })
                .collect()
        } else if self.concurrency.is_empty() {
            vec![LoadMode::Closed { concurrency: 1 }]
        } else {
            self.concurrency
                .iter()
                .map(|&concurrency| LoadMode::Closed { concurrency })
                .collect()
        };
        let stop = match (self.requests, self.duration) {
            (_, Some(d)) => Stop::Duration(d),
            (n, None) => Stop::Requests(n.unwrap_or(100)),
        };
        let workload = match (&self.workload, self.output_tokens) {
            (Some(_), Some(_)) if self.session_rate.is_none() => {
                return Err(BenchError::Spec(
                    "--output-tokens with --workload: give each class its output=DIST".into(),
                ))
            }
            (Some(workload), _) => workload.clone(),
            (None, output) => {
                Workload::single(self.prompt_tokens, output.unwrap_or(DEFAULT_OUTPUT_TOKENS))
            }
        };
        let spec = LoadSpec {
            url: self.url.clone(),
            endpoint: self.endpoint,
            model: self.model.clone(),
            mode: modes[0],
            stop,
            workload,
            slo: self.slo(),
            seed: self.seed,
            request_timeout: self.timeout,
        };
        for &mode in &modes {
            LoadSpec {
                mode,
                ..spec.clone()
            }
            .validate()?;
        }
        Ok((spec, modes))
    }
}

impl BenchArgs {
    /// The session run these arguments describe, if `--session-rate` asks for one without
    /// `--rate` (with it, see [`to_mixed_spec`](Self::to_mixed_spec)).
    pub fn to_session_spec(&self) -> Result<Option<SessionSpec>, BenchError> {
        if self.session_rate.is_some() && !self.rate.is_empty() {
            return Err(BenchError::Spec(
                "--session-rate with --rate is a mixed run (to_mixed_spec)".into(),
            ));
        }
        self.session_part()
    }

    /// The mixed run these arguments describe, if both `--rate` and `--session-rate` are given:
    /// one rate, a `--workload` (so `--output-tokens` is the sessions' alone) and a
    /// `--duration`.
    pub fn to_mixed_spec(&self) -> Result<Option<MixedSpec>, BenchError> {
        if self.session_rate.is_none() || self.rate.is_empty() {
            return Ok(None);
        }
        let refuse = |why: &str| Err(BenchError::Spec(format!("a mixed run {why}")));
        if self.rate.len() > 1 {
            return refuse("takes one --rate, not a sweep");
        }
        if self.workload.is_none() {
            return refuse("needs --workload for its requests (--output-tokens is the sessions')");
        }
        if self.duration.is_none() {
            return refuse("stops after a --duration");
        }
        let (requests, _) = self.to_specs()?;
        let Some(sessions) = self.session_part()? else {
            return Ok(None);
        };
        let spec = MixedSpec { requests, sessions };
        spec.validate()?;
        Ok(Some(spec))
    }

    /// The session spec of `--session-rate` and the session flags.
    fn session_part(&self) -> Result<Option<SessionSpec>, BenchError> {
        let Some(rate) = self.session_rate else {
            return Ok(None);
        };
        let arrival = self.arrival()?;
        let stop = match (self.sessions, self.duration) {
            (_, Some(d)) => Stop::Duration(d),
            (n, None) => Stop::Sessions(n.unwrap_or(20)),
        };
        let spec = SessionSpec {
            url: self.url.clone(),
            endpoint: self.endpoint,
            model: self.model.clone(),
            rate,
            arrival,
            stop,
            workload: SessionWorkload {
                system_prompts: self.system_prompts,
                system_tokens: self.system_tokens,
                turns: self.turns,
                user_tokens: self.user_tokens,
                output_tokens: self.output_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS),
                think_time: self.think_time,
            },
            session_header: self.session_header.clone(),
            slo: self.slo(),
            seed: self.seed,
            request_timeout: self.timeout,
        };
        spec.validate()?;
        Ok(Some(spec))
    }
}
