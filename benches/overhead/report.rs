//! What a run comes to: `results.jsonl` holds every run as a [`Record`]; `summary.md` is
//! [`summarize`]d from them — medians over repetitions, added figures paired per repetition
//! against each path's baseline ([`super::paths`]), the tables docs/performance.md quotes. The
//! tenant paths get a section of their own, against plain tokenmeter ([`tenant_sections`]).
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::budgets::StoreFigures;
use super::client::{IdleResult, LoadResult};
use super::paths;

/// One line of results.jsonl.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Record {
    pub kind: String,
    pub rep: usize,
    pub path: String,
    pub streams: usize,
    pub interval_us: u64,
    pub proxy_cpu_s: f64,
    pub backend_cpu_s: f64,
    /// The CPU of the Redis a budget path keeps its budget in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_cpu_s: Option<f64>,
    /// How long the Redis budget path took, after the load, to settle what the run admitted
    /// (its CPU is in the run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_s: Option<f64>,
    pub loadavg: String,
    #[serde(default)]
    pub load: Option<LoadResult>,
    #[serde(default)]
    pub idle: Option<IdleResult>,
    /// What a tenant path's budget store did during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreFigures>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Per (kind, streams): path -> rep -> record.
type Grouped<'a> = BTreeMap<(String, usize), ByPath<'a>>;

/// Path -> rep -> record, at one (kind, streams).
type ByPath<'a> = BTreeMap<String, BTreeMap<usize, &'a Record>>;

fn group(records: &[Record]) -> Grouped<'_> {
    let mut out: Grouped<'_> = BTreeMap::new();
    for record in records.iter().filter(|r| r.load.is_some()) {
        out.entry((record.kind.clone(), record.streams))
            .or_default()
            .entry(record.path.clone())
            .or_default()
            .insert(record.rep, record);
    }
    out
}

fn cpu_per_million(record: &Record) -> f64 {
    let chunks = record.load.as_ref().map_or(0, |l| l.chunks_total);
    if chunks == 0 {
        f64::NAN
    } else {
        record.proxy_cpu_s / chunks as f64 * 1e6
    }
}

/// CPU-µs per request: of the proxy (`proxy_cpu_s`), or of what `cpu_s` picks.
fn us_per_request(record: &Record, cpu_s: impl Fn(&Record) -> f64) -> f64 {
    let requests = record.load.as_ref().map_or(0, |l| l.requests);
    if requests == 0 {
        f64::NAN
    } else {
        cpu_s(record) / requests as f64 * 1e6
    }
}

fn proxy_us_per_request(record: &Record) -> f64 {
    us_per_request(record, |r| r.proxy_cpu_s)
}

fn fmt(value: f64) -> String {
    if !value.is_finite() {
        "–".to_owned()
    } else if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The median over reps of `f(path) - f(baseline)`, paired by repetition; the baseline is direct,
/// or direct-tls for a TLS path ([`paths`]).
fn added(by_path: &ByPath<'_>, path: &str, f: impl Fn(&LoadResult) -> f64) -> f64 {
    let baseline = paths::spec(path).map_or("direct", |spec| spec.baseline);
    paired(by_path, path, baseline, |record| {
        record.load.as_ref().map_or(f64::NAN, &f)
    })
}

/// The median over reps of `f(path) - f(against)`, paired by repetition.
fn paired(by_path: &ByPath<'_>, path: &str, against: &str, f: impl Fn(&Record) -> f64) -> f64 {
    let (Some(this), Some(base)) = (by_path.get(path), by_path.get(against)) else {
        return f64::NAN;
    };
    median(
        this.iter()
            .filter_map(|(rep, record)| Some(f(record) - f(base.get(rep)?)))
            .collect(),
    )
}

fn med(reps: &BTreeMap<usize, &Record>, f: impl Fn(&Record) -> f64) -> f64 {
    median(reps.values().map(|r| f(r)).collect())
}

/// The whole summary.md: `reps` repetitions at the paced `concurrency` points.
pub fn summarize(records: &[Record], reps: usize, concurrency: &[usize]) -> String {
    let grouped = group(records);
    let mut out = String::new();
    let paths = paths::PATHS.map(|spec| spec.name);
    out.push_str(&format!(
        "Medians of {} repetitions; added = median of per-repetition differences against direct \
         (against direct-tls for the TLS paths: client -> TLS backend, the one TLS hop there is \
         without a proxy). Latencies in µs; CPU in CPU-seconds of the proxy process(es) per \
         million content chunks.\n\n",
        reps
    ));
    out.push_str("### Latency (paced streams)\n\n");
    out.push_str("| streams | gap/stream | path | chunk p50 | chunk p99 | added p50 | added p99 | TTFT p50 | TTFT p99 | added TTFT p50 | added TTFT p99 | chunks/s | proxy CPU s/M chunks | load avg (1 5 15) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for ((kind, streams), by_path) in &grouped {
        if kind != "latency" {
            continue;
        }
        for path in paths {
            let Some(reps) = by_path.get(path) else {
                continue;
            };
            let l = |f: fn(&LoadResult) -> f64| med(reps, |r| r.load.as_ref().map_or(f64::NAN, f));
            let interval = reps.values().next().map_or(0, |r| r.interval_us);
            let loads: Vec<_> = reps.values().map(|r| r.loadavg.clone()).collect();
            out.push_str(&format!(
                "| {streams} | {} ms | {path} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                interval / 1000,
                fmt(l(|x| x.chunk_p50_us)),
                fmt(l(|x| x.chunk_p99_us)),
                fmt(added(by_path, path, |x| x.chunk_p50_us)),
                fmt(added(by_path, path, |x| x.chunk_p99_us)),
                fmt(l(|x| x.ttft_p50_us)),
                fmt(l(|x| x.ttft_p99_us)),
                fmt(added(by_path, path, |x| x.ttft_p50_us)),
                fmt(added(by_path, path, |x| x.ttft_p99_us)),
                fmt(l(|x| x.chunks_per_s)),
                fmt(med(reps, cpu_per_million)),
                loads.join(" / "),
            ));
        }
    }
    out.push_str("\n### Saturation (chunks back to back)\n\n| streams | path | chunks/s | proxy CPU s/M chunks | client CPU s | backend CPU s | load avg |\n|---|---|---|---|---|---|---|\n");
    let mut saturation_cpu = BTreeMap::new();
    for ((kind, streams), by_path) in &grouped {
        if kind != "saturation" {
            continue;
        }
        for path in paths {
            let Some(reps) = by_path.get(path) else {
                continue;
            };
            let per_million = med(reps, cpu_per_million);
            saturation_cpu.insert(path, per_million);
            out.push_str(&format!(
                "| {streams} | {path} | {} | {} | {} | {} | {} |\n",
                fmt(med(reps, |r| r
                    .load
                    .as_ref()
                    .map_or(f64::NAN, |l| l.chunks_per_s))),
                fmt(per_million),
                fmt(med(reps, |r| r
                    .load
                    .as_ref()
                    .map_or(f64::NAN, |l| l.client_cpu_s))),
                fmt(med(reps, |r| r.backend_cpu_s)),
                reps.values()
                    .map(|r| r.loadavg.clone())
                    .collect::<Vec<_>>()
                    .join(" / "),
            ));
        }
    }
    if grouped.keys().any(|(kind, _)| kind == "requests") {
        out.push_str(&requests_table(&grouped, &paths));
    }
    out.push_str("\n### Idle streams\n\n| path | streams open | RSS before (MiB) | RSS with streams (MiB) | KiB per stream |\n|---|---|---|---|---|\n");
    let mut idle_kib = BTreeMap::new();
    for record in records.iter().filter(|r| r.kind == "idle") {
        if let Some(idle) = &record.idle {
            idle_kib.insert(record.path.clone(), idle.kib_per_stream);
            out.push_str(&format!(
                "| {} | {} / {} | {} | {} | {} |\n",
                record.path,
                idle.streams_open,
                idle.streams_wanted,
                fmt(idle.rss_before_kib as f64 / 1024.0),
                fmt(idle.rss_after_kib as f64 / 1024.0),
                fmt(idle.kib_per_stream),
            ));
        }
    }
    let figures = Figures {
        grouped: &grouped,
        saturation_cpu: &saturation_cpu,
        idle_kib: &idle_kib,
        low: concurrency.iter().min().copied(),
        top: concurrency.iter().max().copied(),
    };
    let ran = |path: &str| records.iter().any(|r| r.path == path);
    // The difference between the two tokenmeter columns is the metering; the unmetered column is
    // the forwarding.
    let breakdown = ["hyper-bare", "tokenmeter-unmetered", "tokenmeter", "nginx"];
    if breakdown[..3].iter().any(|path| ran(path)) {
        out.push_str(&figures.table("Where the cost goes: forwarding and metering", &breakdown));
    }
    for baseline in ["nginx", "haproxy"] {
        if ran(baseline) && ran("tokenmeter") {
            out.push_str(&figures.versus("tokenmeter", baseline));
        }
    }
    if TLS_COLUMNS.iter().any(|path| ran(path)) {
        out.push_str(&tls_sections(records, &figures, &ran));
    }
    let tenant_paths: Vec<&str> = paths::PATHS
        .iter()
        .filter(|spec| spec.reference.is_some() && ran(spec.name))
        .map(|spec| spec.name)
        .collect();
    if !tenant_paths.is_empty() {
        out.push_str(&tenant_sections(
            records,
            &figures,
            &tenant_paths,
            concurrency,
        ));
    }
    out
}

/// The request runs: 1-chunk requests back to back, so a request's own cost is what the CPU
/// per request shows.
fn requests_table(grouped: &Grouped<'_>, paths: &[&str]) -> String {
    let mut out = String::from(
        "\n### Requests (1-chunk requests back to back)\n\n| streams | path | requests/s | proxy CPU µs per request | Redis CPU µs per request | TTFT p50 | TTFT p99 | added TTFT p50 | added TTFT p99 | load avg |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for ((kind, streams), by_path) in grouped {
        if kind != "requests" {
            continue;
        }
        for &path in paths {
            let Some(reps) = by_path.get(path) else {
                continue;
            };
            let l = |f: fn(&LoadResult) -> f64| med(reps, |r| r.load.as_ref().map_or(f64::NAN, f));
            let redis = med(reps, |r| {
                us_per_request(r, |r| r.store_cpu_s.unwrap_or(f64::NAN))
            });
            out.push_str(&format!(
                "| {streams} | {path} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                // One content chunk per request: chunks/s in the measured window is requests/s.
                fmt(l(|x| x.chunks_per_s)),
                fmt(med(reps, proxy_us_per_request)),
                fmt(redis),
                fmt(l(|x| x.ttft_p50_us)),
                fmt(l(|x| x.ttft_p99_us)),
                fmt(added(by_path, path, |x| x.ttft_p50_us)),
                fmt(added(by_path, path, |x| x.ttft_p99_us)),
                reps.values()
                    .map(|r| r.loadavg.clone())
                    .collect::<Vec<_>>()
                    .join(" / "),
            ));
        }
    }
    out
}

/// The tenant paths beside plain tokenmeter: each figure, and in parentheses its difference to
/// tokenmeter's (the median of the per-repetition differences); what the Redis store did in each
/// run; and what every budget decided over all of them.
fn tenant_sections(
    records: &[Record],
    figures: &Figures<'_>,
    tenant_paths: &[&str],
    concurrency: &[usize],
) -> String {
    const REFERENCE: &str = "tokenmeter";
    let mut columns = vec![REFERENCE];
    columns.extend_from_slice(tenant_paths);
    let mut out = format!(
        "\n### Tenants and budgets: against {REFERENCE}\n\nEach cell: the median over the repetitions, and (in parentheses) the median of the per-repetition differences to {REFERENCE}'s. Latencies in µs.\n\n| figure | {} |\n|---|{}\n",
        columns.join(" | "),
        "---|".repeat(columns.len())
    );
    let mut row = |label: String, by_path: &ByPath<'_>, f: &dyn Fn(&Record) -> f64| {
        let cells: Vec<String> = columns
            .iter()
            .map(|&path| {
                let Some(reps) = by_path.get(path) else {
                    return fmt(f64::NAN);
                };
                let value = fmt(med(reps, f));
                if path == REFERENCE {
                    return value;
                }
                let difference = paired(by_path, path, REFERENCE, f);
                let sign = if difference >= 0.0 { "+" } else { "" };
                format!("{value} ({sign}{})", fmt(difference))
            })
            .collect();
        out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    };
    let load = |f: fn(&LoadResult) -> f64| move |r: &Record| r.load.as_ref().map_or(f64::NAN, f);
    let points = points(figures.grouped, concurrency);
    for point in &points {
        let Point {
            label,
            kind,
            by_path,
            ..
        } = point;
        if *kind == "requests" {
            let f = proxy_us_per_request;
            row(format!("proxy CPU µs per request ({label})"), by_path, &f);
            let f = load(|x| x.chunks_per_s);
            row(format!("requests/s ({label})"), by_path, &f);
        }
        if *kind != "saturation" {
            let f = load(|x| x.ttft_p50_us);
            row(format!("TTFT p50 ({label})"), by_path, &f);
            let f = load(|x| x.ttft_p99_us);
            row(format!("TTFT p99 ({label})"), by_path, &f);
        }
        if *kind == "latency" {
            let f = load(|x| x.chunk_p50_us);
            row(format!("chunk p50 ({label})"), by_path, &f);
            let f = load(|x| x.chunk_p99_us);
            row(format!("chunk p99 ({label})"), by_path, &f);
        }
        // As the other tables, the paced CPU at the top concurrency only: below it a run's CPU
        // is a few 10 ms ticks.
        let top = *kind == "latency" && Some(point.streams) == concurrency.iter().max().copied();
        if top || *kind == "saturation" {
            let f = cpu_per_million;
            row(format!("proxy CPU s per M chunks ({label})"), by_path, &f);
        }
    }
    out.push_str(&redis_table(&points));
    out.push_str(&decisions_table(records, tenant_paths));
    out
}

/// One run point of the tenant tables.
struct Point<'a> {
    label: String,
    /// `requests`, `latency` (paced) or `saturation`.
    kind: &'static str,
    streams: usize,
    by_path: &'a ByPath<'a>,
}

/// The points the tenant tables show, in order: the request run, the paced points, the
/// saturation run.
fn points<'a>(grouped: &'a Grouped<'a>, concurrency: &[usize]) -> Vec<Point<'a>> {
    let of_kind = |kind: &'static str, label: &'static str| {
        grouped
            .iter()
            .filter(move |((k, _), _)| k == kind)
            .map(move |((_, streams), by_path)| Point {
                label: format!("{label}, {streams} streams"),
                kind,
                streams: *streams,
                by_path,
            })
    };
    let mut points: Vec<Point<'a>> = of_kind("requests", "1-chunk requests").collect();
    for &streams in concurrency {
        points.extend(of_kind("latency", "paced").filter(|p| p.streams == streams));
    }
    points.extend(of_kind("saturation", "saturation"));
    points
}

/// The Redis budget path, run by run: the round trips tokenmeter timed, Redis's own time per
/// script, the CPU of both per request, and how long the settlements took to catch up after the
/// load ended (included in the CPU).
fn redis_table(points: &[Point<'_>]) -> String {
    const PATH: &str = "tokenmeter-budget-redis";
    let mut out = format!(
        "\n### The Redis store ({PATH}), per run\n\nMedians over the repetitions; round trips as tokenmeter timed them (admissions wait in line on one multiplexed connection; settlements go one at a time). CPU is read in 10 ms ticks: – where a run used less than 0.1 s.\n\n| run | requests | admit round trip, mean µs | settle round trip, mean µs | Redis µs per EVALSHA | Redis CPU µs per request | proxy CPU µs per request | settling after the load, s |\n|---|---|---|---|---|---|---|---|\n"
    );
    let mut any = false;
    for Point { label, by_path, .. } in points {
        let Some(reps) = by_path.get(PATH) else {
            continue;
        };
        any = true;
        let store =
            |f: fn(&StoreFigures) -> f64| med(reps, |r| r.store.as_ref().map_or(f64::NAN, f));
        // CPU per request, when the run used enough of it to be read.
        let per_request = |cpu_s: fn(&Record) -> f64| {
            med(reps, |r| {
                if cpu_s(r) < 0.1 {
                    f64::NAN
                } else {
                    us_per_request(r, cpu_s)
                }
            })
        };
        let requests = med(reps, |r| {
            r.load.as_ref().map_or(f64::NAN, |l| l.requests as f64)
        });
        out.push_str(&format!(
            "| {label} | {requests:.0} | {} | {} | {} | {} | {} | {} |\n",
            fmt(store(StoreFigures::admit_mean_us)),
            fmt(store(StoreFigures::settle_mean_us)),
            fmt(store(StoreFigures::evalsha_us_per_call)),
            fmt(per_request(|r| r.store_cpu_s.unwrap_or(f64::NAN))),
            fmt(per_request(|r| r.proxy_cpu_s)),
            fmt(med(reps, |r| r.drain_s.unwrap_or(f64::NAN))),
        ));
    }
    if any {
        out
    } else {
        String::new()
    }
}

/// What every budget decided over all runs: nothing refused and no store missed, when the limits
/// are out of reach and the store answers.
fn decisions_table(records: &[Record], tenant_paths: &[&str]) -> String {
    let mut out = String::from(
        "\n### Budget decisions over all runs\n\n| path | requests | refused | store errors | fallbacks | settlements dropped |\n|---|---|---|---|---|---|\n",
    );
    for &path in tenant_paths {
        let of_path = || records.iter().filter(|r| r.path == path);
        let total = |f: fn(&StoreFigures) -> f64| {
            of_path()
                .filter_map(|r| r.store.as_ref().map(f))
                .fold(0.0, |sum, value| sum + value)
        };
        let requests: u64 = of_path()
            .filter_map(|r| r.load.as_ref())
            .map(|l| l.requests)
            .sum();
        out.push_str(&format!(
            "| {path} | {requests} | {} | {} | {} | {} |\n",
            total(|s| s.rejections),
            total(|s| s.store_errors),
            total(|s| s.fallbacks),
            total(|s| s.settlements_dropped),
        ));
    }
    out
}

/// The TLS proxies, tokenmeter's next to nginx's on the same side.
const TLS_COLUMNS: [&str; 4] = [
    "tokenmeter-tls-client",
    "nginx-tls-client",
    "tokenmeter-tls-upstream",
    "nginx-tls-upstream",
];

/// What each TLS path negotiated, the TLS paths side by side (with the plain tokenmeter and
/// nginx when they ran, for what TLS adds), and tokenmeter / nginx on each side.
fn tls_sections(records: &[Record], figures: &Figures<'_>, ran: &dyn Fn(&str) -> bool) -> String {
    let mut out = String::from(
        "\n### TLS: what was negotiated\n\n| path | client's connection | connection into the backend |\n|---|---|---|\n",
    );
    for spec in paths::PATHS.iter().filter(|spec| paths::is_tls(spec.name)) {
        let mut client = BTreeSet::new();
        let mut backend = BTreeSet::new();
        for record in records.iter().filter(|r| r.path == spec.name) {
            let load = record.load.as_ref();
            client.extend(load.and_then(|l| l.tls.clone()));
            client.extend(record.idle.as_ref().and_then(|i| i.tls.clone()));
            backend.extend(load.and_then(|l| l.backend_tls.clone()));
        }
        if client.is_empty() && backend.is_empty() {
            continue;
        }
        let show = |set: &BTreeSet<String>| {
            if set.is_empty() {
                "plain HTTP".to_owned()
            } else {
                set.iter().cloned().collect::<Vec<_>>().join(" / ")
            }
        };
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            spec.name,
            show(&client),
            show(&backend)
        ));
    }
    let mut columns: Vec<&str> = TLS_COLUMNS.iter().copied().filter(|p| ran(p)).collect();
    columns.extend(["tokenmeter", "nginx"].into_iter().filter(|p| ran(p)));
    out.push_str(&figures.table("TLS: tokenmeter and nginx side by side", &columns));
    for (ours, theirs) in [
        ("tokenmeter-tls-client", "nginx-tls-client"),
        ("tokenmeter-tls-upstream", "nginx-tls-upstream"),
    ] {
        if ran(ours) && ran(theirs) {
            out.push_str(&figures.versus(ours, theirs));
        }
    }
    out
}

/// The per-path figures the tables quote: saturated and paced CPU per chunk, added latency and
/// TTFT at the lowest (`low`) and the highest (`top`) paced concurrency, memory per idle stream.
struct Figures<'a> {
    grouped: &'a Grouped<'a>,
    saturation_cpu: &'a BTreeMap<&'a str, f64>,
    idle_kib: &'a BTreeMap<String, f64>,
    low: Option<usize>,
    top: Option<usize>,
}

impl Figures<'_> {
    fn paced(&self, streams: Option<usize>) -> Option<(usize, &ByPath<'_>)> {
        streams.and_then(|n| Some((n, self.grouped.get(&("latency".to_owned(), n))?)))
    }

    /// One table, a column per path of `columns`, at saturation and at the `low` and `top`
    /// paced concurrency.
    fn table(&self, title: &str, columns: &[&str]) -> String {
        let mut out = format!(
            "\n### {title}\n\n| figure | {} |\n|---|{}\n",
            columns.join(" | "),
            "---|".repeat(columns.len())
        );
        let mut row = |label: String, value: &dyn Fn(&str) -> f64| {
            let cells: Vec<String> = columns.iter().map(|path| fmt(value(path))).collect();
            out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
        };
        row("CPU s per M chunks (saturation)".to_owned(), &|path| {
            self.saturation_cpu.get(path).copied().unwrap_or(f64::NAN)
        });
        if let Some((top, by_path)) = self.paced(self.top) {
            row(
                format!("CPU s per M chunks (paced, {top} streams)"),
                &|path| {
                    by_path
                        .get(path)
                        .map_or(f64::NAN, |reps| med(reps, cpu_per_million))
                },
            );
        }
        for (streams, label, f) in [
            (
                self.low,
                "added chunk p50 µs",
                (|x: &LoadResult| x.chunk_p50_us) as fn(&LoadResult) -> f64,
            ),
            (self.top, "added chunk p99 µs", |x: &LoadResult| {
                x.chunk_p99_us
            }),
            (self.top, "added TTFT p99 µs", |x: &LoadResult| {
                x.ttft_p99_us
            }),
        ] {
            if let Some((n, by_path)) = self.paced(streams) {
                row(format!("{label} ({n} streams)"), &|path| {
                    added(by_path, path, f)
                });
            }
        }
        row("KiB per idle stream".to_owned(), &|path| {
            self.idle_kib.get(path).copied().unwrap_or(f64::NAN)
        });
        out
    }

    /// The `<ours> / <baseline>` table: the figures the headline quotes, one of tokenmeter's
    /// paths against the C baseline's on the same side, at the saturation point and the highest
    /// paced concurrency.
    fn versus(&self, ours: &str, baseline: &str) -> String {
        let mut out = format!(
            "\n### {ours} / {baseline}\n\n| figure | {ours} | {baseline} | ratio |\n|---|---|---|---|\n"
        );
        let mut row = |label: &str, a: f64, b: f64| {
            out.push_str(&format!(
                "| {label} | {} | {} | {} |\n",
                fmt(a),
                fmt(b),
                fmt(a / b)
            ));
        };
        if let (Some(tm), Some(base)) = (
            self.saturation_cpu.get(ours),
            self.saturation_cpu.get(baseline),
        ) {
            row("CPU s per M chunks (saturation)", *tm, *base);
        }
        if let Some((top, by_path)) = self.paced(self.top) {
            if let (Some(tm), Some(base)) = (by_path.get(ours), by_path.get(baseline)) {
                row(
                    &format!("CPU s per M chunks (paced, {top} streams)"),
                    med(tm, cpu_per_million),
                    med(base, cpu_per_million),
                );
                for (label, f) in [
                    (
                        "added chunk p99 µs",
                        (|x: &LoadResult| x.chunk_p99_us) as fn(&LoadResult) -> f64,
                    ),
                    ("added TTFT p99 µs", |x: &LoadResult| x.ttft_p99_us),
                ] {
                    row(
                        &format!("{label} ({top} streams)"),
                        added(by_path, ours, f),
                        added(by_path, baseline, f),
                    );
                }
            }
        }
        if let (Some(tm), Some(base)) = (self.idle_kib.get(ours), self.idle_kib.get(baseline)) {
            row("KiB per idle stream", *tm, *base);
        }
        out
    }
}
