use super::*;
use crate::testbed::bench::stats::ClassStats;
use crate::testbed::bench::{Ending, RequestRecord};

#[test]
fn validation_refuses_what_cannot_run() {
    let ok = SessionSpec::new("http://127.0.0.1:1");
    assert!(ok.validate().is_ok(), "the defaults are valid");
    let bad = |edit: &dyn Fn(&mut SessionSpec), why: &str| {
        let mut s = ok.clone();
        edit(&mut s);
        assert!(s.validate().is_err(), "{why} is refused");
    };
    bad(&|s| s.rate = 0.0, "rate 0");
    bad(&|s| s.rate = f64::NAN, "rate NaN");
    bad(&|s| s.stop = Stop::Sessions(0), "zero sessions");
    bad(&|s| s.stop = Stop::Requests(10), "a request count");
    bad(
        &|s| s.stop = Stop::Duration(Duration::ZERO),
        "a zero duration",
    );
    bad(
        &|s| {
            s.rate = f64::INFINITY;
            s.stop = Stop::Duration(Duration::from_secs(1));
        },
        "an unlimited rate with a deadline",
    );
    bad(
        &|s| s.session_header = Some("not a header".into()),
        "a header name with spaces",
    );
    bad(&|s| s.workload.system_prompts = 0, "no system prompt");
    bad(&|s| s.url = "https://x".into(), "https");
    let mut inf = ok.clone();
    inf.rate = f64::INFINITY;
    assert!(
        inf.validate().is_ok(),
        "an unlimited rate with a session count starts them all at once"
    );
}

fn turn(session: u64, turn: u32, prompt: u64, cached: u64) -> RequestRecord {
    RequestRecord {
        index: 0,
        class: "session".into(),
        prompt_words: 1,
        max_tokens: 2,
        start_s: 0.0,
        outcome: Ending::Ok,
        status: Some(200),
        error: None,
        ttft_s: Some(0.02),
        itl_s: vec![0.01],
        tpot_s: Some(0.01),
        e2e_s: 0.03,
        token_events: 2,
        output_tokens: 2,
        usage_prompt_tokens: Some(prompt),
        usage_completion_tokens: Some(2),
        usage_cached_tokens: Some(cached),
        session: Some(session),
        turn: Some(turn),
    }
}

fn report(spec: &SessionSpec) -> SessionReport {
    let records: Vec<RequestRecord> = (1..=9).map(|t| turn(0, t, 100, 50)).collect();
    SessionReport {
        point: PointReport {
            mode: spec.mode(),
            model: "m".into(),
            wall_time_s: 2.0,
            classes: vec![ClassStats::from_records("all", &records, 2.0, &spec.slo)],
            requests: records.clone(),
        },
        sessions: SessionResults::new(spec.workload.clone(), None, (1, 1), &records),
    }
}

#[test]
fn the_table_adds_turn_rows_and_the_cache_line() {
    let spec = SessionSpec::new("http://127.0.0.1:1");
    let table = report(&spec).render_table();
    assert!(
        table.starts_with("sessions rate=1 (poisson)  model=m"),
        "the usual header names the session mode:\n{table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("all ")),
        "the usual all row:\n{table}"
    );
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("turn "))
        .skip(1)
        .take_while(|l| !l.starts_with("sessions:"))
        .collect();
    let labels: Vec<&str> = rows
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        labels,
        ["1", "2", "3", "4", "5", "6", "7", "8+"],
        "one row per turn, 8 and 9 together:\n{table}"
    );
    assert!(
        rows[7].contains(" 2 ") && rows[7].trim_end().ends_with("0.50"),
        "the 8+ row counts two requests, half cached:\n{table}"
    );
    assert!(
        rows[0].contains("20.0/20.0/20.0") && rows[0].contains("100.0"),
        "TTFT in ms and mean prompt tokens:\n{table}"
    );
    assert!(
        table.contains("sessions: 1 started, 1 completed; cached prompt tokens: 0.50 (450 of 900)"),
        "the session and cache line:\n{table}"
    );
}

#[test]
fn the_json_report_keeps_the_usual_fields_and_adds_sessions() {
    let mut spec = SessionSpec::new("http://127.0.0.1:1");
    spec.stop = Stop::Sessions(3);
    let bench = report(&spec).into_bench_report(&spec, false);
    let v = serde_json::to_value(&bench).expect("serializes");
    assert_eq!(v["schema_version"], 1, "same schema version");
    assert_eq!(v["stop"]["sessions"], 3, "the session count");
    assert_eq!(v["points"][0]["mode"]["mode"], "sessions", "mode tag");
    assert_eq!(v["points"][0]["mode"]["rate"], 1.0, "sessions per second");
    assert_eq!(
        v["points"][0]["classes"][0]["class"], "all",
        "the usual summary"
    );
    assert!(
        v["points"][0].get("requests").is_none(),
        "records only when asked"
    );
    assert_eq!(v["sessions"]["by_turn"][7]["turn"], 8, "the 8+ row");
    assert_eq!(v["sessions"]["by_turn"][7]["and_later"], true, "and later");
    assert_eq!(v["sessions"]["cached_ratio"], 0.5, "overall ratio");
    assert_eq!(
        v["workload"],
        spec.workload.to_string(),
        "the workload's text form"
    );
    let back: BenchReport = serde_json::from_value(v).expect("reads back");
    assert_eq!(back, bench, "round trip");
    let raw = report(&spec).into_bench_report(&spec, true);
    assert_eq!(raw.points[0].requests.len(), 9, "records with --raw");
}
