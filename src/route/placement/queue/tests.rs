use super::*;
use proptest::prelude::*;
use std::time::Duration;

fn entry<T>(tenant: &str, priority: u8, deadline: Instant, cost: u64, payload: T) -> Entry<T> {
    Entry {
        tenant: Arc::from(tenant),
        priority,
        deadline,
        cost,
        payload,
    }
}

/// A deadline `secs` seconds after `base`.
fn at(base: Instant, secs: u64) -> Instant {
    base + Duration::from_secs(secs)
}

fn push<T>(queue: &mut FairQueue<T>, entry: Entry<T>) -> Key {
    let key = match queue.push(entry) {
        Ok(key) => key,
        Err(_) => panic!("the queue has room"),
    };
    queue.check();
    key
}

/// Pushes `n` entries of `tenant` without a payload, at priority 0, each costing `cost` and due at
/// `deadline`; their keys.
fn push_n(
    queue: &mut FairQueue<()>,
    tenant: &str,
    n: usize,
    cost: u64,
    deadline: Instant,
) -> Vec<Key> {
    (0..n)
        .map(|_| push(queue, entry(tenant, 0, deadline, cost, ())))
        .collect()
}

fn pop<T>(queue: &mut FairQueue<T>) -> Entry<T> {
    let (_, entry) = queue.pop().expect("an entry is queued");
    queue.check();
    entry
}

/// Pops `n` entries and names their tenants.
fn pop_tenants<T>(queue: &mut FairQueue<T>, n: usize) -> Vec<String> {
    (0..n).map(|_| pop(queue).tenant.to_string()).collect()
}

#[test]
fn within_a_tenant_the_earliest_deadline_goes_first() {
    let now = Instant::now();
    let mut queue = FairQueue::new(8);
    for (secs, payload) in [(30, "c"), (10, "a"), (20, "b")] {
        push(&mut queue, entry("t", 0, at(now, secs), 1, payload));
    }
    let order: Vec<_> = (0..3).map(|_| pop(&mut queue).payload).collect();
    assert_eq!(order, ["a", "b", "c"], "deadline order within a tenant");
    assert!(queue.pop().is_none(), "nothing is left");
}

#[test]
fn within_a_tenant_priority_goes_before_deadline() {
    let now = Instant::now();
    let mut queue = FairQueue::new(8);
    push(&mut queue, entry("t", 0, at(now, 1), 1, "low, soon"));
    push(&mut queue, entry("t", 9, at(now, 60), 1, "urgent, late"));
    push(&mut queue, entry("t", 5, at(now, 30), 1, "middle"));
    push(&mut queue, entry("t", 9, at(now, 50), 1, "urgent, sooner"));
    let order: Vec<_> = (0..4).map(|_| pop(&mut queue).payload).collect();
    assert_eq!(
        order,
        ["urgent, sooner", "urgent, late", "middle", "low, soon"],
        "higher priority first, then the earlier deadline"
    );
}

#[test]
fn within_a_tenant_ties_go_in_arrival_order() {
    let deadline = at(Instant::now(), 5);
    let mut queue = FairQueue::new(16);
    let keys: Vec<Key> = (0..10)
        .map(|n| push(&mut queue, entry("t", 3, deadline, 1, n)))
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "keys grow with each push: {keys:?}"
    );
    let order: Vec<i32> = (0..10).map(|_| pop(&mut queue).payload).collect();
    assert_eq!(
        order,
        (0..10).collect::<Vec<_>>(),
        "same priority and deadline: first pushed, first popped"
    );
}

#[test]
fn priority_does_not_jump_other_tenants() {
    let deadline = at(Instant::now(), 5);
    let mut queue = FairQueue::new(16);
    push(&mut queue, entry("a", 0, deadline, 100, ()));
    push(&mut queue, entry("a", 0, deadline, 100, ()));
    push(&mut queue, entry("b", 255, deadline, 100, ()));
    push(&mut queue, entry("b", 255, deadline, 100, ()));
    assert_eq!(
        pop_tenants(&mut queue, 4),
        ["a", "b", "a", "b"],
        "priority orders a tenant's own entries; the counters order the tenants"
    );
}

#[test]
fn a_flood_gets_its_share_and_no_more() {
    let deadline = at(Instant::now(), 60);
    let mut queue = FairQueue::new(1000);
    for n in 0..500 {
        push(&mut queue, entry("a", 0, deadline, 100, n));
    }
    for n in 0..100 {
        push(&mut queue, entry("b", 0, deadline, 100, n));
    }
    assert_eq!(queue.counter("a"), Some(0), "a starts at the floor, 0");
    assert_eq!(queue.counter("b"), Some(0), "b starts level with a");

    let mut served = HashMap::<String, usize>::new();
    for i in 0..200 {
        let popped = pop(&mut queue);
        // Equal counters go to the tenant backlogged longest: a, pushed first.
        let expected = if i % 2 == 0 { "a" } else { "b" };
        assert_eq!(&*popped.tenant, expected, "pop {i} alternates, a first");
        *served.entry(popped.tenant.to_string()).or_default() += 1;
        if let (Some(a), Some(b)) = (queue.counter("a"), queue.counter("b")) {
            assert!(
                a.abs_diff(b) <= 100,
                "pop {i}: the counters stay within one entry's cost ({a} vs {b})"
            );
        }
    }
    assert_eq!(served.get("a"), Some(&100), "a is served its half");
    assert_eq!(served.get("b"), Some(&100), "b is served its half");
    assert_eq!(
        queue.counter("a"),
        Some(100 * 100),
        "a was charged 100 x 100"
    );
    assert_eq!(
        queue.counter("b"),
        None,
        "b has nothing left: its counter is forgotten"
    );
    assert_eq!(queue.len(), 400, "a's other 400 entries wait");

    // c arrives late, while a is the only backlogged tenant: it starts at a's counter, not at 0,
    // so it is served no burst. At the tie a (backlogged longer) goes first, then they alternate.
    for n in 0..50 {
        push(&mut queue, entry("c", 0, deadline, 100, n));
    }
    assert_eq!(
        queue.counter("c"),
        Some(100 * 100),
        "c starts at the smallest backlogged counter"
    );
    let expected: Vec<&str> = (0..100)
        .map(|i| if i % 2 == 0 { "a" } else { "c" })
        .collect();
    assert_eq!(
        pop_tenants(&mut queue, 100),
        expected,
        "the late tenant alternates with a from its first entry"
    );
    assert_eq!(queue.counter("a"), Some(150 * 100), "a: 150 entries served");
    assert_eq!(queue.counter("c"), None, "c drained, forgotten");
}

#[test]
fn counters_share_tokens_not_requests() {
    let deadline = at(Instant::now(), 60);
    let mut queue = FairQueue::new(64);
    push_n(&mut queue, "big", 10, 300, deadline);
    push_n(&mut queue, "small", 30, 100, deadline);
    // big at 0 (first), small at 0..300 for three entries, big again at 300, ...
    let expected: Vec<&str> = (0..16)
        .map(|i| if i % 4 == 0 { "big" } else { "small" })
        .collect();
    assert_eq!(
        pop_tenants(&mut queue, 16),
        expected,
        "one 300-token entry for every three 100-token entries"
    );
    assert_eq!(queue.counter("big"), Some(1200), "big: 4 x 300");
    assert_eq!(queue.counter("small"), Some(1200), "small: 12 x 100");
}

#[test]
fn an_idle_tenant_cannot_bank_credit() {
    let deadline = at(Instant::now(), 60);
    let mut queue = FairQueue::new(64);
    // a is served alone for a while: b, idle, would bank 1000 tokens of credit without the lift.
    push_n(&mut queue, "a", 20, 100, deadline);
    for _ in 0..10 {
        assert_eq!(&*pop(&mut queue).tenant, "a", "a is alone");
    }
    assert_eq!(queue.counter("a"), Some(1000), "a: 10 x 100");

    push_n(&mut queue, "b", 10, 100, deadline);
    assert_eq!(
        queue.counter("b"),
        Some(1000),
        "b is lifted to a's counter, not left at 0"
    );
    assert_eq!(
        pop_tenants(&mut queue, 6),
        ["a", "b", "a", "b", "a", "b"],
        "b alternates with a instead of taking ten in a row"
    );
    assert_eq!(queue.counter("a"), Some(1300), "a: 13 x 100");
    assert_eq!(queue.counter("b"), Some(1300), "b: 1000 lifted, 3 x 100");
}

#[test]
fn a_returning_tenant_starts_at_the_least_backlogged_counter() {
    let deadline = at(Instant::now(), 60);
    let mut queue = FairQueue::new(64);
    push(&mut queue, entry("b", 0, deadline, 500, ()));
    assert_eq!(&*pop(&mut queue).tenant, "b", "b is alone");
    assert_eq!(queue.counter("b"), None, "b drained: forgotten");

    // None is backlogged: a newcomer starts at the floor, b's 500.
    push(&mut queue, entry("a", 0, deadline, 100, ()));
    assert_eq!(
        queue.counter("a"),
        Some(500),
        "with nobody backlogged, the floor: the last served counter"
    );
    push_n(&mut queue, "a", 2, 100, deadline);
    assert_eq!(&*pop(&mut queue).tenant, "a", "a is alone");
    assert_eq!(queue.counter("a"), Some(600), "a: 500 + 100");

    // b comes back: it had reached 500 and is forgotten, so it starts at a's 600 (the least
    // backlogged counter), never below it.
    push(&mut queue, entry("b", 0, deadline, 100, ()));
    assert_eq!(queue.counter("b"), Some(600), "b is lifted to a's counter");
    assert_eq!(
        pop_tenants(&mut queue, 3),
        ["a", "b", "a"],
        "at the tie, a (backlogged longer) goes first"
    );

    assert!(queue.is_empty(), "a and b drained");

    // Expiry and removal do not move the floor: only a pop charges.
    let now = Instant::now();
    push(&mut queue, entry("c", 0, now, 10_000, ()));
    assert_eq!(
        queue.counter("c"),
        Some(800),
        "c starts at the floor: a's 800, the last served counter"
    );
    assert!(queue.pop_expired(now).is_some(), "c's entry expired");
    push(&mut queue, entry("d", 0, deadline, 100, ()));
    assert_eq!(
        queue.counter("d"),
        Some(800),
        "an expired entry charged nothing"
    );
}

#[test]
fn a_full_queue_gives_the_entry_back_and_drains_to_nothing() {
    const CAPACITY: usize = 100_000;
    const TENANTS: usize = 10_000;
    let deadline = at(Instant::now(), 60);
    let names: Vec<Arc<str>> = (0..TENANTS)
        .map(|t| Arc::from(format!("tenant-{t}")))
        .collect();
    let mut queue = FairQueue::new(CAPACITY);
    for n in 0..CAPACITY {
        let entry = Entry {
            tenant: Arc::clone(&names[n % TENANTS]),
            priority: 0,
            deadline,
            cost: 10,
            payload: n,
        };
        assert!(queue.push(entry).is_ok(), "push {n} fits");
    }
    queue.check();
    assert_eq!(queue.len(), CAPACITY, "exactly the capacity is queued");
    assert_eq!(queue.tenants_tracked(), TENANTS, "one state per tenant");

    match queue.push(entry("late", 0, deadline, 10, 4242)) {
        Ok(key) => panic!("a full queue accepted {key:?}"),
        Err(Full(back)) => {
            assert_eq!(back.payload, 4242, "the same payload comes back");
            assert_eq!(&*back.tenant, "late", "the same entry comes back");
        }
    }
    assert_eq!(queue.len(), CAPACITY, "the refused push left nothing");
    assert_eq!(queue.counter("late"), None, "nor any state for its tenant");

    // Every tenant is level, so each round serves each tenant once, in the order they arrived.
    for n in 0..CAPACITY {
        let (_, popped) = queue.pop().expect("entries are queued");
        assert!(
            Arc::ptr_eq(&popped.tenant, &names[n % TENANTS]),
            "pop {n} serves tenant {}, got {}",
            n % TENANTS,
            popped.tenant
        );
        assert_eq!(popped.payload, n, "pop {n}: each tenant's entries in order");
    }
    queue.check();
    assert!(queue.is_empty(), "drained");
    assert!(queue.pop().is_none(), "nothing is left to pop");
    assert_eq!(queue.tenants_tracked(), 0, "no tenant state is left");
    assert!(queue.entries.is_empty(), "no entry is left");
    assert!(queue.turns.is_empty(), "no turn is left");
    assert!(queue.deadlines.is_empty(), "no deadline is left");
    assert_eq!(queue.next_deadline(), None, "no deadline to wait for");
}

#[test]
fn a_zero_capacity_queue_refuses_everything() {
    let mut queue = FairQueue::new(0);
    let refused = queue.push(entry("t", 0, Instant::now(), 1, 7));
    assert!(
        matches!(refused, Err(Full(Entry { payload: 7, .. }))),
        "capacity 0 holds nothing"
    );
    assert_eq!(queue.tenants_tracked(), 0, "no state for a refused push");
}

#[test]
fn a_removed_entry_is_never_popped() {
    let deadline = at(Instant::now(), 60);
    let mut queue = FairQueue::new(16);
    let first = push(&mut queue, entry("t", 0, deadline, 100, "first"));
    let second = push(&mut queue, entry("t", 0, deadline, 100, "second"));
    push(&mut queue, entry("t", 0, deadline, 100, "third"));

    let removed = queue.remove(second).expect("second is queued");
    queue.check();
    assert_eq!(removed.payload, "second", "remove returns the entry");
    assert!(
        queue.remove(second).is_none(),
        "removing twice finds nothing"
    );
    assert_eq!(queue.len(), 2, "two are left");
    assert_eq!(queue.counter("t"), Some(0), "removing charges nothing");

    let order: Vec<_> = (0..2).map(|_| pop(&mut queue).payload).collect();
    assert_eq!(order, ["first", "third"], "the removed entry is skipped");
    assert!(queue.pop().is_none(), "nothing is left");
    assert!(
        queue.remove(first).is_none(),
        "a popped entry cannot be removed"
    );
}

#[test]
fn removing_a_tenants_last_entry_forgets_it() {
    let deadline = at(Instant::now(), 60);
    let mut queue = FairQueue::new(16);
    push_n(&mut queue, "a", 2, 100, deadline);
    let b = push_n(&mut queue, "b", 2, 100, deadline);
    assert_eq!(queue.tenants_tracked(), 2, "a and b are backlogged");

    assert!(queue.remove(b[0]).is_some(), "b1 is queued");
    assert_eq!(queue.counter("b"), Some(0), "b still has an entry");
    assert!(queue.remove(b[1]).is_some(), "b2 is queued");
    queue.check();
    assert_eq!(queue.counter("b"), None, "b's last entry went: forgotten");
    assert_eq!(queue.tenants_tracked(), 1, "only a is tracked");
    assert_eq!(pop_tenants(&mut queue, 2), ["a", "a"], "b has no turn left");
    assert_eq!(queue.tenants_tracked(), 0, "a drained too");
}

#[test]
fn pop_expired_takes_only_passed_deadlines_earliest_first() {
    let now = Instant::now();
    let mut queue = FairQueue::new(16);
    push(&mut queue, entry("a", 9, at(now, 3), 100, "a+3"));
    push(&mut queue, entry("b", 0, at(now, 1), 100, "b+1"));
    push(&mut queue, entry("a", 0, at(now, 2), 100, "a+2"));
    push(&mut queue, entry("b", 0, at(now, 10), 100, "b+10"));
    assert_eq!(
        queue.next_deadline(),
        Some(at(now, 1)),
        "b+1 is the earliest"
    );

    assert!(
        queue.pop_expired(now).is_none(),
        "no deadline has passed at +0"
    );
    let later = at(now, 3);
    let expired: Vec<_> = std::iter::from_fn(|| queue.pop_expired(later))
        .map(|(_, e)| e.payload)
        .collect();
    queue.check();
    assert_eq!(
        expired,
        ["b+1", "a+2", "a+3"],
        "deadlines up to and including +3, earliest first, across tenants"
    );
    assert_eq!(
        queue.counter("a"),
        None,
        "a's entries all expired: forgotten"
    );
    assert_eq!(queue.counter("b"), Some(0), "expiry charges nothing");
    assert_eq!(queue.next_deadline(), Some(at(now, 10)), "b+10 is left");
    assert_eq!(pop(&mut queue).payload, "b+10", "the unexpired entry pops");
    assert_eq!(queue.next_deadline(), None, "nothing is queued");
    assert!(queue.pop_expired(at(now, 100)).is_none(), "nothing expires");
}

#[test]
fn next_deadline_follows_pushes_pops_and_removes() {
    let now = Instant::now();
    let mut queue = FairQueue::new(16);
    assert_eq!(queue.next_deadline(), None, "empty");
    let late = push(&mut queue, entry("a", 0, at(now, 20), 1, ()));
    assert_eq!(queue.next_deadline(), Some(at(now, 20)), "after one push");
    let soon = push(&mut queue, entry("b", 0, at(now, 5), 1, ()));
    assert_eq!(queue.next_deadline(), Some(at(now, 5)), "an earlier push");
    push(&mut queue, entry("a", 0, at(now, 10), 1, ()));
    assert_eq!(queue.next_deadline(), Some(at(now, 5)), "a later push");

    assert!(queue.remove(soon).is_some(), "b's entry is queued");
    assert_eq!(
        queue.next_deadline(),
        Some(at(now, 10)),
        "after removing the earliest"
    );
    // a's entries pop by deadline: +10 first.
    assert_eq!(pop(&mut queue).deadline, at(now, 10), "a's earliest pops");
    assert_eq!(queue.next_deadline(), Some(at(now, 20)), "after the pop");
    assert!(queue.remove(late).is_some(), "a's last entry is queued");
    assert_eq!(queue.next_deadline(), None, "after removing the last");
}

/// One step of a random schedule.
#[derive(Clone, Debug)]
enum Op {
    /// Push for tenant `0..4` with this priority, deadline (seconds from the base) and cost.
    Push {
        tenant: u8,
        priority: u8,
        deadline: u64,
        cost: u64,
    },
    Pop,
    /// Remove the n-th key ever pushed (often one already gone).
    Remove(usize),
    /// Expire at this many seconds from the base.
    Expire(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..3, 0u64..20, 1u64..500).prop_map(|(tenant, priority, deadline, cost)| {
            Op::Push { tenant, priority, deadline, cost }
        }),
        3 => Just(Op::Pop),
        1 => (0usize..64).prop_map(Op::Remove),
        1 => (0u64..20).prop_map(Op::Expire),
    ]
}

/// The rules of the module docs, by linear scans over a list.
#[derive(Default)]
struct Model {
    /// (key, tenant, priority, deadline, cost), in push order.
    entries: Vec<(Key, u8, u8, Instant, u64)>,
    /// Backlogged tenants: (counter, the key that began the backlog).
    tenants: HashMap<u8, (u64, Key)>,
    floor: u64,
}

impl Model {
    fn take(&mut self, key: Key) -> Option<(Key, u8, u8, Instant, u64)> {
        let at = self.entries.iter().position(|e| e.0 == key)?;
        let taken = self.entries.remove(at);
        if !self.entries.iter().any(|e| e.1 == taken.1) {
            self.tenants.remove(&taken.1);
        }
        Some(taken)
    }
}

proptest! {
    #[test]
    fn agrees_with_a_linear_model(ops in proptest::collection::vec(op(), 1..200)) {
        let base = Instant::now();
        let mut queue = FairQueue::new(12);
        let mut model = Model::default();
        let mut keys = Vec::new();
        for op in ops {
            match op {
                Op::Push { tenant, priority, deadline, cost } => {
                    let deadline = at(base, deadline);
                    let pushed = queue.push(entry(&tenant.to_string(), priority, deadline, cost, ()));
                    if model.entries.len() >= 12 {
                        prop_assert!(pushed.is_err(), "a full queue refuses");
                        continue;
                    }
                    let key = match pushed {
                        Ok(key) => key,
                        Err(_) => return Err(TestCaseError::fail("a queue with room refused")),
                    };
                    let start = model.tenants.values().map(|t| t.0).min().unwrap_or(model.floor);
                    model.tenants.entry(tenant).or_insert((start, key));
                    model.entries.push((key, tenant, priority, deadline, cost));
                    keys.push(key);
                }
                Op::Pop => {
                    let next = model
                        .tenants
                        .iter()
                        .min_by_key(|(_, &(counter, since))| (counter, since))
                        .map(|(&tenant, _)| tenant)
                        .and_then(|tenant| {
                            model
                                .entries
                                .iter()
                                .filter(|e| e.1 == tenant)
                                .min_by_key(|e| (Reverse(e.2), e.3, e.0))
                                .copied()
                        });
                    if let Some((key, tenant, _, _, cost)) = next {
                        if let Some(t) = model.tenants.get_mut(&tenant) {
                            t.0 += cost;
                            model.floor = model.floor.max(t.0);
                        }
                        model.take(key);
                    }
                    let peeked = queue
                        .peek()
                        .map(|e| (Arc::clone(&e.tenant), e.priority, e.deadline, e.cost));
                    let popped = queue.pop();
                    prop_assert_eq!(popped.as_ref().map(|(key, _)| *key), next.map(|e| e.0), "pop");
                    prop_assert_eq!(
                        popped.map(|(_, e)| (e.tenant, e.priority, e.deadline, e.cost)),
                        peeked,
                        "peek shows the entry pop takes"
                    );
                }
                Op::Remove(n) => {
                    if let Some(&key) = keys.get(n) {
                        let expected = model.take(key).map(|e| e.0);
                        prop_assert_eq!(queue.remove(key).map(|_| key), expected, "remove");
                    }
                }
                Op::Expire(secs) => {
                    let now = at(base, secs);
                    let next = model
                        .entries
                        .iter()
                        .filter(|e| e.3 <= now)
                        .min_by_key(|e| (e.3, e.0))
                        .map(|e| e.0);
                    if let Some(key) = next {
                        model.take(key);
                    }
                    prop_assert_eq!(queue.pop_expired(now).map(|(key, _)| key), next, "pop_expired");
                }
            }
            queue.check();
            prop_assert_eq!(queue.len(), model.entries.len(), "len");
            prop_assert_eq!(
                queue.next_deadline(),
                model.entries.iter().map(|e| e.3).min(),
                "next_deadline"
            );
            for tenant in 0u8..4 {
                prop_assert_eq!(
                    queue.counter(&tenant.to_string()),
                    model.tenants.get(&tenant).map(|t| t.0),
                    "the counter of tenant {}", tenant
                );
            }
        }
    }
}

#[test]
fn service_elsewhere_in_the_fleet_moves_a_backlogged_tenant_back() {
    let base = Instant::now();
    let mut queue = FairQueue::new(16);
    push_n(&mut queue, "flood", 4, 100, at(base, 10));
    push_n(&mut queue, "quiet", 4, 100, at(base, 10));
    assert_eq!(
        pop_tenants(&mut queue, 2),
        ["flood", "quiet"],
        "alternating"
    );
    // The other gateways served the flood 250 tokens (2.5 entries) since the last sync.
    queue.charge("flood", 250);
    queue.check();
    assert_eq!(queue.counter("flood"), Some(350));
    assert_eq!(
        pop_tenants(&mut queue, 4),
        ["quiet", "quiet", "quiet", "flood"],
        "the quiet tenant catches up the fleet's service to the flood first"
    );
    queue.charge("absent", 1_000);
    assert_eq!(
        queue.counter("absent"),
        None,
        "an idle tenant is not charged"
    );
}
