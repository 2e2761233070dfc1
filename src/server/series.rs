//! The server's scrape-time series: counts kept in atomics (the admission limits, the requests a
//! layer found without their context) and written in the Prometheus text format when scraped,
//! beside the recorder's series.
use std::fmt::Write as _;

use super::admission::Limits;
use crate::context::RequestContext;

/// Internal errors (bugs), by `kind`.
pub const INTERNAL_ERRORS: &str = "tokenmeter_internal_errors_total";

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
