use super::*;

fn limits(budget: u64, seqs: u64, kv: u64) -> Limits {
    Limits {
        max_num_batched_tokens: budget,
        max_num_seqs: seqs,
        kv_capacity_tokens: kv,
        tokens_per_step: 1,
    }
}

fn s(id: RequestId, tokens: u64) -> Scheduled {
    Scheduled { id, tokens }
}

/// Runs plan + complete once and returns both.
fn step(sched: &mut Scheduler) -> (StepPlan, Vec<Progress>) {
    let plan = sched.plan();
    let progress = sched.complete(&plan);
    (plan, progress)
}

#[test]
fn decodes_first_then_prefill_fills_the_budget() {
    let mut sched = Scheduler::new(limits(50, 8, 10_000));
    sched.add(1, 10, 100);
    sched.add(2, 10, 100);
    let (plan, progress) = step(&mut sched);
    assert_eq!(
        plan.prefills,
        vec![s(1, 10), s(2, 10)],
        "both short prompts prefill in one step"
    );
    assert!(
        progress.iter().all(|p| p.first && p.new_tokens == 1),
        "prefill step samples the first token"
    );
    sched.add(3, 100, 100);
    let plan = sched.plan();
    assert_eq!(
        plan.decodes,
        vec![s(1, 1), s(2, 1)],
        "running requests get one decode token each"
    );
    assert_eq!(
        plan.prefills,
        vec![s(3, 48)],
        "the new prompt gets the rest of the 50-token budget"
    );
    assert_eq!(plan.tokens(), 50, "the step uses the whole budget");
    assert_eq!(
        plan.context_tokens,
        12 + 12 + 48,
        "context: 10 prompt + 1 generated + 1 new, twice, plus the chunk"
    );
}

#[test]
fn chunked_prefill_continues_next_step_and_gives_no_output_until_done() {
    let mut sched = Scheduler::new(limits(40, 8, 10_000));
    sched.add(1, 100, 4);
    let (plan, progress) = step(&mut sched);
    assert_eq!(plan.prefills, vec![s(1, 40)], "first chunk is the budget");
    assert!(
        progress.is_empty(),
        "no output before the prefill completes"
    );
    let (plan, progress) = step(&mut sched);
    assert_eq!(plan.prefills, vec![s(1, 40)], "second chunk");
    assert!(progress.is_empty(), "still prefilling");
    let (plan, progress) = step(&mut sched);
    assert_eq!(plan.prefills, vec![s(1, 20)], "the remainder");
    assert_eq!(plan.admitted, Vec::<RequestId>::new(), "admitted only once");
    assert_eq!(
        progress,
        vec![Progress {
            id: 1,
            new_tokens: 1,
            first: true,
            finished: false
        }],
        "first token"
    );
}

#[test]
fn prefills_go_in_arrival_order_and_the_last_is_chunked() {
    let mut sched = Scheduler::new(limits(105, 8, 10_000));
    sched.add(7, 100, 4);
    sched.add(3, 10, 4);
    sched.add(5, 10, 4);
    let plan = sched.plan();
    assert_eq!(
        plan.prefills,
        vec![s(7, 100), s(3, 5)],
        "arrival order, second one chunked, third waits"
    );
    assert_eq!(plan.admitted, vec![7, 3], "two admitted");
    assert_eq!(
        sched.num_waiting(),
        1,
        "third still waiting (budget exhausted)"
    );
    sched.complete(&plan);
    let plan = sched.plan();
    assert_eq!(plan.decodes, vec![s(7, 1)], "7 decodes");
    assert_eq!(
        plan.prefills,
        vec![s(3, 5), s(5, 10)],
        "the chunked prompt resumes before the newer one"
    );
}

#[test]
fn max_num_seqs_caps_the_batch() {
    let mut sched = Scheduler::new(limits(1000, 2, 10_000));
    sched.add(1, 10, 2);
    sched.add(2, 10, 3);
    sched.add(3, 10, 2);
    let (plan, _) = step(&mut sched);
    assert_eq!(plan.admitted, vec![1, 2], "only two slots");
    assert_eq!(
        (sched.num_running(), sched.num_waiting()),
        (2, 1),
        "one waits"
    );
    let (plan, progress) = step(&mut sched);
    assert_eq!(
        plan.admitted,
        Vec::<RequestId>::new(),
        "no slot free during the step"
    );
    assert!(
        progress.iter().any(|p| p.id == 1 && p.finished),
        "request 1 finishes (2 tokens)"
    );
    let plan = sched.plan();
    assert_eq!(plan.admitted, vec![3], "the freed slot admits the third");
}

#[test]
fn kv_capacity_limits_admission_first_come_first_served() {
    let mut sched = Scheduler::new(limits(1000, 8, 100));
    sched.add(1, 50, 10);
    sched.add(2, 50, 10);
    sched.add(3, 5, 5);
    let plan = sched.plan();
    assert_eq!(
        plan.admitted,
        vec![1],
        "60 reserved, 2 needs 60 more than the 100 capacity"
    );
    assert!(
        (sched.kv_usage() - 0.6).abs() < 1e-12,
        "usage is 60/100, got {}",
        sched.kv_usage()
    );
    assert_eq!(
        sched.num_waiting(),
        2,
        "3 would fit but does not jump the queue"
    );
    sched.complete(&plan);
    for _ in 0..9 {
        let (plan, _) = step(&mut sched);
        assert!(
            plan.admitted.is_empty(),
            "nothing admitted while 1 holds its KV"
        );
    }
    assert_eq!(sched.num_running(), 0, "1 finished its 10 tokens");
    let plan = sched.plan();
    assert_eq!(plan.admitted, vec![2, 3], "both fit once 1 is gone");
}

#[test]
fn tokens_per_step_and_finish() {
    let mut sched = Scheduler::new(Limits {
        tokens_per_step: 3,
        ..limits(100, 8, 1000)
    });
    sched.add(1, 4, 5);
    let got: Vec<(u64, bool)> = (0..3)
        .flat_map(|_| step(&mut sched).1)
        .map(|p| (p.new_tokens, p.finished))
        .collect();
    assert_eq!(
        got,
        vec![(1, false), (3, false), (1, true)],
        "1 at prefill, then 3, then the last 1"
    );
    assert_eq!(
        (sched.num_running(), sched.kv_usage()),
        (0, 0.0),
        "finished request frees slot and KV"
    );
    assert!(sched.plan().is_empty(), "nothing left to run");
}

#[test]
fn single_token_request_finishes_at_prefill() {
    let mut sched = Scheduler::new(limits(100, 8, 1000));
    sched.add(1, 4, 1);
    let (_, progress) = step(&mut sched);
    assert_eq!(
        progress,
        vec![Progress {
            id: 1,
            new_tokens: 1,
            first: true,
            finished: true
        }],
        "one token"
    );
}

#[test]
fn abort_frees_slot_and_kv_and_skips_planned_work() {
    let mut sched = Scheduler::new(limits(100, 1, 1000));
    sched.add(1, 10, 100);
    sched.add(2, 10, 100);
    let plan = sched.plan();
    assert!(sched.abort(1), "admitted request is aborted");
    assert!(
        sched.complete(&plan).is_empty(),
        "aborted request produces nothing"
    );
    assert_eq!(sched.kv_usage(), 0.0, "its KV is free");
    assert_eq!(
        sched.plan().admitted,
        vec![2],
        "its slot goes to the next request"
    );
    assert!(
        sched.abort(2) && !sched.abort(2),
        "second abort of the same id is a no-op"
    );
    sched.add(3, 10, 10);
    assert!(
        sched.abort(3) && sched.num_waiting() == 0,
        "waiting request is aborted"
    );
}

#[test]
fn decode_tokens_respect_the_budget() {
    let mut sched = Scheduler::new(limits(2, 8, 1000));
    for id in 1..=3 {
        sched.add(id, 1, 10);
    }
    step(&mut sched);
    step(&mut sched);
    let plan = sched.plan();
    assert_eq!(
        plan.decodes,
        vec![s(1, 1), s(2, 1)],
        "budget 2 caps the step at two decodes"
    );
    assert_eq!(
        (sched.num_running(), sched.num_waiting()),
        (2, 1),
        "the third never got budget to start"
    );
}
