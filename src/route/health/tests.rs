use super::*;

fn policy() -> EjectPolicy {
    EjectPolicy {
        after: 3,
        base: Duration::from_secs(1),
        max: Duration::from_secs(5),
    }
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let p = policy();
    let lengths: Vec<u64> = (0..5).map(|n| p.backoff(n).as_secs()).collect();
    assert_eq!(lengths, vec![1, 2, 4, 5, 5], "1s doubling, capped at 5s");
    assert_eq!(p.backoff(200), p.max, "no overflow for huge counts");
}

#[tokio::test(start_paused = true)]
async fn consecutive_failures_eject_with_exponential_backoff() {
    let p = policy();
    let mut health = Health::default();
    let now = Instant::now();
    assert_eq!(
        health.on_failure(now, &p, Fault::Connection),
        Verdict::Counted,
        "first failure"
    );
    assert_eq!(
        health.on_failure(now, &p, Fault::Connection),
        Verdict::Counted,
        "second failure"
    );
    assert_eq!(
        health.on_failure(now, &p, Fault::Connection),
        Verdict::Ejected(Duration::from_secs(1)),
        "the third consecutive failure ejects for eject_base"
    );
    assert!(!health.available(Instant::now()), "ejected");
    assert_eq!(
        health.on_failure(Instant::now(), &p, Fault::Connection),
        Verdict::Counted,
        "failures while ejected change nothing"
    );

    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(!health.available(Instant::now()), "still ejected at 999 ms");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(health.available(Instant::now()), "back after 1 s");

    assert_eq!(
        health.on_failure(Instant::now(), &p, Fault::Connection),
        Verdict::Ejected(Duration::from_secs(2)),
        "on probation one failure re-ejects, for twice as long"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(health.available(Instant::now()), "back after 2 s");
    assert_eq!(
        health.on_failure(Instant::now(), &p, Fault::Connection),
        Verdict::Ejected(Duration::from_secs(4)),
        "then 4 s"
    );
    tokio::time::advance(Duration::from_secs(4)).await;
    health.on_success();
    assert_eq!(health, Health::default(), "a success clears the record");
    assert_eq!(
        health.on_failure(Instant::now(), &p, Fault::Connection),
        Verdict::Counted,
        "after a success it takes three failures again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_success_between_failures_resets_the_count() {
    let p = policy();
    let mut health = Health::default();
    let now = Instant::now();
    health.on_failure(now, &p, Fault::Connection);
    health.on_failure(now, &p, Fault::Connection);
    health.on_success();
    assert_eq!(
        health.on_failure(now, &p, Fault::Connection),
        Verdict::Counted,
        "count restarted"
    );
    assert!(health.available(now), "not ejected");
}

#[tokio::test(start_paused = true)]
async fn answer_failures_ask_for_a_check_instead_of_ejecting() {
    let p = EjectPolicy {
        after: 3,
        base: Duration::from_secs(1),
        max: Duration::from_secs(5),
    };
    let mut health = Health::default();
    let now = Instant::now();
    for i in 0..2 {
        assert_eq!(
            health.on_failure(now, &p, Fault::Answer),
            Verdict::Counted,
            "answer failure {i}"
        );
    }
    assert_eq!(
        health.on_failure(now, &p, Fault::Answer),
        Verdict::Confirm,
        "the third asks for a check"
    );
    assert!(health.available(now), "not ejected by answers alone");
    for i in 0..2 {
        assert_eq!(
            health.on_failure(now, &p, Fault::Answer),
            Verdict::Counted,
            "the run restarted after the check was asked for ({i})"
        );
    }
    assert_eq!(
        health.on_failure(now, &p, Fault::Connection),
        Verdict::Ejected(Duration::from_secs(1)),
        "a connection failure completes a mixed run and ejects"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        health.on_failure(Instant::now(), &p, Fault::Answer),
        Verdict::Confirm,
        "on probation one answer failure asks for a check at once"
    );
    assert!(health.available(Instant::now()), "still in rotation");
    assert_eq!(
        health.eject(Instant::now(), &p),
        Duration::from_secs(2),
        "a failed check ejects, backed off as any ejection"
    );
}
