use super::*;

fn policy() -> EjectPolicy {
    EjectPolicy {
        after: 3,
        base: Duration::from_secs(1),
        max: Duration::from_secs(5),
    }
}

/// One event in a backend's health record, on the paused clock, and what should hold after it.
#[derive(Clone, Copy)]
enum Step {
    /// A failure at the current time, under [`policy`], and the verdict it should get.
    Fail(Fault, Verdict, &'static str),
    /// The clock moves on.
    Advance(Duration),
    /// Whether the backend should take traffic now.
    Available(bool, &'static str),
}

/// Plays `steps` on `health` in order, checking each expectation.
async fn play(health: &mut Health, steps: &[Step]) {
    for &step in steps {
        match step {
            Step::Fail(fault, verdict, why) => {
                let got = health.on_failure(Instant::now(), &policy(), fault);
                assert_eq!(got, verdict, "{why}");
            }
            Step::Advance(by) => tokio::time::advance(by).await,
            Step::Available(expected, why) => {
                assert_eq!(health.available(Instant::now()), expected, "{why}");
            }
        }
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
    use Fault::Connection;
    use Step::{Advance, Available, Fail};
    use Verdict::{Counted, Ejected};
    let (ms, secs) = (Duration::from_millis, Duration::from_secs);
    let mut health = Health::default();
    play(
        &mut health,
        &[
            Fail(Connection, Counted, "first failure"),
            Fail(Connection, Counted, "second failure"),
            Fail(
                Connection,
                Ejected(secs(1)),
                "the third consecutive failure ejects for eject_base",
            ),
            Available(false, "ejected"),
            Fail(Connection, Counted, "failures while ejected change nothing"),
            Advance(ms(999)),
            Available(false, "still ejected at 999 ms"),
            Advance(ms(1)),
            Available(true, "back after 1 s"),
            Fail(
                Connection,
                Ejected(secs(2)),
                "on probation one failure re-ejects, for twice as long",
            ),
            Advance(secs(2)),
            Available(true, "back after 2 s"),
            Fail(Connection, Ejected(secs(4)), "then 4 s"),
            Advance(secs(4)),
        ],
    )
    .await;
    health.on_success();
    assert_eq!(health, Health::default(), "a success clears the record");
    let again = Fail(
        Connection,
        Counted,
        "after a success it takes three failures again",
    );
    play(&mut health, &[again]).await;
}

#[tokio::test(start_paused = true)]
async fn a_success_between_failures_resets_the_count() {
    let p = policy();
    let mut health = Health::default();
    let now = Instant::now();
    health.on_failure(now, &p, Fault::Connection);
    health.on_failure(now, &p, Fault::Connection);
    health.on_success();
    play(
        &mut health,
        &[
            Step::Fail(Fault::Connection, Verdict::Counted, "count restarted"),
            Step::Available(true, "not ejected"),
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn answer_failures_ask_for_a_check_instead_of_ejecting() {
    use Fault::{Answer, Connection};
    use Step::{Advance, Available, Fail};
    use Verdict::{Confirm, Counted, Ejected};
    let mut health = Health::default();
    play(
        &mut health,
        &[
            Fail(Answer, Counted, "answer failure 0"),
            Fail(Answer, Counted, "answer failure 1"),
            Fail(Answer, Confirm, "the third asks for a check"),
            Available(true, "not ejected by answers alone"),
            Fail(
                Answer,
                Counted,
                "the run restarted after the check was asked for (0)",
            ),
            Fail(
                Answer,
                Counted,
                "the run restarted after the check was asked for (1)",
            ),
            Fail(
                Connection,
                Ejected(Duration::from_secs(1)),
                "a connection failure completes a mixed run and ejects",
            ),
            Advance(Duration::from_secs(1)),
            Fail(
                Answer,
                Confirm,
                "on probation one answer failure asks for a check at once",
            ),
            Available(true, "still in rotation"),
        ],
    )
    .await;
    assert_eq!(
        health.eject(Instant::now(), &policy()),
        Duration::from_secs(2),
        "a failed check ejects, backed off as any ejection"
    );
}
