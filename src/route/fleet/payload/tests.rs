use super::*;

fn figures(streams: u64, queued_tokens: u64, stall_ms: u64) -> Figures {
    Figures {
        streams,
        queued_tokens,
        stall: Duration::from_millis(stall_ms),
    }
}

#[test]
fn writes_backends_with_load_the_demand_and_the_designation_one_line_each() {
    let mut payload = Payload::default();
    payload.load("chat", "10.0.0.1:8000", figures(3, 1200, 0));
    payload.load("chat", "10.0.0.2:8000", figures(0, 0, 0));
    payload.load("docs", "10.0.0.3:8000", figures(0, 9000, 750));
    payload.load("bad\tname", "10.0.0.4:8000", figures(1, 1, 0));
    let counts = Counts {
        tokens: 64_000,
        prompts: 8,
        chat_tokens: 3_000,
        chats: 30,
        chat_misses: 1,
    };
    payload.demand("docs", counts);
    payload.heavy("docs", ["10.0.0.3:8000"]);
    payload.heavy("chat", []);
    payload.prefill("docs", "10.0.0.3:8000", 0.05, 256.25);
    payload.prefill("docs", "10.0.0.4:8000", 0.05, f64::NAN);
    let text = payload.into_string();
    assert_eq!(
        text,
        "load\tchat\t10.0.0.1:8000\t3\t1200\t0\n\
         load\tdocs\t10.0.0.3:8000\t0\t9000\t750\n\
         demand\tdocs\t64000\t8\t3000\t30\t1\n\
         heavy\tdocs\t10.0.0.3:8000\n\
         heavy\tchat\n\
         prefill\tdocs\t10.0.0.3:8000\t50000\t256.25\n"
    );
    let lines: Vec<Line> = read(&text).collect();
    assert!(
        read(
            "load\tchat\tb1\tx\t1\t0\ngarbage\nload\tchat\tb2\t1\t2\t3\t4\nfuture\tchat\tb2\t1\n\
             prefill\tchat\tb1\t50000\tNaN\nprefill\tchat\tb1\t50000\t-1\nprefill\tchat\tb1\t50000\t1\t2\n"
        )
        .next()
        .is_none(),
        "a number that does not read, a line of no kind, one field too many, a kind unknown, \
         a precision not finite or not above zero"
    );
    assert_eq!(lines.len(), 6, "every line written reads back");
    assert_eq!(
        lines[5],
        Line::Prefill {
            pool: "docs",
            backend: "10.0.0.3:8000",
            cost: 0.05,
            precision: 256.25
        }
    );
    assert_eq!(
        lines[2],
        Line::Demand {
            pool: "docs",
            counts
        }
    );
    assert_eq!(
        lines[4],
        Line::Heavy {
            pool: "chat",
            backends: vec![]
        }
    );
}

#[test]
fn writes_the_tenants_work_the_slot_partition_and_the_slots_held_per_server() {
    let mut payload = Payload::default();
    payload.tenant("chat", "acme", 1200, 90_000);
    payload.tenant("chat", "bad\ttenant", 1, 1);
    payload.partition(PartitionId(0xab));
    payload.held("10.0.0.1:8080", &[0, 2]);
    payload.held("10.0.0.2:8080", &[]);
    let text = payload.into_string();
    assert_eq!(
        text,
        "tenant\tchat\tacme\t1200\t90000\nslots\t00000000000000ab\nheld\t10.0.0.1:8080\t0\t2\n"
    );
    let lines: Vec<Line> = read(&text).collect();
    assert_eq!(
        lines,
        [
            Line::Tenant {
                pool: "chat",
                tenant: "acme",
                in_flight: 1200,
                admitted: 90_000
            },
            Line::Partition(PartitionId(0xab)),
            Line::Held {
                backend: "10.0.0.1:8080",
                slots: vec![0, 2]
            }
        ]
    );
    assert!(
        read("slots\tab\nslots\t00000000000000ab\t1\nheld\tb\t1\tx\n")
            .next()
            .is_none(),
        "a partition not of 16 digits, a field too many, a slot that is no number"
    );
}
