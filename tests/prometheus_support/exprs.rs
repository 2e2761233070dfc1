//! Every PromQL expression the dashboards and rules hold, made evaluable by plain Prometheus:
//! Grafana's variables replaced by concrete values, `label_values()` turned into a query, and an
//! alert's comparisons turned into `bool` ones so the expression returns data whether it fires or
//! not (what is checked is that its inputs exist, not that the system is unhealthy).
use serde_json::Value;

/// The histograms tokenmeter also exposes with native buckets (`src/meter/series.rs`): TTFT, TTFB,
/// TPOT, ITL and E2E. A Prometheus 2.42 with `--enable-feature=native-histograms` stores these as
/// native histograms only (no `_bucket`, `_sum` or `_count` series), the others as classic ones;
/// without the flag, all as classic ones. `prometheus_e2e` checks this list against what Prometheus
/// stored.
pub const NATIVE_HISTOGRAMS: &[&str] = &[
    "gen_ai_server_time_to_first_token_seconds",
    "tokenmeter_time_to_first_byte_seconds",
    "gen_ai_server_time_per_output_token_seconds",
    "tokenmeter_inter_token_latency_seconds",
    "gen_ai_server_request_duration_seconds",
];

/// How an expression reads one histogram family: as the native histogram (the bare name), or
/// through the classic series (`_bucket`, `_count`, `_sum`). Recorded series that embed the name
/// (`level:name:ops`) are neither.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HistogramForms {
    pub native: bool,
    pub bucket: bool,
    pub count: bool,
    pub sum: bool,
}

impl HistogramForms {
    pub fn any(self) -> bool {
        self.native || self.bucket || self.count || self.sum
    }
}

/// The forms in which `expr` selects `family` (see [`HistogramForms`]).
pub fn histogram_forms(expr: &str, family: &str) -> HistogramForms {
    let mut forms = HistogramForms::default();
    let metric_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for (at, _) in expr.match_indices(family) {
        if expr[..at].chars().next_back().is_some_and(metric_char) {
            continue;
        }
        let rest = &expr[at + family.len()..];
        let name_end = rest.find(|c: char| !metric_char(c)).unwrap_or(rest.len());
        match &rest[..name_end] {
            "" => forms.native = true,
            "_bucket" => forms.bucket = true,
            "_count" => forms.count = true,
            "_sum" => forms.sum = true,
            _ => {}
        }
    }
    forms
}

/// Where an expression came from (for failure messages) and what to send to Prometheus.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub origin: String,
    pub promql: String,
    /// For a `label_values(_, LABEL)` variable: the label whose values must be non-empty.
    pub label: Option<String>,
}

/// Grafana variable values, by name (without `$`), e.g. `[("__rate_interval", "1m"), ("model", ".+")]`.
pub type Vars<'a> = &'a [(&'a str, &'a str)];

/// Replaces Grafana's variables (`$__rate_interval`, `$model`, `${pool}`, ...) with `vars`; panics on
/// one it does not know, so a typo'd variable cannot slip through as literal text.
pub fn substitute_grafana(expr: &str, vars: Vars) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, used) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced
                    .find('}')
                    .unwrap_or_else(|| panic!("unclosed ${{ in {expr:?}"));
                (&braced[..end], end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        let value = vars
            .iter()
            .find(|(var, _)| *var == name)
            .map(|(_, value)| *value)
            .unwrap_or_else(|| panic!("unknown Grafana variable ${name} in {expr:?}"));
        out.push_str(value);
        rest = &after[used..];
    }
    out.push_str(rest);
    out
}

/// Adds `bool` to every comparison outside label matchers and strings, so `a > b` returns 0/1 for
/// every input series instead of filtering them away.
pub fn comparisons_as_bool(expr: &str) -> String {
    let bytes = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() + 16);
    let mut braces = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if let Some(q) = quote {
            if c == b'\\' && i + 1 < bytes.len() {
                out.push_str(&expr[i..i + 2]);
                i += 2;
                continue;
            }
            if c == q {
                quote = None;
            }
            out.push(c as char);
            i += 1;
            continue;
        }
        match c {
            b'"' | b'\'' | b'`' => quote = Some(c),
            b'{' => braces += 1,
            b'}' => braces = braces.saturating_sub(1),
            _ => {}
        }
        let two = expr.get(i..i + 2).unwrap_or("");
        let op_len = if braces > 0 {
            0
        } else if matches!(two, "==" | "!=" | ">=" | "<=") {
            2
        } else if matches!(c, b'>' | b'<') {
            1
        } else {
            0
        };
        if op_len == 0 {
            // Multi-byte UTF-8 is copied whole: only ASCII bytes are ever inspected.
            let ch = expr[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        out.push_str(&expr[i..i + op_len]);
        i += op_len;
        if !expr[i..].trim_start().starts_with("bool") {
            out.push_str(" bool");
        }
    }
    out
}

/// `label_values(SELECTOR, LABEL)` as a query whose result shows the label's values.
fn label_values(query: &str) -> Option<(String, String)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (selector, label) = inner.rsplit_once(',')?;
    let label = label.trim().to_owned();
    Some((format!("count by ({label}) ({})", selector.trim()), label))
}

/// Every panel target and every query variable of a Grafana dashboard, with `vars` substituted.
pub fn dashboard_exprs(name: &str, dashboard: &Value, vars: Vars) -> Vec<Expr> {
    let mut out = Vec::new();
    for panel in all_panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                panic!("{name}: panel {title:?} has a target without a PromQL expr: {target}");
            };
            out.push(Expr {
                origin: format!(
                    "{name}: panel {title:?} target {}",
                    target["refId"].as_str().unwrap_or("?")
                ),
                promql: substitute_grafana(expr, vars),
                label: None,
            });
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .or_else(|| var["query"].as_str())
            .unwrap_or_else(|| panic!("{name}: variable without a query: {var}"));
        let (promql, label) = label_values(&substitute_grafana(query, vars))
            .unwrap_or_else(|| panic!("{name}: variable query is not label_values(...): {query}"));
        out.push(Expr {
            origin: format!("{name}: variable ${}", var["name"].as_str().unwrap_or("?")),
            promql,
            label: Some(label),
        });
    }
    out
}

/// Panels at every depth (a collapsed row keeps its panels inside it).
pub fn all_panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Every rule Prometheus loaded (`/api/v1/rules` data): recording rules as they are, alerting
/// rules with `bool` comparisons.
pub fn rule_exprs(rules: &Value) -> Vec<Expr> {
    let mut out = Vec::new();
    for group in rules["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let query = rule["query"].as_str().expect("rule has a query");
            let promql = if rule["type"] == "alerting" {
                comparisons_as_bool(query)
            } else {
                query.to_owned()
            };
            out.push(Expr {
                origin: format!(
                    "rules: group {} {} {}",
                    group["name"], rule["type"], rule["name"]
                ),
                promql,
                label: None,
            });
        }
    }
    out
}

/// Label names an expression uses: in `by (...)`, `without (...)`, `on (...)`, `ignoring (...)`,
/// `group_left (...)`, `group_right (...)`, and on the left of every matcher inside `{...}`.
pub fn label_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let ident = |at: usize| -> (usize, &str) {
        let end = expr[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |n| at + n);
        (end, &expr[at..end])
    };
    let mut braces = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            // Skip the string, honouring backslash escapes.
            i += 1;
            while i < bytes.len() && bytes[i] != c {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c == b'{' {
            braces += 1;
        } else if c == b'}' {
            braces = braces.saturating_sub(1);
        }
        if !(c.is_ascii_alphabetic() || c == b'_') || (i > 0 && is_word(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let (end, word) = ident(i);
        let rest = expr[end..].trim_start();
        if braces > 0 && ["=", "!="].iter().any(|op| rest.starts_with(op)) {
            out.push(word.to_owned());
        } else if matches!(
            word,
            "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
        ) && rest.starts_with('(')
        {
            let inner = &rest[1..rest.find(')').unwrap_or(rest.len())];
            out.extend(
                inner
                    .split(',')
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned),
            );
        }
        i = end;
    }
    out
}

fn is_word(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b':'
}

/// What the autoscalers of `deploy/kubernetes/autoscaling/` ask Prometheus, for pool `pool`: KEDA's
/// trigger `query` (its `pool="vllm"` made `pool`), and prometheus-adapter's `metricsQuery` as the
/// adapter renders it for the HPA's selector (`<<.Series>>` the rule's `seriesQuery` metric,
/// `<<.LabelMatchers>>` the HPA's `pool`; the `namespace` matcher the adapter also adds is left
/// out: these Prometheus servers scrape no namespace label). Read by lines, as the files are laid
/// out: one `query:` in the ScaledObject, one `seriesQuery:` and one `metricsQuery:` in the
/// adapter's rules.
pub fn autoscaler_exprs(keda: &str, adapter: &str, pool: &str) -> Vec<Expr> {
    let value = |text: &str, key: &str| -> String {
        let line = text
            .lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` line"));
        line.trim().trim_matches('\'').to_owned()
    };
    let query = value(keda, "query:").replace("pool=\"vllm\"", &format!("pool=\"{pool}\""));
    let series_query = value(adapter, "- seriesQuery:");
    let series = series_query
        .split('{')
        .next()
        .expect("a metric name before the matchers");
    let rendered = value(adapter, "metricsQuery:")
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", &format!("pool=\"{pool}\""));
    vec![
        Expr {
            origin: "deploy/kubernetes/autoscaling/keda/scaledobject.yaml: query".to_owned(),
            promql: query,
            label: None,
        },
        Expr {
            origin: "deploy/kubernetes/autoscaling/hpa/prometheus-adapter.yaml: metricsQuery"
                .to_owned(),
            promql: rendered,
            label: None,
        },
    ]
}
