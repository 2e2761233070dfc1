//! The admission limits' series ([`super`]): rejections by reason, open
//! connections, admitted streams. The limits are semaphores and atomics that the accept loop and
//! every connection share; rather than mirror each permit into the recorder, their counts are read
//! at scrape time and written here, beside every other series, in the Prometheus text format.
use std::fmt::Write as _;

/// Rejected requests and connections, by `reason` (`max_streams`, `max_connections`, `loop`).
pub(crate) const REJECTED: &str = "tokenmeter_rejected_total";
/// Open traffic connections.
pub(crate) const CONNECTIONS_OPEN: &str = "tokenmeter_connections_open";
/// Requests admitted whose response body has not finished.
pub(crate) const STREAMS_ADMITTED: &str = "tokenmeter_streams_admitted";

/// The admission counts at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdmissionCounts {
    /// Turned away by `reason`: (`max_streams`, count), (`max_connections`, count), (`loop`,
    /// count).
    pub rejected: [(&'static str, u64); 3],
    pub connections_open: usize,
    pub streams_admitted: usize,
}

/// The series in the Prometheus text format.
pub fn render(counts: &AdmissionCounts) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# HELP {REJECTED} Requests and connections turned away at admission, by reason: max_streams and max_connections (503), loop (508: the request came back to this tokenmeter)."
    );
    let _ = writeln!(text, "# TYPE {REJECTED} counter");
    for (reason, count) in counts.rejected {
        let _ = writeln!(text, "{REJECTED}{{reason=\"{reason}\"}} {count}");
    }
    let gauges = [
        (
            CONNECTIONS_OPEN,
            "Open traffic connections.",
            counts.connections_open,
        ),
        (
            STREAMS_ADMITTED,
            "Requests admitted whose response body has not finished.",
            counts.streams_admitted,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(text, "# HELP {name} {help}");
        let _ = writeln!(text, "# TYPE {name} gauge");
        let _ = writeln!(text, "{name} {value}");
    }
    text
}
