use super::*;

fn limits(budget: u64, seqs: u64, kv: u64) -> Limits {
    Limits {
        prefix_caching: true,
        max_num_batched_tokens: budget,
        max_num_seqs: seqs,
        kv_capacity_tokens: kv,
        tokens_per_step: 1,
    }
}

fn without_prefix_caching(limits: Limits) -> Limits {
    Limits {
        prefix_caching: false,
        ..limits
    }
}

/// A scheduler with `requests` added in order, each `(id, prompt tokens, max tokens)`.
fn with_requests(limits: Limits, requests: &[(RequestId, u64, u64)]) -> Scheduler {
    let mut sched = Scheduler::new(limits);
    for &(id, prompt_tokens, max_tokens) in requests {
        sched.add(id, prompt_tokens, max_tokens);
    }
    sched
}

/// The progress of the step that completes a prefill: the request's first token.
fn first_token(id: RequestId, finished: bool, cached: u64, transferred: u64) -> Progress {
    Progress {
        id,
        new_tokens: 1,
        first: true,
        finished,
        cached_tokens: cached,
        transferred_tokens: transferred,
    }
}

/// A 100-token prompt (6 full blocks and 4 tokens).
fn prompt_of_100() -> Arc<[u64]> {
    (0..100).collect::<Vec<u64>>().into()
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
    let mut sched = with_requests(limits(50, 8, 10_000), &[(1, 10, 100), (2, 10, 100)]);
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
    let mut sched = with_requests(limits(40, 8, 10_000), &[(1, 100, 4)]);
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
    assert_eq!(progress, vec![first_token(1, false, 0, 0)], "first token");
}

#[test]
fn prefills_go_in_arrival_order_and_the_last_is_chunked() {
    let mut sched = with_requests(
        limits(105, 8, 10_000),
        &[(7, 100, 4), (3, 10, 4), (5, 10, 4)],
    );
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
    let mut sched = with_requests(
        limits(1000, 2, 10_000),
        &[(1, 10, 2), (2, 10, 3), (3, 10, 2)],
    );
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
    let mut sched = with_requests(limits(1000, 8, 100), &[(1, 50, 10), (2, 50, 10), (3, 5, 5)]);
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
    let mut sched = with_requests(limits(100, 8, 1000), &[(1, 4, 1)]);
    let (_, progress) = step(&mut sched);
    assert_eq!(progress, vec![first_token(1, true, 0, 0)], "one token");
}

#[test]
fn abort_frees_slot_and_kv_and_skips_planned_work() {
    let mut sched = with_requests(limits(100, 1, 1000), &[(1, 10, 100), (2, 10, 100)]);
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

/// Runs steps until every admitted request has finished; returns the prefill tokens each step
/// scheduled for `id` and its first progress.
fn run_to_end(sched: &mut Scheduler, id: RequestId) -> (Vec<u64>, Option<Progress>) {
    let (mut prefills, mut first) = (Vec::new(), None);
    for _ in 0..100 {
        let plan = sched.plan();
        if plan.is_empty() {
            break;
        }
        prefills.extend(
            plan.prefills
                .iter()
                .filter(|s| s.id == id)
                .map(|s| s.tokens),
        );
        for p in sched.complete(&plan) {
            if p.id == id && p.first {
                first = Some(p);
            }
        }
    }
    (prefills, first)
}

#[test]
fn a_cached_prefix_is_not_computed_again() {
    let mut sched = Scheduler::new(limits(10_000, 8, 100_000));
    let prompt = prompt_of_100();
    sched.add_prompt(1, Arc::clone(&prompt), 2);
    let (prefills, first) = run_to_end(&mut sched, 1);
    assert_eq!(prefills, vec![100], "a cold prompt is computed whole");
    assert_eq!(first.map(|p| p.cached_tokens), Some(0), "nothing cached");

    sched.add_prompt(2, Arc::clone(&prompt), 2);
    let (prefills, first) = run_to_end(&mut sched, 2);
    assert_eq!(
        prefills,
        vec![4],
        "6 full blocks (96 tokens) come from the cache, 4 are computed"
    );
    assert_eq!(
        first.map(|p| p.cached_tokens),
        Some(96),
        "reported with the first output"
    );
    // The first request's output (2 tokens) is cached too: a next turn that sends the prompt,
    // that output and more reuses all of it that fills whole blocks.
    let mut next: Vec<u64> = prompt.to_vec();
    next.extend((0..2).map(crate::testbed::sim::tokenizer::output_token_id));
    next.extend(500..540);
    sched.add_prompt(3, next.into(), 2);
    let (prefills, first) = run_to_end(&mut sched, 3);
    assert_eq!(
        first.map(|p| p.cached_tokens),
        Some(96),
        "102 cached tokens fill 6 blocks"
    );
    assert_eq!(prefills, vec![142 - 96], "the rest computed");
    assert_eq!(
        sched.prefix_cache_counts(),
        (100 + 100 + 142, 96 + 96),
        "queries and hits, in tokens, as vLLM counts them"
    );
}

#[test]
fn prefix_caching_off_computes_everything() {
    let mut sched = Scheduler::new(without_prefix_caching(limits(10_000, 8, 100_000)));
    let prompt = prompt_of_100();
    for id in 1..=2 {
        sched.add_prompt(id, Arc::clone(&prompt), 2);
        let (prefills, _) = run_to_end(&mut sched, id);
        assert_eq!(prefills, vec![100], "request {id}: the whole prompt");
    }
    assert_eq!(sched.prefix_cache_counts(), (0, 0), "no lookups");
}

#[test]
fn a_pulled_prompt_computes_only_its_last_token() {
    let mut sched = Scheduler::new(limits(10_000, 8, 100_000));
    let prompt = prompt_of_100();
    sched.add_pulled(1, Arc::clone(&prompt), 3);
    let plan = sched.plan();
    assert_eq!(
        plan.prefills,
        vec![s(1, 1)],
        "99 tokens came over the link: one token is scheduled"
    );
    assert_eq!(
        plan.context_tokens, 100,
        "the step attends over the whole prompt, like a decode step"
    );
    let progress = sched.complete(&plan);
    assert_eq!(
        progress,
        vec![first_token(1, false, 99, 99)],
        "the first token comes out of that one step; all but the last token were received"
    );
    assert_eq!(
        sched.prefix_cache_counts(),
        (100, 0),
        "the local cache was asked (and had nothing): received KV is no prefix-cache hit"
    );
    assert!(
        (sched.kv_usage() - 103.0 / 100_000.0).abs() < 1e-12,
        "prompt + max_tokens reserved at admission, as any request: {}",
        sched.kv_usage()
    );
}

#[test]
fn a_pulled_prompt_takes_local_cache_hits_first() {
    let mut sched = Scheduler::new(limits(10_000, 8, 100_000));
    let prompt = prompt_of_100();
    sched.add_prompt(1, Arc::clone(&prompt), 2);
    run_to_end(&mut sched, 1);
    sched.add_pulled(2, Arc::clone(&prompt), 2);
    let (prefills, first) = run_to_end(&mut sched, 2);
    assert_eq!(prefills, vec![1], "only the last token is computed");
    assert_eq!(
        first.map(|p| (p.cached_tokens, p.transferred_tokens)),
        Some((99, 3)),
        "96 tokens (6 blocks) from the local cache, 3 received, the last computed"
    );
    assert_eq!(
        sched.prefix_cache_counts(),
        (200, 96),
        "the pulled request's lookup counts like any other"
    );
}

#[test]
fn a_pulled_one_token_prompt_still_computes_it() {
    let mut sched = Scheduler::new(without_prefix_caching(limits(10_000, 8, 100_000)));
    sched.add_pulled(1, vec![7].into(), 1);
    let (prefills, first) = run_to_end(&mut sched, 1);
    assert_eq!(prefills, vec![1], "the only token is the last one");
    assert_eq!(
        first.map(|p| (p.cached_tokens, p.transferred_tokens, p.finished)),
        Some((0, 0, true)),
        "nothing to receive"
    );
}
