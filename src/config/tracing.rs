//! `[tracing]`: OpenTelemetry spans over OTLP, and the opt-in `server-timing` header (see
//! [`crate::trace`]).
//!
//! Long on purpose: one table (`[tracing]`), each key beside its environment override and its
//! check.
//!
//! Off by default: with no endpoint in the file and none in the environment, no span is built and
//! nothing is exported. The standard OpenTelemetry environment variables work as in every SDK
//! ([`TracingConfig::apply_env`]); where the file and the environment both give a key, the file
//! wins (the exporter adds `OTEL_EXPORTER_OTLP_HEADERS` itself, on top of `tracing.headers`).
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::ConfigError;

/// The `[tracing]` table. The keys that an `OTEL_*` variable can also give are `Option`s, so that
/// a key the file leaves out is taken from the environment.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The OTLP collector: `http://host:4317` for gRPC, `http://host:4318` for HTTP/protobuf (a
    /// URL without a path gets `/v1/traces`). Unset: tracing is off unless the environment names
    /// one; `""`: off whatever the environment says.
    #[serde(
        serialize_with = "super::spelling::some_secret_url",
        skip_serializing_if = "Option::is_none"
    )]
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf` (the OpenTelemetry default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtlpProtocol>,
    /// Headers (or gRPC metadata) sent with every export, e.g. a collector's API key: printed
    /// with their values hidden.
    #[serde(serialize_with = "hidden_values")]
    pub headers: BTreeMap<String, String>,
    /// Which requests are recorded ([`Sampler`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler: Option<Sampler>,
    /// The fraction of new traces recorded by a `*traceidratio` sampler, 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
    /// `service.name` of the spans' resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// More resource attributes (`deployment.environment`, `k8s.pod.name`, ...); merged with
    /// `OTEL_RESOURCE_ATTRIBUTES`, the file's winning.
    pub resource_attributes: BTreeMap<String, String>,
    /// The longest one export may take (retries included); past it its spans are dropped.
    #[serde(
        with = "super::spelling::some_human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub export_timeout: Option<Duration>,
    /// Spans waiting for export, at most: past it a finished request's spans are dropped and
    /// counted (`tokenmeter_trace_spans_dropped_total{reason="queue_full"}`), never waited for.
    pub max_queue_spans: usize,
    /// Spans sent in one export, at most.
    pub max_batch_spans: usize,
    /// How long a span may wait for a batch to fill before it is sent.
    #[serde(with = "super::spelling::human_duration")]
    pub batch_delay: Duration,
    /// Answer every generation request with a `server-timing` header that splits its time before
    /// the response head (and names its trace). Off: the proxy adds nothing a client sees.
    pub server_timing: bool,
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum OtlpProtocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

/// OpenTelemetry's samplers (the values of `OTEL_TRACES_SAMPLER`). The `parentbased_*` ones
/// follow the sampled flag of a valid incoming `traceparent` and decide only for new traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    Traceidratio,
    ParentbasedAlwaysOn,
    ParentbasedAlwaysOff,
    ParentbasedTraceidratio,
}

impl Sampler {
    fn parse(name: &str) -> Option<Self> {
        Some(match name.trim() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::Traceidratio,
            "parentbased_always_on" => Sampler::ParentbasedAlwaysOn,
            "parentbased_always_off" => Sampler::ParentbasedAlwaysOff,
            "parentbased_traceidratio" => Sampler::ParentbasedTraceidratio,
            _ => return None,
        })
    }
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: None,
            headers: BTreeMap::new(),
            sampler: None,
            sample_ratio: None,
            service_name: None,
            resource_attributes: BTreeMap::new(),
            export_timeout: None,
            max_queue_spans: 8192,
            max_batch_spans: 512,
            batch_delay: Duration::from_secs(1),
            server_timing: false,
        }
    }
}

/// The environment variables read (the OpenTelemetry SDK specification's names).
pub(crate) const OTEL_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub(crate) const OTEL_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
pub(crate) const OTEL_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub(crate) const OTEL_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
pub(crate) const OTEL_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
pub(crate) const OTEL_TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
pub const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
pub(crate) const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
pub const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
pub(crate) const OTEL_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";

/// Where spans go: what the exporter is built from. Resolved from [`TracingConfig`] (and the
/// environment it took in), so a reload can compare two.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    /// The collector URL as the exporter takes it (for HTTP, with the `/v1/traces` path).
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub service_name: String,
    pub resource: Vec<(String, String)>,
    pub max_queue_spans: usize,
    pub max_batch_spans: usize,
    pub batch_delay: Duration,
}

impl TracingConfig {
    /// Fills the keys the file left out from the OpenTelemetry environment variables; `lookup`
    /// is injectable so tests need not touch the process environment.
    pub fn apply_env(
        &mut self,
        lookup: &impl Fn(&'static str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let get = |var: &'static str| {
            lookup(var)
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        let env_error = |var: &'static str, message: String| ConfigError::Env { var, message };
        if self.protocol.is_none() {
            for var in [OTEL_TRACES_PROTOCOL, OTEL_PROTOCOL] {
                if let Some(value) = get(var) {
                    self.protocol = Some(match value.as_str() {
                        "grpc" => OtlpProtocol::Grpc,
                        "http/protobuf" => OtlpProtocol::HttpProtobuf,
                        other => {
                            return Err(env_error(
                                var,
                                format!("unsupported protocol {other:?} (grpc or http/protobuf)"),
                            ))
                        }
                    });
                    break;
                }
            }
        }
        let disabled = get(OTEL_SDK_DISABLED).is_some_and(|value| value == "true");
        if self.endpoint.is_none() && !disabled {
            if let Some(url) = get(OTEL_TRACES_ENDPOINT) {
                // The signal's own variable is the whole URL, used as it is.
                check_endpoint(&url).map_err(|message| env_error(OTEL_TRACES_ENDPOINT, message))?;
                self.endpoint = Some(url);
            } else if let Some(base) = get(OTEL_ENDPOINT) {
                check_endpoint(&base).map_err(|message| env_error(OTEL_ENDPOINT, message))?;
                self.endpoint = Some(match self.protocol() {
                    OtlpProtocol::Grpc => base,
                    OtlpProtocol::HttpProtobuf => {
                        format!("{}/v1/traces", base.trim_end_matches('/'))
                    }
                });
            }
        }
        if self.export_timeout.is_none() {
            for var in [OTEL_TRACES_TIMEOUT, OTEL_TIMEOUT] {
                if let Some(value) = get(var) {
                    let millis: u64 = value.parse().map_err(|_| {
                        env_error(var, format!("{value:?} is not a number of milliseconds"))
                    })?;
                    self.export_timeout = Some(Duration::from_millis(millis));
                    break;
                }
            }
        }
        if let Some(text) = get(OTEL_RESOURCE_ATTRIBUTES) {
            for pair in text.split(',').filter(|pair| !pair.trim().is_empty()) {
                let Some((key, value)) = pair.split_once('=') else {
                    return Err(env_error(
                        OTEL_RESOURCE_ATTRIBUTES,
                        format!("{pair:?} is not key=value"),
                    ));
                };
                let (key, value) = (key.trim(), percent_decode(value.trim()));
                if key == "service.name" {
                    if self.service_name.is_none() {
                        self.service_name = Some(value);
                    }
                    continue;
                }
                self.resource_attributes
                    .entry(key.to_owned())
                    .or_insert(value);
            }
        }
        if self.service_name.is_none() {
            self.service_name = get(OTEL_SERVICE_NAME);
        }
        if self.sampler.is_none() {
            if let Some(name) = get(OTEL_TRACES_SAMPLER) {
                self.sampler = Some(Sampler::parse(&name).ok_or_else(|| {
                    env_error(
                        OTEL_TRACES_SAMPLER,
                        format!("unsupported sampler {name:?} (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"),
                    )
                })?);
            }
        }
        if self.sample_ratio.is_none() {
            if let Some(value) = get(OTEL_TRACES_SAMPLER_ARG) {
                let ratio = value
                    .parse::<f64>()
                    .ok()
                    .filter(|ratio| (0.0..=1.0).contains(ratio))
                    .ok_or_else(|| {
                        env_error(
                            OTEL_TRACES_SAMPLER_ARG,
                            format!("{value:?} is not a ratio between 0 and 1"),
                        )
                    })?;
                self.sample_ratio = Some(ratio);
            }
        }
        Ok(())
    }

    /// The transport: the configured one, else HTTP/protobuf (OpenTelemetry's default).
    pub fn protocol(&self) -> OtlpProtocol {
        self.protocol.unwrap_or(OtlpProtocol::HttpProtobuf)
    }

    /// The sampler: the configured one, else `parentbased_traceidratio` at `sample_ratio`.
    pub fn sampler(&self) -> Sampler {
        self.sampler.unwrap_or(Sampler::ParentbasedTraceidratio)
    }

    /// The ratio of a `*traceidratio` sampler (1 when unset).
    pub fn ratio(&self) -> f64 {
        self.sample_ratio.unwrap_or(1.0)
    }

    /// Where spans go, or `None` when tracing is off (no endpoint, or an empty one).
    pub fn export(&self) -> Option<ExportSettings> {
        let endpoint = self.endpoint.as_deref().map(str::trim)?;
        if endpoint.is_empty() {
            return None;
        }
        let protocol = self.protocol();
        let endpoint = match protocol {
            OtlpProtocol::HttpProtobuf if !has_path(endpoint) => {
                format!("{}/v1/traces", endpoint.trim_end_matches('/'))
            }
            _ => endpoint.to_owned(),
        };
        Some(ExportSettings {
            endpoint,
            protocol,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            timeout: self.export_timeout.unwrap_or(Duration::from_secs(10)),
            service_name: self
                .service_name
                .clone()
                .unwrap_or_else(|| "tokenmeter".to_owned()),
            resource: self
                .resource_attributes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            max_queue_spans: self.max_queue_spans,
            max_batch_spans: self.max_batch_spans,
            batch_delay: self.batch_delay,
        })
    }

    /// What serde cannot check, each refusal naming its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: format!("tracing.{key}"),
            message,
        };
        if let Some(endpoint) = self.endpoint.as_deref() {
            check_endpoint(endpoint).map_err(|message| invalid("endpoint", message))?;
        }
        if let Some(ratio) = self.sample_ratio {
            if !(0.0..=1.0).contains(&ratio) {
                return Err(invalid(
                    "sample_ratio",
                    format!("{ratio} is not between 0 and 1"),
                ));
            }
        }
        if self.max_queue_spans == 0 || self.max_batch_spans == 0 {
            let key = if self.max_queue_spans == 0 {
                "max_queue_spans"
            } else {
                "max_batch_spans"
            };
            return Err(invalid(key, "must be greater than zero".to_owned()));
        }
        if self.batch_delay.is_zero() {
            return Err(invalid(
                "batch_delay",
                "must be greater than zero".to_owned(),
            ));
        }
        if self.export_timeout.is_some_and(|timeout| timeout.is_zero()) {
            return Err(invalid(
                "export_timeout",
                "must be greater than zero".to_owned(),
            ));
        }
        for (key, value) in &self.headers {
            let valid = http::HeaderName::from_bytes(key.as_bytes()).is_ok()
                && http::HeaderValue::from_str(value).is_ok();
            if !valid {
                return Err(invalid(
                    &format!("headers.{key}"),
                    "is not a valid header name and value".to_owned(),
                ));
            }
        }
        Ok(())
    }
}

/// An endpoint the exporter can use: empty (off), or an `http://` URL with a host.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        return Ok(());
    }
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|err| format!("{endpoint:?}: {err}"))?;
    match uri.scheme_str() {
        Some("http") if uri.host().is_some() => Ok(()),
        Some("https") => Err(format!(
            "{endpoint:?}: https is not supported; export to a collector agent beside the proxy (pod or node) over http://, and let it speak TLS onwards"
        )),
        _ => Err(format!("{endpoint:?} must be an http:// URL with a host")),
    }
}

/// The URL has a path beyond `/`.
fn has_path(url: &str) -> bool {
    url.parse::<http::Uri>()
        .is_ok_and(|uri| !matches!(uri.path(), "" | "/"))
}

/// `%XX` escapes decoded (W3C Baggage's octets, as `OTEL_RESOURCE_ATTRIBUTES` uses them); an
/// invalid escape stays as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Header values, each replaced by [`super::REDACTED`]: they are what a collector authenticates
/// with.
fn hidden_values<S: Serializer>(
    headers: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(headers.keys().map(|name| (name, super::REDACTED)))
}

#[cfg(test)]
mod tests;
