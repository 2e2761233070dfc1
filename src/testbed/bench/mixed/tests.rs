use std::time::Duration;

use super::*;
use crate::testbed::bench::{Arrival, Dist, Ending, RequestRecord, SessionWorkload};
use crate::testbed::sim::{spawn, SimConfig};

const MIX: &str = "chat:3:prompt=20:output=4,document:1:prompt=200:output=2";

fn spec(url: &str, duration: Duration) -> MixedSpec {
    let stop = Stop::Duration(duration);
    let mut requests = LoadSpec::new(url);
    requests.mode = LoadMode::Open {
        rate: 40.0,
        arrival: Arrival::Constant,
    };
    requests.stop = stop;
    requests.workload = MIX.parse().expect("the mix parses");
    requests.seed = 5;
    requests.request_timeout = Duration::from_secs(10);
    let mut sessions = SessionSpec::new(url);
    sessions.rate = 10.0;
    sessions.arrival = Arrival::Constant;
    sessions.stop = stop;
    sessions.workload = SessionWorkload {
        system_prompts: 2,
        system_tokens: Dist::Fixed(40),
        turns: Dist::Fixed(3),
        user_tokens: Dist::Fixed(8),
        output_tokens: Dist::Fixed(3),
        think_time: Duration::from_millis(150),
    };
    sessions.seed = 5;
    sessions.request_timeout = Duration::from_secs(10);
    MixedSpec { requests, sessions }
}

#[test]
fn validation_refuses_halves_that_do_not_fit() {
    let ok = spec("http://127.0.0.1:1", Duration::from_secs(1));
    assert!(ok.validate().is_ok(), "the test spec is valid");
    let bad = |edit: &dyn Fn(&mut MixedSpec), why: &str| {
        let mut s = ok.clone();
        edit(&mut s);
        assert!(s.validate().is_err(), "{why} is refused");
    };
    bad(
        &|s| s.requests.mode = LoadMode::Closed { concurrency: 2 },
        "a closed loop of requests",
    );
    bad(
        &|s| s.sessions.stop = Stop::Duration(Duration::from_secs(2)),
        "another deadline for the sessions",
    );
    bad(
        &|s| {
            s.requests.stop = Stop::Requests(10);
            s.sessions.stop = Stop::Sessions(2);
        },
        "counts instead of a deadline",
    );
    bad(
        &|s| s.sessions.arrival = Arrival::Poisson,
        "another arrival process for the sessions",
    );
    bad(
        &|s| s.requests.workload = "session:1:prompt=1:output=1".parse().expect("parses"),
        "a request class named like the sessions' row",
    );
    bad(&|s| s.sessions.rate = 0.0, "an invalid half");
    assert_eq!(
        ok.mode().label(),
        "rate=40 + sessions rate=10 (constant)",
        "the mode names both rates"
    );
}

fn record(class: &str, index: u64, ttft_s: f64, turn: Option<u32>) -> RequestRecord {
    RequestRecord {
        index,
        class: class.into(),
        prompt_words: 10,
        max_tokens: 2,
        start_s: 0.0,
        outcome: Ending::Ok,
        status: Some(200),
        error: None,
        ttft_s: Some(ttft_s),
        itl_s: vec![0.01],
        tpot_s: Some(0.01),
        e2e_s: ttft_s + 0.01,
        token_events: 2,
        output_tokens: 2,
        usage_prompt_tokens: Some(10),
        usage_completion_tokens: Some(2),
        usage_cached_tokens: turn.map(|_| 5),
        session: turn.map(|_| 0),
        turn,
    }
}

/// Each row of the report's point, in order: its class and how many requests it holds.
fn requests_per_row(report: &SessionReport) -> Vec<(&str, u64)> {
    report
        .point
        .classes
        .iter()
        .map(|c| (c.class.as_str(), c.requests))
        .collect()
}

#[test]
fn the_merged_report_has_a_row_per_class_and_one_for_sessions() {
    let spec = spec("http://127.0.0.1:1", Duration::from_secs(1));
    let request_records = vec![
        record("chat", 0, 0.1, None),
        record("chat", 1, 0.2, None),
        record("document", 2, 2.0, None),
    ];
    let requests = PointReport::new(&spec.requests, "m", 3.0, request_records);
    let turns: Vec<RequestRecord> = (1..=2)
        .map(|t| record("session", 0, 0.05, Some(t)))
        .collect();
    let sessions = SessionReport {
        point: PointReport {
            mode: spec.sessions.mode(),
            model: "m".into(),
            wall_time_s: 4.0,
            classes: vec![ClassStats::from_records(
                "all",
                &turns,
                4.0,
                &spec.sessions.slo,
            )],
            requests: turns.clone(),
        },
        sessions: crate::testbed::bench::SessionResults::new(
            spec.sessions.workload.clone(),
            None,
            (1, 1),
            &turns,
        ),
    };
    let merged = merge(&spec, requests, sessions);
    let rows = requests_per_row(&merged);
    assert_eq!(
        rows,
        [("all", 5), ("chat", 2), ("document", 1), ("session", 2)],
        "all, the request classes in workload order, then the sessions"
    );
    assert_eq!(merged.point.wall_time_s, 4.0, "the longer half's wall time");
    let all = merged.point.all().expect("an all row");
    assert_eq!(
        (all.slo_met, all.goodput),
        (4, 1.0),
        "the document's 2 s TTFT misses the SLO; goodput over 4 s"
    );
    assert_eq!(
        merged.point.class("session").map(|c| c.ttft.p99),
        Some(0.05),
        "the sessions' row summarises the turns"
    );
    assert_eq!(merged.point.requests.len(), 5, "every record kept");
    assert_eq!(
        merged.sessions.by_turn.len(),
        2,
        "the session rows are the sessions'"
    );
    assert_eq!(merged.point.mode, spec.mode(), "the mixed mode");
    let table = merged.render_table();
    assert!(
        table.starts_with("rate=40 + sessions rate=10 (constant)")
            && ["all ", "chat ", "document ", "session "]
                .iter()
                .all(|row| table.lines().any(|l| l.starts_with(row))),
        "the table names the mode and has every row:\n{table}"
    );
    let json = serde_json::to_value(spec.bench_report(merged, false)).expect("serializes");
    assert_eq!(json["points"][0]["mode"]["mode"], "mixed", "mode tag");
    assert_eq!(
        json["points"][0]["mode"]["session_rate"], 10.0,
        "sessions per second"
    );
    assert_eq!(
        json["workload"],
        MIX.parse::<crate::testbed::bench::Workload>()
            .expect("parses")
            .to_string(),
        "the requests' workload"
    );
    assert!(json["sessions"]["by_turn"].is_array(), "the session rows");
}

/// The request half's schedule, exactly, on paused time: arrivals every 25 ms until the
/// deadline whatever the sessions do, then on (on schedule) while the sessions run, and not one
/// after they end. The requests go to an address that refuses them: only their arrival
/// matters, and each is stamped when its timer fires, before any I/O.
#[tokio::test(start_paused = true)]
async fn past_the_deadline_requests_arrive_until_the_sessions_end_and_not_after() {
    let refusing = tokio::net::TcpSocket::new_v4().expect("a socket");
    refusing
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind a loopback port");
    let url = format!("http://{}", refusing.local_addr().expect("its address"));
    let mut requests = spec(&url, Duration::from_millis(300)).requests;
    requests.model = Some("m".into());
    // Sessions over at 512 ms: arrivals at 300 to 500 ms go on past the deadline. Over at
    // 100 ms: the deadline still holds (arrivals at 0 to 275 ms).
    for (sessions_end, arrivals) in [(512, 21), (100, 12)] {
        let origin = tokio::time::Instant::now();
        let sessions_over = CancellationToken::new();
        let cancel = sessions_over.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(origin + Duration::from_millis(sessions_end)).await;
            cancel.cancel();
        });
        let point = run_point_until(
            &BenchClient::new(),
            &requests,
            &Arc::new(Progress::default()),
            Some(sessions_over),
        )
        .await
        .expect("the point runs");
        let starts: Vec<(u64, f64)> = point
            .requests
            .iter()
            .map(|r| (r.index, r.start_s))
            .collect();
        let want: Vec<(u64, f64)> = (0..arrivals)
            .map(|i| (i, Duration::from_millis(25 * i).as_secs_f64()))
            .collect();
        assert_eq!(
            starts, want,
            "sessions over at {sessions_end} ms: arrivals every 25 ms, each on time, the last \
             before the later of the deadline and the sessions' end"
        );
    }
}

/// Against a fast simulated replica: both halves run, and the requests keep arriving while the
/// last sessions finish, but not after. (Exactly on paused time: the test above.)
#[tokio::test]
async fn requests_arrive_until_the_last_session_ends() {
    // What a loaded 2-core machine may delay the arrival loop or the end of the session half
    // by: milliseconds, never a second.
    const LATE: f64 = 1.0;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let sim = spawn(
        listener,
        SimConfig::profile("fast").expect("the fast profile"),
    )
    .await
    .expect("sim starts");
    let deadline = Duration::from_millis(300);
    let mut spec = spec(&format!("http://{}", sim.local_addr()), deadline);
    // Long thinks keep the last session running well past the deadline, so that the bounds
    // below can allow a loaded machine `LATE` and still say something.
    spec.sessions.workload.think_time = Duration::from_secs(1);
    let report = run_mixed(&spec).await.expect("the run completes");
    sim.shutdown().await;

    let records = &report.point.requests;
    assert!(
        records.iter().all(|r| r.outcome.is_ok()),
        "every request succeeds: {:?}",
        records.iter().find(|r| !r.outcome.is_ok())
    );
    let turns: Vec<&RequestRecord> = records.iter().filter(|r| r.class == "session").collect();
    assert_eq!(
        (report.sessions.started, turns.len()),
        (3, 9),
        "sessions at 0, 100 and 200 ms, three turns each"
    );
    let mut indexes: Vec<u64> = records
        .iter()
        .filter(|r| r.session.is_none())
        .map(|r| r.index)
        .collect();
    indexes.sort_unstable();
    let sent = indexes.len() as u64;
    assert_eq!(
        indexes,
        (0..sent).collect::<Vec<_>>(),
        "the requests are the first {sent} arrivals"
    );
    let drawn = |class: usize| {
        (0..sent)
            .filter(|&i| {
                spec.requests
                    .workload
                    .sample_request(spec.requests.seed, i)
                    .class
                    == class
            })
            .count() as u64
    };
    let rows = requests_per_row(&report);
    assert_eq!(
        rows,
        [
            ("all", sent + 9),
            ("chat", drawn(0)),
            ("document", drawn(1)),
            ("session", 9)
        ],
        "both halves ran, each request in the class its seeded draw names"
    );
    assert!(
        drawn(0) > 0 && drawn(1) > 0,
        "both request classes ran: {rows:?}"
    );
    let sessions_end = turns
        .iter()
        .map(|r| r.start_s + r.e2e_s)
        .fold(0.0, f64::max);
    let last_request = records
        .iter()
        .filter(|r| r.session.is_none())
        .map(|r| r.start_s)
        .fold(0.0, f64::max);
    let thinks: Duration = spec
        .sessions
        .workload
        .draw(spec.sessions.seed, 2)
        .turns
        .iter()
        .map(|t| t.think)
        .sum();
    assert!(
        0.2 + thinks.as_secs_f64() > deadline.as_secs_f64() + LATE,
        "the test's premise: the last session (at 200 ms) thinks for {thinks:?}, more than \
         {LATE} s past the deadline"
    );
    assert!(
        last_request >= sessions_end - LATE,
        "requests keep arriving past the deadline while sessions run (every 25 ms): last at \
         {last_request}, sessions over at {sessions_end}"
    );
    assert!(
        last_request <= sessions_end + LATE,
        "no request arrives once the sessions are over: last at {last_request}, sessions over \
         at {sessions_end}"
    );
}
