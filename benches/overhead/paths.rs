//! The paths a run can measure, what each one is, and which direct path its "added" figures are
//! taken against.
//!
//! The plain paths are compared with `direct` (client -> backend in plain HTTP). Every TLS path
//! has exactly one TLS hop, so it is compared with `direct-tls` (the client speaking TLS straight
//! to the backend, the one hop there is without a proxy): "added" is then what the proxy hop adds
//! to a TLS deployment, including the TLS work it takes over from the endpoint — the
//! `-tls-client` proxies decrypt the client's TLS and forward in plain HTTP; the `-tls-upstream`
//! proxies receive plain HTTP and encrypt to the backend. CPU per chunk is the proxy's alone.
//!
//! The tenant paths (#26) are tokenmeter with a tenant source, alone or with a default budget
//! kept in memory or in Redis. They run only when `--paths` names them
//! (`scripts/bench-overhead.sh --budgets`), and each brings plain `tokenmeter` along: what they
//! add is read against it (their `reference`), as well as against direct.
use super::procs::Error;

/// One path of the benchmark.
#[derive(Debug)]
pub struct PathSpec {
    pub name: &'static str,
    /// The path its added latency and TTFT are paired against.
    pub baseline: &'static str,
    /// The load client speaks TLS on it.
    pub client_tls: bool,
    /// Runs only when `--paths` names it.
    pub opt_in: bool,
    /// The path its per-request figures are read against (run with it).
    pub reference: Option<&'static str>,
}

const fn plain(name: &'static str) -> PathSpec {
    PathSpec {
        name,
        baseline: "direct",
        client_tls: false,
        opt_in: false,
        reference: None,
    }
}

const fn tls(name: &'static str, client_tls: bool) -> PathSpec {
    PathSpec {
        name,
        baseline: "direct-tls",
        client_tls,
        opt_in: false,
        reference: None,
    }
}

const fn against_tokenmeter(name: &'static str) -> PathSpec {
    PathSpec {
        opt_in: true,
        reference: Some("tokenmeter"),
        ..plain(name)
    }
}

/// The `--paths` name of the default set (every path that is not opt-in).
pub const DEFAULT_SET: &str = "default";

/// Every path, in the order the summary lists them.
pub const PATHS: [PathSpec; 15] = [
    plain("direct"),
    plain("tokenmeter"),
    plain("tokenmeter-unmetered"),
    plain("hyper-bare"),
    plain("nginx"),
    plain("haproxy"),
    // Client -> TLS backend, no proxy: the baseline of the TLS paths.
    tls("direct-tls", true),
    // Client -(TLS)-> proxy -(plain)-> backend.
    tls("tokenmeter-tls-client", true),
    tls("nginx-tls-client", true),
    // Client -(plain)-> proxy -(TLS)-> backend.
    tls("tokenmeter-tls-upstream", false),
    tls("nginx-tls-upstream", false),
    // tokenmeter with `[tenants] sources = ["header"]` and no budget: what naming the tenant
    // costs (the load sends no header: every request is `anonymous`).
    against_tokenmeter("tokenmeter-tenants"),
    // The same with a default budget no request reaches, every limit set: kept in this process.
    against_tokenmeter("tokenmeter-budget-memory"),
    // ... and in a Redis on loopback (one round trip to admit, one to settle).
    against_tokenmeter("tokenmeter-budget-redis"),
    // One pool of 16 backends (the one backend, 16 times) with `balance = "slo"` and a gateway
    // queue: a placement by predicted latency over 16 latency models per request, the gate's
    // direct path, and a lesson at each finish. The targets are loose, so every request goes at
    // once: the cost of deciding, not of waiting.
    against_tokenmeter("tokenmeter-slo"),
];

/// The TLS paths (what `--tls-only` runs).
pub fn is_tls(name: &str) -> bool {
    PATHS
        .iter()
        .any(|p| p.name == name && p.baseline == "direct-tls")
}

/// The paths `wanted` names (when empty, every path that is not opt-in; [`DEFAULT_SET`] names
/// those too), with the baselines they are compared against, in [`PATHS`] order. An unknown name
/// is an error that lists the known ones.
pub fn select(wanted: &[String]) -> Result<Vec<&'static PathSpec>, Error> {
    if let Some(unknown) = wanted
        .iter()
        .find(|w| *w != DEFAULT_SET && !PATHS.iter().any(|p| p.name == w.as_str()))
    {
        let known: Vec<&str> = PATHS.iter().map(|p| p.name).collect();
        return Err(format!(
            "unknown path {unknown:?}; the paths are {DEFAULT_SET} (all but the opt-in ones), {}",
            known.join(", ")
        )
        .into());
    }
    let default_set = wanted.is_empty() || wanted.iter().any(|w| w == DEFAULT_SET);
    let named = |name: &str| {
        let by_default = default_set && spec(name).is_some_and(|p| !p.opt_in);
        by_default || wanted.iter().any(|w| w == name)
    };
    let chosen = |spec: &PathSpec| {
        named(spec.name)
            || PATHS.iter().any(|p| {
                named(p.name) && (p.baseline == spec.name || p.reference == Some(spec.name))
            })
    };
    Ok(PATHS.iter().filter(|p| chosen(p)).collect())
}

/// The spec of `name` (a path of [`PATHS`]).
pub fn spec(name: &str) -> Option<&'static PathSpec> {
    PATHS.iter().find(|p| p.name == name)
}
