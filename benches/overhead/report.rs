//! What a run comes to: `results.jsonl` holds every run as a [`Record`]; `summary.md` is
//! [`summarize`]d from them — medians over repetitions, added figures paired per repetition
//! against each path's baseline ([`super::paths`]), the tables docs/performance.md quotes.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

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
    pub loadavg: String,
    #[serde(default)]
    pub load: Option<LoadResult>,
    #[serde(default)]
    pub idle: Option<IdleResult>,
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
    let (Some(this), Some(direct)) = (by_path.get(path), by_path.get(baseline)) else {
        return f64::NAN;
    };
    median(
        this.iter()
            .filter_map(|(rep, record)| {
                let base = direct.get(rep)?.load.as_ref()?;
                Some(f(record.load.as_ref()?) - f(base))
            })
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
