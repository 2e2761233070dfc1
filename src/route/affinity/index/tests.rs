use super::holders::Holders;
use super::*;

fn owner(backend: u32) -> Owner {
    Owner { backend, epoch: 0 }
}

fn alive(_: Owner) -> bool {
    true
}

/// Inserts each of `names` for `newcomer`, checking before each insert that `name` is still held by
/// `holder` (`why` says why it should be).
#[track_caller]
fn stays_while_inserting(
    index: &mut PrefixIndex,
    name: u64,
    holder: Owner,
    names: std::ops::Range<u64>,
    newcomer: Owner,
    why: &str,
) {
    for new in names {
        assert_eq!(index.get(name, alive), Some(holder), "{why} (at {new})");
        index.insert(new, newcomer);
    }
}

#[test]
fn never_holds_more_than_its_capacity() {
    let mut index = PrefixIndex::new(100);
    for name in 0..10_000u64 {
        index.insert(name, owner(1));
        assert!(
            index.len() <= 100,
            "{} names after {name} inserts",
            index.len()
        );
    }
    assert!(
        index.len() >= 50,
        "and still holds the recent half: {}",
        index.len()
    );
}

#[test]
fn the_least_recently_used_go_first() {
    let mut index = PrefixIndex::new(100);
    for name in 0..50u64 {
        index.insert(name, owner(1));
    }
    // Name 0 is used again while later names arrive; names 1..50 are not.
    stays_while_inserting(
        &mut index,
        0,
        owner(1),
        50..140,
        owner(2),
        "a name in use stays",
    );
    assert_eq!(
        index.get(1, alive),
        None,
        "an unused name from a whole capacity ago is gone"
    );
    assert_eq!(index.get(139, alive), Some(owner(2)), "the newest stays");
}

#[test]
fn the_longest_live_run_from_the_first_name() {
    let mut index = PrefixIndex::new(1000);
    for name in [10u64, 11, 12] {
        index.insert(name, owner(1));
    }
    index.insert(13, owner(2));
    assert_eq!(
        index.longest(&[10, 11, 12, 13, 14], alive),
        (4, Some(owner(2))),
        "runs to the last known name"
    );
    assert_eq!(
        index.longest(&[10, 99, 12], alive),
        (1, Some(owner(1))),
        "stops at the first unknown"
    );
    assert_eq!(
        index.longest(&[99, 10], alive),
        (0, None),
        "nothing when the first is unknown"
    );
    let not_two = |o: Owner| o.backend != 2;
    assert_eq!(
        index.longest(&[10, 11, 12, 13], not_two),
        (3, Some(owner(1))),
        "a dead entry ends the run"
    );
    assert_eq!(index.get(13, alive), None, "and is removed");
}

#[test]
fn a_later_owner_replaces_an_earlier_one() {
    let mut index = PrefixIndex::new(10);
    index.insert(7, owner(1));
    for name in 100..104u64 {
        index.insert(name, owner(1));
    }
    // 7 is now in the previous generation: a new owner must win over it.
    index.insert(7, owner(3));
    let why = "the newest owner, whatever the generation";
    stays_while_inserting(&mut index, 7, owner(3), 200..210, owner(1), why);
}

fn backends(holders: &Holders) -> Vec<u32> {
    holders.as_slice().iter().map(|o| o.backend).collect()
}

#[test]
fn the_latest_server_comes_first_and_the_oldest_falls_off() {
    let mut holders = Holders::new(owner(1));
    for backend in [2, 3, 2, 4] {
        holders.serve(owner(backend));
    }
    assert_eq!(backends(&holders), [4, 2, 3, 1], "2 moved up, not repeated");
    holders.serve(owner(5));
    assert_eq!(backends(&holders), [5, 4, 2, 3], "1 was the least recent");
    holders.serve(owner(3));
    assert_eq!(backends(&holders), [3, 5, 4, 2]);
    assert_eq!(holders.latest(), owner(3));
    assert!(holders.contains(owner(2)) && !holders.contains(owner(1)));
}

#[test]
fn retain_drops_the_dead_in_order() {
    let mut holders = Holders::new(owner(1));
    holders.serve(owner(2));
    holders.serve(owner(3));
    assert!(holders.retain(|o| o.backend != 2));
    assert_eq!(backends(&holders), [3, 1]);
    assert!(!holders.retain(|_| false), "none left");
    assert!(holders.as_slice().is_empty());
}

#[test]
fn an_entry_takes_48_bytes() {
    // docs/routing.md reckons the index's memory from this: four holders of 8 bytes, a count,
    // the 8-byte name, aligned.
    assert_eq!(std::mem::size_of::<(u64, Holders)>(), 48);
}
