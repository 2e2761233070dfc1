use super::*;

/// Entries written just now.
fn fresh<'a>(entries: &[(&'a str, &'a str)]) -> Vec<Entry<'a>> {
    entries
        .iter()
        .map(|&(name, payload)| Entry {
            name,
            age: Duration::ZERO,
            payload,
        })
        .collect()
}

/// The others' load on `backend` of `pool`, summed.
fn summed(view: &View, pool: &str, backend: &str) -> Figures {
    let mut sum = Figures::default();
    for posted in &view.loads {
        if (posted.pool, posted.backend) == (pool, backend) {
            sum.add(posted.figures);
        }
    }
    sum
}

fn counts(tokens: u64, prompts: u64, chats: u64) -> Counts {
    Counts {
        tokens,
        prompts,
        chat_tokens: chats * 100,
        chats,
        chat_misses: 0,
    }
}

#[test]
fn adds_what_each_replica_offered_since_it_was_last_read() {
    let mut seen = Seen::new();
    let first = [
        ("b", "demand\tp\t8000\t1\t1000\t10\t0\n"),
        ("c", "demand\tp\t0\t0\t500\t5\t0\n"),
    ];
    let view = View::read("a", &fresh(&first), &mut seen);
    assert!(
        view.offered.is_empty(),
        "a replica seen the first time adds nothing"
    );
    let second = [
        ("b", "demand\tp\t24000\t3\t1500\t15\t0\n"),
        ("c", "demand\tp\t0\t0\t500\t5\t0\n"),
    ];
    let view = View::read("a", &fresh(&second), &mut seen);
    assert_eq!(view.offered["p"], counts(16_000, 2, 5));
    let restarted = [("b", "demand\tp\t8000\t1\t100\t1\t0\n")];
    let view = View::read("a", &fresh(&restarted), &mut seen);
    assert_eq!(
        view.offered["p"],
        counts(8_000, 1, 1),
        "counts that went back: the replica restarted, all it has is new"
    );
    assert_eq!(seen.demand.len(), 1, "c, not read this time, is forgotten");
}

#[test]
fn sums_the_others_load_per_backend() {
    let others = [
        (
            "b",
            "load\tchat\tb1\t3\t1200\t300\nload\tchat\tb2\t1\t0\t0\n",
        ),
        ("c", "load\tchat\tb1\t2\t800\t900\ngarbage\n"),
    ];
    let view = View::read("a", &fresh(&others), &mut Seen::new());
    assert_eq!(view.loads.len(), 3, "one load line a replica and backend");
    assert!(
        view.stamps.is_empty(),
        "payloads of a version without stamps"
    );
    let b1 = summed(&view, "chat", "b1");
    assert_eq!((b1.streams, b1.queued_tokens), (5, 2000));
    assert_eq!(
        b1.stall.as_millis(),
        900,
        "streams and queues add, the longer stall holds"
    );
    assert_eq!(summed(&view, "chat", "b2").streams, 1);
    let stamped = [(
        "b",
        "load\tchat\tb1\t1\t0\t0\nstamp\t00000000000000ab\t12\n",
    )];
    let view = View::read("a", &fresh(&stamped), &mut Seen::new());
    assert_eq!(
        view.stamps["b"],
        Stamp { epoch: 0xab, n: 12 },
        "wherever the line is"
    );
    let learned = [
        ("b", "prefill\tchat\tb1\t50000\t300\n"),
        ("c", "prefill\tchat\tb1\t100000\t100.5\n"),
    ];
    let view = View::read("a", &fresh(&learned), &mut Seen::new());
    let (weighted, precision) = view.prefill[&("chat", "b1")];
    assert_eq!(precision, 400.5);
    assert!(
        (weighted / precision - (0.05 * 300.0 + 0.1 * 100.5) / 400.5).abs() < 1e-12,
        "the cost per thousand tokens, weighted by the precisions: {weighted}"
    );
}

#[test]
fn the_least_name_with_a_designation_leads_each_pool() {
    let mut seen = Seen::new();
    let others = [
        ("gw-2", "heavy\tp\t10.0.0.1:8000\nheavy\tq\n"),
        ("gw-0", "heavy\tp\t10.0.0.2:8000\t10.0.0.3:8000\n"),
        ("gw-3", "heavy\tq\t10.0.0.9:8000\n"),
    ];
    let view = View::read("gw-1", &fresh(&others), &mut seen);
    assert_eq!(
        view.leaders["p"],
        ("gw-0", vec!["10.0.0.2:8000", "10.0.0.3:8000"])
    );
    assert!(
        !view.leaders.contains_key("q"),
        "gw-1 is less than gw-3: it leads q itself"
    );
    let view = View::read("gw-3", &fresh(&others), &mut seen);
    assert_eq!(
        view.leaders["q"],
        ("gw-2", vec![]),
        "a leader that designates none is followed too"
    );
}

#[test]
fn lists_every_gateway_with_its_slot_partition_and_the_slots_they_hold() {
    let others = [
        ("b", "slots\t00000000000000ab\nheld\ts1\t1\t3\n"),
        ("c", "load\tchat\tb1\t1\t0\t0\nheld\ts1\t5\nheld\ts2\t0\n"),
    ];
    let view = View::read("a", &fresh(&others), &mut Seen::new());
    assert_eq!(
        view.gateways,
        [("b", Some(PartitionId(0xab))), ("c", None)],
        "c publishes no partition (an earlier version, or one that has not read the fleet)"
    );
    assert_eq!(view.held, [("s1", 1), ("s1", 3), ("s1", 5), ("s2", 0)]);
}

#[test]
fn sums_the_tenants_work_in_flight_and_what_each_replica_let_through_since() {
    let mut seen = Seen::new();
    let first = [
        (
            "b",
            "tenant\tp\tflood\t3000\t50000\ntenant\tp\tquiet\t300\t900\n",
        ),
        ("c", "tenant\tp\tflood\t1000\t20000\n"),
    ];
    let view = View::read("a", &fresh(&first), &mut seen);
    assert_eq!(view.in_flight["p"]["flood"], 4000);
    assert_eq!(view.in_flight["p"]["quiet"], 300);
    assert!(
        view.served.is_empty(),
        "first seen: their past is not served now"
    );
    let second = [
        (
            "b",
            "tenant\tp\tflood\t2000\t56000\ntenant\tp\tquiet\t0\t900\n",
        ),
        ("c", "tenant\tp\tflood\t1000\t21000\n"),
    ];
    let view = View::read("a", &fresh(&second), &mut seen);
    assert_eq!(
        view.served["p"]["flood"], 7000,
        "6 000 through b, 1 000 through c"
    );
    assert!(!view.served["p"].contains_key("quiet"), "nothing moved");
    assert_eq!(view.in_flight["p"]["flood"], 3000);
    let restarted = [("b", "tenant\tp\tflood\t0\t100\n")];
    let view = View::read("a", &fresh(&restarted), &mut seen);
    assert!(view.served.is_empty(), "counted back: restarted");
}

#[test]
fn a_write_is_read_as_of_its_age_on_the_stores_clock() {
    let at = |name, ms, payload| Entry {
        name,
        age: Duration::from_millis(ms),
        payload,
    };
    let others = [
        at("b", 200, "load\tchat\tb1\t1\t8000\t700\n"),
        at("c", 50, "load\tchat\tb1\t1\t8000\t100\n"),
        at(
            "d",
            10,
            "load\tchat\tb1\t2\t0\t0\nload\tchat\tb2\t1\t0\t300\n",
        ),
    ];
    let view = View::read("a", &others, &mut Seen::new());
    let b1 = summed(&view, "chat", "b1");
    assert_eq!(
        (b1.streams, b1.queued_tokens),
        (4, 16_000),
        "streams and queues as written"
    );
    assert_eq!(
        b1.stall.as_millis(),
        500,
        "b's 700 ms stall mark, written 200 ms ago, has 500 left; c's has 50"
    );
    assert_eq!(summed(&view, "chat", "b2").stall.as_millis(), 290);
    let gone = [at("b", 900, "load\tchat\tb1\t1\t0\t700\n")];
    let view = View::read("a", &gone, &mut Seen::new());
    assert_eq!(
        summed(&view, "chat", "b1").stall,
        Duration::ZERO,
        "a stall mark older than itself is over"
    );
}
