//! The TLS listeners' series: failed client handshakes and certificate reloads, per listener
//! (`traffic`, `admin`). Both are registered at zero for a listener with TLS, so rates and alerts
//! have a series from the first scrape.
use metrics::Label;

use super::HandshakeFailure;
use crate::metrics::Metrics;

/// Client TLS handshakes that failed, by `listener` (traffic, admin) and `reason` (timeout,
/// certificate, protocol, io).
pub(crate) const TLS_HANDSHAKE_FAILURES: &str = "tokenmeter_tls_handshake_failures_total";
/// Certificate reloads after a listener's TLS files changed, by `listener` and `result` (ok, error).
pub(crate) const TLS_RELOADS: &str = "tokenmeter_tls_certificate_reloads_total";

/// Describes the series and registers those of `listener` at zero.
pub fn register(metrics: &Metrics, listener: &'static str) {
    metrics.describe_counter(
        TLS_HANDSHAKE_FAILURES,
        "Client TLS handshakes that failed, by listener and reason (timeout, certificate, protocol, io).",
    );
    metrics.describe_counter(
        TLS_RELOADS,
        "Certificate reloads after a listener's TLS files changed, by listener and result (ok, error).",
    );
    for failure in HandshakeFailure::ALL {
        handshake_failed_by(metrics, listener, failure, 0);
    }
    for result in ["ok", "error"] {
        reloads(metrics, listener, result, 0);
    }
}

/// Counts a client's failed TLS handshake on `listener`.
pub fn handshake_failed(metrics: &Metrics, listener: &'static str, failure: HandshakeFailure) {
    handshake_failed_by(metrics, listener, failure, 1);
}

/// Counts a certificate reload of `listener` by `result` (`ok`, `error`).
pub fn reloaded(metrics: &Metrics, listener: &'static str, result: &'static str) {
    reloads(metrics, listener, result, 1);
}

fn handshake_failed_by(
    metrics: &Metrics,
    listener: &'static str,
    failure: HandshakeFailure,
    n: u64,
) {
    let set = vec![
        Label::new("listener", listener),
        Label::new("reason", failure.as_str()),
    ];
    metrics.counter(TLS_HANDSHAKE_FAILURES, set).increment(n);
}

fn reloads(metrics: &Metrics, listener: &'static str, result: &'static str, n: u64) {
    let set = vec![
        Label::new("listener", listener),
        Label::new("result", result),
    ];
    metrics.counter(TLS_RELOADS, set).increment(n);
}
