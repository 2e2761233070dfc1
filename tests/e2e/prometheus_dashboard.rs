//! Lint of the Grafana dashboards in `dashboards/` (valid JSON, current schema, unique panel ids,
//! every panel and target on the `$datasource` variable, the template variables, fleet-correct
//! quantiles, no overlapping panels, the latency histograms read in both their native and classic
//! forms, here and in the rules), and unit tests of the expression rewriting the end-to-end test
//! relies on.

use crate::prometheus_support;
use std::collections::HashSet;

use serde_json::{json, Value};

use prometheus_support::dashboards;
use prometheus_support::exprs::{
    all_panels, comparisons_as_bool, dashboard_exprs, histogram_forms, label_names,
    substitute_grafana, Expr, HistogramForms, NATIVE_HISTOGRAMS,
};
use prometheus_support::repo_path;

/// Every label tokenmeter's series carry (each subsystem's `series.rs`), plus Prometheus' own
/// target labels and the one a Kubernetes scrape adds that the rules keep (`namespace`: the
/// autoscaling rules keep pools of one name in two namespaces apart).
/// A label outside this list in a dashboard or rule is a typo: matchers with `.*` and
/// `sum by (typo)` still return data, so the end-to-end test alone would not catch it.
const KNOWN_LABELS: &[&str] = &[
    "le",
    "gen_ai_operation_name",
    "gen_ai_request_model",
    "gen_ai_token_type",
    "backend",
    "pool",
    "outcome",
    "slo",
    "result",
    "source",
    "reason",
    "kind",
    "phase",
    "stage",
    "tenant",
    "limit",
    "op",
    "error",
    "policy",
    "job",
    "decision",
    "exit",
    "move",
    "instance",
    "namespace",
];

/// Values for the rewriting tests.
const VARS: &[(&str, &str)] = &[
    ("__rate_interval", "1m"),
    ("model", ".+"),
    ("pool", ".*"),
    ("backend", ".+"),
];

/// Grafana 10.4 / 11.x write schemaVersion 39 and later.
const MIN_SCHEMA: u64 = 39;

fn datasource_is_the_variable(value: &Value) -> bool {
    value["uid"] == "${datasource}" && value["type"] == "prometheus"
}

#[test]
fn dashboards_use_the_current_schema_and_unique_panel_ids() {
    for (name, dashboard) in dashboards() {
        let schema = dashboard["schemaVersion"].as_u64().unwrap_or(0);
        assert!(schema >= MIN_SCHEMA, "{name}: schemaVersion {schema}");
        assert!(
            dashboard["uid"]
                .as_str()
                .is_some_and(|uid| !uid.is_empty() && uid.len() <= 40),
            "{name}: a stable uid of at most 40 characters"
        );
        let mut ids = HashSet::new();
        for panel in all_panels(&dashboard) {
            let id = panel["id"].as_u64().unwrap_or_else(|| {
                panic!("{name}: panel without a numeric id: {}", panel["title"])
            });
            assert!(ids.insert(id), "{name}: panel id {id} is used twice");
        }
        assert!(ids.len() >= 20, "{name}: {} panels", ids.len());
    }
}

#[test]
fn every_panel_and_target_uses_the_datasource_variable() {
    for (name, dashboard) in dashboards() {
        for panel in all_panels(&dashboard) {
            if panel["type"] == "row" {
                continue;
            }
            let title = &panel["title"];
            assert!(
                datasource_is_the_variable(&panel["datasource"]),
                "{name}: panel {title} datasource is {}",
                panel["datasource"]
            );
            let targets = panel["targets"].as_array().expect("panel has targets");
            assert!(!targets.is_empty(), "{name}: panel {title} has no query");
            let mut refs = HashSet::new();
            for target in targets {
                assert!(
                    datasource_is_the_variable(&target["datasource"]),
                    "{name}: panel {title} target datasource is {}",
                    target["datasource"]
                );
                let ref_id = target["refId"].as_str().expect("target refId");
                assert!(
                    refs.insert(ref_id),
                    "{name}: panel {title} repeats refId {ref_id}"
                );
            }
        }
    }
}

#[test]
fn dashboards_have_the_datasource_model_pool_and_backend_variables() {
    for (name, dashboard) in dashboards() {
        let vars = dashboard["templating"]["list"]
            .as_array()
            .expect("templating.list");
        let find = |wanted: &str| {
            vars.iter()
                .find(|v| v["name"] == wanted)
                .unwrap_or_else(|| panic!("{name}: no ${wanted} variable"))
        };
        let datasource = find("datasource");
        assert_eq!(datasource["type"], "datasource", "{name}: $datasource type");
        assert_eq!(
            datasource["query"], "prometheus",
            "{name}: $datasource plugin"
        );
        for (var, label) in [
            ("model", "gen_ai_request_model"),
            ("pool", "pool"),
            ("backend", "backend"),
        ] {
            let v = find(var);
            assert_eq!(v["type"], "query", "{name}: ${var} is a query variable");
            assert!(
                datasource_is_the_variable(&v["datasource"]),
                "{name}: ${var} queries $datasource"
            );
            assert_eq!(v["includeAll"], true, "{name}: ${var} offers All");
            assert_eq!(
                v["allValue"], ".*",
                "{name}: ${var} All is a regex match-all"
            );
            let query = v["query"]["query"].as_str().expect("variable query");
            assert!(
                query.starts_with("label_values(") && query.ends_with(&format!(", {label})")),
                "{name}: ${var} lists values of {label}: {query}"
            );
        }
    }
}

/// Why `expr` would be empty on a Prometheus that keeps only one form of a latency histogram, if
/// it would: it reads the native histogram without a classic fallback (empty without
/// `--enable-feature=native-histograms`) or the classic series without the native form (empty on
/// 2.40-2.44 with the flag), or a classic `_count` / `_sum` whose native form is not
/// `histogram_count` / `histogram_sum`.
fn one_form_only(expr: &str) -> Option<String> {
    for family in NATIVE_HISTOGRAMS {
        let forms = histogram_forms(expr, family);
        let classic = forms.bucket || forms.count || forms.sum;
        if forms.native != classic {
            return Some(format!("{family} read in one form only: {forms:?}"));
        }
        if forms.count && !expr.contains("histogram_count(") {
            return Some(format!("{family}_count without histogram_count({family})"));
        }
        if forms.sum && !expr.contains("histogram_sum(") {
            return Some(format!("{family}_sum without histogram_sum({family})"));
        }
    }
    None
}

#[test]
fn latency_histograms_are_read_in_both_forms() {
    let ttft = NATIVE_HISTOGRAMS[0];
    let both = format!(
        "histogram_quantile(0.5, sum(rate({ttft}{{a=\"b\"}}[1m]))) \
         or histogram_quantile(0.5, sum by (le) (rate({ttft}_bucket[1m])))"
    );
    let forms = HistogramForms {
        native: true,
        bucket: true,
        count: false,
        sum: false,
    };
    assert_eq!(histogram_forms(&both, ttft), forms, "both forms seen");
    assert!(
        !histogram_forms(&format!("model_pool:{ttft}:p99_5m"), ttft).any(),
        "a recorded series is neither form"
    );
    assert!(one_form_only(&format!("sum(rate({ttft}_bucket[5m]))")).is_some());
    assert!(one_form_only(&format!("histogram_count(rate({ttft}[5m]))")).is_some());
    assert!(one_form_only(&format!(
        "histogram_count(rate({ttft}[5m])) or rate({ttft}_count[5m])"
    ))
    .is_none());
    assert!(one_form_only(&format!("rate({ttft}[5m]) or rate({ttft}_sum[5m])")).is_some());

    let mut checked = 0;
    for (name, dashboard) in dashboards() {
        for panel in all_panels(&dashboard) {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or("");
                if let Some(why) = one_form_only(expr) {
                    panic!("{name}: panel {}: {why}: {expr}", panel["title"]);
                }
                let latency = NATIVE_HISTOGRAMS
                    .iter()
                    .any(|family| histogram_forms(expr, family).any());
                checked += usize::from(latency);
                // A heatmap takes the native histogram or the classic buckets, never both: on a
                // Prometheus that keeps both, `or on ()` drops the buckets whenever the native
                // histogram answers, so Grafana gets one heatmap-cells frame (passed through
                // under format "heatmap") or the `le` series (de-accumulated), never a mix.
                if panel["type"] == "heatmap" {
                    let joined = expr.contains(") or on () sum by (le) (");
                    assert!(
                        latency && joined && target["format"] == "heatmap",
                        "{name}: heatmap {}: sum(rate(X[..])) or on () sum by (le) \
                         (rate(X_bucket[..])), format heatmap: {expr}",
                        panel["title"]
                    );
                }
            }
        }
        // Variables read a counter every request increments, whatever the histograms' storage.
        for var in dashboard["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(query) = var["query"]["query"].as_str() else {
                continue;
            };
            let selector = query
                .strip_prefix("label_values(")
                .and_then(|rest| rest.split(['{', ',']).next())
                .unwrap_or("");
            assert!(
                selector.ends_with("_total"),
                "{name}: variable ${} lists the values of a counter, not of a histogram's \
                 series: {query}",
                var["name"]
            );
        }
    }
    assert!(checked >= 13, "the latency panels were seen: {checked}");

    let text = std::fs::read_to_string(repo_path("deploy/prometheus/tokenmeter-rules.yaml"))
        .expect("read the rules");
    let exprs = rule_file_exprs(&text);
    let latency = exprs
        .iter()
        .filter(|expr| {
            NATIVE_HISTOGRAMS
                .iter()
                .any(|family| histogram_forms(expr, family).any())
        })
        .count();
    assert_eq!(latency, 9, "the rules' TTFT, ITL and TPOT quantiles");
    for expr in &exprs {
        if let Some(why) = one_form_only(expr) {
            panic!("rules: {why}: {expr}");
        }
    }
}

#[test]
fn quantiles_aggregate_buckets_across_sidecars() {
    assert!(sums_buckets_across_sidecars(
        "histogram_quantile(0.5, sum by (le, phase) (rate(x_bucket{}[1m])))"
    ));
    assert!(!sums_buckets_across_sidecars(
        "histogram_quantile(0.5, sum by (le, instance) (rate(x_bucket{}[1m])))"
    ));
    assert!(!sums_buckets_across_sidecars(
        "histogram_quantile(0.5, rate(x_bucket{}[1m]))"
    ));
    for (name, dashboard) in dashboards() {
        for panel in all_panels(&dashboard) {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or("");
                if !expr.contains("histogram_quantile(") {
                    continue;
                }
                assert!(
                    sums_buckets_across_sidecars(expr)
                        && expr.contains("_bucket{")
                        && expr.contains("[$__rate_interval]"),
                    "{name}: panel {}: a fleet quantile is histogram_quantile(q, sum by (le) \
                     (rate(X_bucket{{...}}[$__rate_interval]))): {expr}",
                    panel["title"]
                );
            }
        }
    }
}

#[test]
fn panels_do_not_overlap() {
    for (name, dashboard) in dashboards() {
        let boxes: Vec<(String, [u64; 4])> = all_panels(&dashboard)
            .iter()
            .map(|p| {
                let g = &p["gridPos"];
                let n = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("gridPos.{k}"));
                (p["title"].to_string(), [n("x"), n("y"), n("w"), n("h")])
            })
            .collect();
        for (i, (a, [ax, ay, aw, ah])) in boxes.iter().enumerate() {
            assert!(ax + aw <= 24, "{name}: panel {a} is wider than the grid");
            for (b, [bx, by, bw, bh]) in &boxes[i + 1..] {
                let apart = ax + aw <= *bx || bx + bw <= *ax || ay + ah <= *by || by + bh <= *ay;
                assert!(apart, "{name}: panels {a} and {b} overlap");
            }
        }
    }
}

#[test]
fn grafana_variables_become_concrete_values() {
    assert_eq!(
        substitute_grafana(
            r#"rate(x_bucket{gen_ai_request_model=~"$model", pool=~"${pool}", backend=~"$backend"}[$__rate_interval])"#,
            VARS
        ),
        r#"rate(x_bucket{gen_ai_request_model=~".+", pool=~".*", backend=~".+"}[1m])"#,
        "every variable replaced"
    );
    assert_eq!(substitute_grafana("up", VARS), "up", "nothing to replace");
}

#[test]
#[should_panic(expected = "unknown Grafana variable $modle")]
fn a_typod_variable_is_refused() {
    substitute_grafana(r#"x{m=~"$modle"}"#, VARS);
}

#[test]
fn comparisons_gain_bool_outside_label_matchers() {
    assert_eq!(
        comparisons_as_bool(r#"a{x!="1", y=~"2"} > on (slo) group_left () (14.4 * b) and c >= 2"#),
        r#"a{x!="1", y=~"2"} > bool on (slo) group_left () (14.4 * b) and c >= bool 2"#,
        "comparisons get bool, matchers do not"
    );
    assert_eq!(
        comparisons_as_bool("sum without (backend) (h) == 0"),
        "sum without (backend) (h) == bool 0",
        "equality"
    );
    assert_eq!(
        comparisons_as_bool("x > bool 1"),
        "x > bool 1",
        "an existing bool is kept"
    );
    assert_eq!(
        comparisons_as_bool(r#"x{l="a>b"} < 1"#),
        r#"x{l="a>b"} < bool 1"#,
        "inside quotes nothing changes"
    );
}

#[test]
fn label_values_variables_become_count_by_queries() {
    let dashboard = json!({
        "panels": [{"title": "t", "targets": [{"refId": "A", "expr": "sum(rate(x[$__rate_interval]))"}]}],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus"},
            {"name": "backend", "type": "query",
             "query": {"query": "label_values(y{pool=~\"$pool\"}, backend)"}}
        ]}
    });
    let exprs = dashboard_exprs("d.json", &dashboard, VARS);
    assert_eq!(
        exprs,
        vec![
            Expr {
                origin: r#"d.json: panel "t" target A"#.to_owned(),
                promql: "sum(rate(x[1m]))".to_owned(),
                label: None,
            },
            Expr {
                origin: "d.json: variable $backend".to_owned(),
                promql: r#"count by (backend) (y{pool=~".*"})"#.to_owned(),
                label: Some("backend".to_owned()),
            },
        ],
        "targets then query variables"
    );
}

#[test]
fn dashboards_use_only_known_labels() {
    for (name, dashboard) in dashboards() {
        for panel in all_panels(&dashboard) {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or("");
                let legend = target["legendFormat"].as_str().unwrap_or("");
                let in_legend = legend
                    .split("{{")
                    .skip(1)
                    .filter_map(|part| part.split_once("}}"))
                    .map(|(label, _)| label.trim().to_owned());
                for label in label_names(expr).into_iter().chain(in_legend) {
                    assert!(
                        KNOWN_LABELS.contains(&label.as_str()),
                        "{name}: panel {}: unknown label {label:?} in {expr} / {legend}",
                        panel["title"]
                    );
                }
            }
        }
    }
}

#[test]
fn rules_use_only_known_labels() {
    let path = repo_path("deploy/prometheus/tokenmeter-rules.yaml");
    let text = std::fs::read_to_string(&path).expect("read the rules");
    let exprs = rule_file_exprs(&text);
    let rules = text
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("- record:") || line.starts_with("- alert:"))
        .count();
    assert_eq!(
        rules, 45,
        "the rules file has its 45 rules (25 recording, 20 alerting; promtool counts the same)"
    );
    assert_eq!(exprs.len(), rules, "every rule's expr was read");
    let used: Vec<String> = exprs.iter().flat_map(|e| label_names(e)).collect();
    assert!(used.len() > 50, "labels were found: {used:?}");
    for label in used {
        assert!(
            KNOWN_LABELS.contains(&label.as_str()),
            "rules: unknown label {label:?}"
        );
    }
    for part in text.split("$labels.").skip(1) {
        let label: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        assert!(
            KNOWN_LABELS.contains(&label.as_str()),
            "rules: annotation uses unknown label {label:?}"
        );
    }
}

/// Whether a quantile's buckets are summed straight from their rates `by (le)`, or by `le` and
/// labels that are not a sidecar's own (`instance`, `pod`, `job`): such a sum spans the fleet,
/// one series per line drawn.
fn sums_buckets_across_sidecars(expr: &str) -> bool {
    expr.split("sum by (").skip(1).any(|rest| {
        let Some((labels, after)) = rest.split_once(')') else {
            return false;
        };
        let mut labels = labels.split(", ");
        labels.next() == Some("le")
            && labels.all(|label| !["instance", "pod", "job"].contains(&label))
            && after.starts_with(" (rate(")
    })
}

/// The `expr` of every rule in a rules file, block scalars (`expr: |`) included. Reading each
/// expression rather than the whole file matters: an apostrophe in an annotation's prose would
/// otherwise open a "string" that hides the expressions after it from `label_names`.
fn rule_file_exprs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let Some(value) = line
            .trim_start()
            .strip_prefix("- ")
            .unwrap_or(line.trim_start())
            .strip_prefix("expr:")
        else {
            continue;
        };
        let value = value.trim();
        if value != "|" && value != ">" {
            out.push(value.to_owned());
            continue;
        }
        let mut block = String::new();
        while let Some(next) = lines.peek() {
            let next_indent = next.len() - next.trim_start().len();
            if !next.trim().is_empty() && next_indent <= indent {
                break;
            }
            block.push_str(next.trim());
            block.push('\n');
            lines.next();
        }
        out.push(block);
    }
    out
}

#[test]
fn rule_file_exprs_reads_inline_and_block_exprs() {
    let text = "      - alert: A\n        expr: sum by (a) (x) > 0\n        annotations:\n          summary: \"it's {{ $labels.a }}\"\n      - record: r\n        expr: |\n          sum by (b)\n            (y)\n        labels: {}\n";
    assert_eq!(
        rule_file_exprs(text),
        vec![
            "sum by (a) (x) > 0".to_owned(),
            "sum by (b)\n(y)\n".to_owned()
        ]
    );
}

#[test]
fn label_names_are_found_in_groupings_and_matchers() {
    assert_eq!(
        label_names(
            r#"sum by (le, pool) (rate(x{gen_ai_request_model=~"a=b", backend!="c"}[1m])) > on (slo) group_left () y"#
        ),
        vec!["le", "pool", "gen_ai_request_model", "backend", "slo"],
        "by, matchers (not inside strings), on; group_left () is empty"
    );
    assert_eq!(
        label_names("sum without (backend) (model_pool:x:rate5m)"),
        vec!["backend"],
        "without, and a recorded series name is no label"
    );
}
