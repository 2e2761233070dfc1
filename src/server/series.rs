//! The server's series: config reloads, and the scrape-time series kept in atomics rather than the
//! recorder (the admission limits' counts, [`super::admission::series`]; the requests a layer found
//! without their context), written in the Prometheus text format when scraped.
use std::fmt::Write as _;

use metrics::Label;

use super::admission::Limits;
use crate::config::Config;
use crate::context::RequestContext;
use crate::metrics::Metrics;
use crate::tls;

/// Config reloads (SIGHUP, the file watch), by `result` (ok, error).
pub(crate) const CONFIG_RELOADS: &str = "tokenmeter_config_reloads_total";
/// 1 while the last reload changed a key that takes effect only on restart.
pub(crate) const CONFIG_RESTART_REQUIRED: &str = "tokenmeter_config_restart_required";
/// Internal errors (bugs), by `kind`.
pub(crate) const INTERNAL_ERRORS: &str = "tokenmeter_internal_errors_total";

/// Describes the server's series and registers them at zero, so rates and alerts have a series
/// from the first scrape: config reloads, the restart flag, and the TLS series of each listener
/// with TLS.
pub fn register(metrics: &Metrics, config: &Config) {
    metrics.describe_counter(
        CONFIG_RELOADS,
        "Config reloads (SIGHUP, the file watch) by result: ok (new requests use it), error (refused; the running config stays).",
    );
    metrics.describe_gauge(
        CONFIG_RESTART_REQUIRED,
        "1 while the last config reload changed a key that takes effect only on restart (the running value stays).",
    );
    for result in ["ok", "error"] {
        metrics
            .counter(CONFIG_RELOADS, vec![Label::new("result", result)])
            .increment(0);
    }
    config_restart_required(metrics, false);
    for (listener, tls) in [
        ("traffic", &config.server.tls),
        ("admin", &config.server.admin_tls),
    ] {
        if tls.is_some() {
            tls::series::register(metrics, listener);
        }
    }
}

/// Counts a config reload by `result` (`ok`, `error`).
pub fn config_reload(metrics: &Metrics, result: &'static str) {
    metrics
        .counter(CONFIG_RELOADS, vec![Label::new("result", result)])
        .increment(1);
}

/// Sets whether the running config waits for a restart to take a reloaded key.
pub(crate) fn config_restart_required(metrics: &Metrics, required: bool) {
    metrics
        .gauge(CONFIG_RESTART_REQUIRED, Vec::new())
        .set(if required { 1.0 } else { 0.0 });
}

/// Every scrape-time series of the server.
pub fn render(limits: &Limits) -> String {
    let mut text = limits.render();
    let _ = writeln!(
        text,
        "# HELP {INTERNAL_ERRORS} Internal errors (bugs) by kind: context_missing (a layer did not find a request's context; answered 500)."
    );
    let _ = writeln!(text, "# TYPE {INTERNAL_ERRORS} counter");
    let _ = writeln!(
        text,
        "{INTERNAL_ERRORS}{{kind=\"context_missing\"}} {}",
        RequestContext::missing()
    );
    text
}
