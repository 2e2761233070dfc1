//! The report side of `bench`: the table, the JSON file (round trip), the SVG plot, and the
//! command line turning into load specs. No network.
use std::time::Duration;

use clap::Parser;
use tokenmeter::cli::{Cli, Command};
use tokenmeter::testbed::bench::{
    write_plot, Arrival, BenchReport, Dist, Ending, LoadMode, LoadSpec, PointReport, RequestRecord,
    Stop,
};

fn record(index: u64, class: &str, outcome: Ending, ttft: f64, gap: f64, n: u64) -> RequestRecord {
    RequestRecord {
        index,
        class: class.into(),
        prompt_words: 100,
        max_tokens: n as u32,
        start_s: index as f64 * 0.01,
        outcome,
        status: Some(200),
        error: (!outcome.is_ok()).then(|| "boom".to_string()),
        ttft_s: Some(ttft),
        itl_s: vec![gap; n.saturating_sub(1) as usize],
        tpot_s: (n >= 2).then_some(gap),
        e2e_s: ttft + gap * (n - 1) as f64,
        token_events: n,
        output_tokens: n,
        usage_prompt_tokens: Some(100),
        usage_completion_tokens: Some(n),
        usage_cached_tokens: None,
        session: None,
        turn: None,
    }
}

fn point(spec: &LoadSpec, concurrency: usize, ttft: f64, gap: f64) -> PointReport {
    let spec = LoadSpec {
        mode: LoadMode::Closed { concurrency },
        ..spec.clone()
    };
    let records = vec![
        record(0, "chat", Ending::Ok, ttft, gap, 8),
        record(1, "doc", Ending::Ok, ttft * 3.0, gap, 4),
        record(2, "chat", Ending::ErrorEvent, ttft, gap, 2),
    ];
    PointReport::new(&spec, "m", 2.0, records)
}

fn spec() -> LoadSpec {
    let mut s = LoadSpec::new("http://127.0.0.1:1");
    s.workload = "chat:3:prompt=fixed:100:output=fixed:8;doc:1:prompt=lognormal:100,0.5:output=4"
        .parse()
        .expect("workload parses");
    s
}

#[test]
fn table_shows_each_class_and_error_kinds() {
    let p = point(&spec(), 4, 0.2, 0.02);
    let table = p.render_table();
    assert!(
        table.starts_with("concurrency=4  model=m"),
        "header names the point:\n{table}"
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_string)
    };
    let all = row("all ").expect("an all row");
    assert!(
        all.contains("400.0/560.0/596.0"),
        "TTFT of 200 and 600 ms, numpy percentiles:\n{table}"
    );
    assert!(
        all.contains("20.0/20.0/20.0"),
        "ITL and TPOT in ms:\n{table}"
    );
    assert!(
        row("chat").is_some() && row("doc").is_some(),
        "one row per class:\n{table}"
    );
    assert!(
        table.contains("errors (all): error_event=1"),
        "error kinds listed:\n{table}"
    );
    assert!(
        table.contains("errors (chat): error_event=1"),
        "per class too:\n{table}"
    );
    assert!(
        table.contains("first error: boom"),
        "an example error message:\n{table}"
    );
    let c = p.all().expect("all");
    assert_eq!((c.requests, c.ok, c.errors), (3, 2, 1), "counts");
    assert_eq!(c.output_tokens_total, 12, "tokens of ok requests");
    assert_eq!(c.slo_met, 2, "both ok requests meet 800 ms / 35 ms");
    assert!((c.goodput - 1.0).abs() < 1e-12, "2 good over 2 s");
}

#[test]
fn json_round_trips() {
    let s = spec();
    let mut open = point(&s, 2, 0.1, 0.01);
    open.mode = LoadMode::Open {
        rate: f64::INFINITY,
        arrival: Arrival::Gamma { burstiness: 0.5 },
    };
    let report = BenchReport::new(&s, vec![point(&s, 1, 0.1, 0.01), open]);
    let dir = std::env::temp_dir().join(format!("tokenmeter-bench-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("out.json");
    report.write_json(&path).expect("JSON written");
    let text = std::fs::read_to_string(&path).expect("read back");
    let back: BenchReport = serde_json::from_str(&text).expect("JSON parses into BenchReport");
    assert_eq!(back, report, "every field survives the round trip");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["schema_version"], 1, "schema version");
    assert_eq!(v["points"][0]["mode"]["mode"], "closed", "mode tag");
    assert_eq!(
        v["points"][1]["mode"]["rate"],
        serde_json::Value::Null,
        "inf rate as null"
    );
    assert_eq!(v["points"][0]["classes"][0]["class"], "all", "all first");
    assert_eq!(v["slo"]["ttft_s"], 0.8, "SLO in seconds");
    assert_eq!(v["stop"]["requests"], 100, "stop condition");
    assert_eq!(
        v["points"][0]["requests"][2]["outcome"], "error_event",
        "raw outcome"
    );
    assert_eq!(
        v["workload"],
        s.workload.to_string(),
        "canonical workload text"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plot_is_an_svg_with_the_series() {
    let s = spec();
    let points: Vec<PointReport> = [1, 2, 4, 8]
        .iter()
        .map(|&c| point(&s, c, 0.05 * c as f64, 0.01 + 0.002 * c as f64))
        .collect();
    let dir = std::env::temp_dir().join(format!("tokenmeter-bench-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("sweep.svg");
    write_plot(&points, &path).expect("plot drawn");
    let svg = std::fs::read_to_string(&path).expect("SVG readable");
    assert!(
        svg.trim_start().starts_with("<svg"),
        "an SVG document: {}",
        &svg[..80.min(svg.len())]
    );
    assert!(
        svg.trim_end().ends_with("</svg>"),
        "a complete SVG document"
    );
    for name in [
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "concurrency",
        "latency (ms)",
    ] {
        assert!(svg.contains(name), "the SVG names {name:?}");
    }
    // Axes and ticks are polylines too: count the lines with a point per sweep point (the
    // series' legend swatches have two).
    let points_per_line: Vec<usize> = svg
        .lines()
        .filter(|l| l.contains("<polyline") && l.contains(r#"stroke-width="2""#))
        .filter_map(|l| l.split("points=\"").nth(1)?.split('"').next())
        .map(|points| points.split_whitespace().count())
        .collect();
    assert_eq!(
        points_per_line,
        [4, 4, 4, 4, 2, 2, 2, 2],
        "one line per series through the sweep's 4 points, then the 4 legend swatches"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn bench_args(args: &[&str]) -> tokenmeter::testbed::bench::BenchArgs {
    let argv = ["tokenmeter", "bench"].iter().chain(args).copied();
    match Cli::try_parse_from(argv).expect("arguments parse").command {
        Command::Bench(a) => a,
        other => panic!("expected bench, got {other:?}"),
    }
}

#[test]
fn command_line_builds_sweeps() {
    let (spec, modes) = bench_args(&["--concurrency", "1,2,4,8", "--requests", "7"])
        .to_specs()
        .expect("valid");
    let xs: Vec<f64> = modes.iter().map(LoadMode::x).collect();
    assert_eq!(xs, [1.0, 2.0, 4.0, 8.0], "a comma list sweeps concurrency");
    assert_eq!(spec.stop, Stop::Requests(7), "per-point request count");
    assert_eq!(
        spec.workload.classes()[0].prompt,
        Dist::Fixed(128),
        "default prompt length"
    );

    let args = bench_args(&[
        "--rate",
        "1,2.5",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--duration",
        "30s",
        "--prompt-tokens",
        "uniform:10-20",
        "--output-tokens",
        "64",
        "--slo-ttft",
        "1s",
        "--slo-tpot",
        "20ms",
        "--seed",
        "9",
        "--endpoint",
        "completions",
    ]);
    let (spec, modes) = args.to_specs().expect("valid");
    assert_eq!(
        modes,
        [1.0, 2.5].map(|rate| LoadMode::Open {
            rate,
            arrival: Arrival::Gamma { burstiness: 0.5 }
        }),
        "a comma list sweeps rate with the chosen arrival process"
    );
    assert_eq!(
        spec.stop,
        Stop::Duration(Duration::from_secs(30)),
        "humantime duration"
    );
    assert_eq!(
        spec.workload.classes()[0].prompt,
        Dist::Uniform { lo: 10, hi: 20 },
        "prompt dist"
    );
    assert_eq!(spec.slo.tpot, Duration::from_millis(20), "SLO TPOT");
    assert_eq!(spec.seed, 9, "seed");

    let (spec, modes) = bench_args(&[]).to_specs().expect("defaults are valid");
    assert_eq!(
        modes,
        [LoadMode::Closed { concurrency: 1 }],
        "default: one user"
    );
    assert_eq!(
        spec.stop,
        Stop::Requests(100),
        "default: bounded at 100 requests"
    );
}

#[test]
fn command_line_errors_name_the_problem() {
    let err = |args: &[&str]| {
        let argv = ["tokenmeter", "bench"].iter().chain(args).copied();
        match Cli::try_parse_from(argv) {
            Err(e) => e.to_string(),
            Ok(cli) => match cli.command {
                Command::Bench(a) => a.to_specs().expect_err("spec is invalid").to_string(),
                other => panic!("expected bench, got {other:?}"),
            },
        }
    };
    let e = err(&["--workload", "chat:1:prompt=uniform:9-3:output=1"]);
    assert!(e.contains("uniform:9-3"), "names the bad distribution: {e}");
    let e = err(&["--concurrency", "2", "--rate", "1"]);
    assert!(
        e.contains("--rate") || e.contains("--concurrency"),
        "closed and open conflict: {e}"
    );
    let e = err(&["--burstiness", "2"]);
    assert!(e.contains("--arrival gamma"), "burstiness needs gamma: {e}");
    let e = err(&["--concurrency", "0"]);
    assert!(e.contains("concurrency"), "zero concurrency refused: {e}");
    let e = err(&["--rate", "inf", "--duration", "5s"]);
    assert!(e.contains("inf"), "unbounded open loop refused: {e}");
    let e = err(&["--url", "https://example.com"]);
    assert!(e.contains("http://"), "TLS URL refused: {e}");
}
