use std::time::Duration;

use super::*;

/// A free slot of `table`, chosen as `placement` says, without waiting for one.
async fn reserve_now(table: &Arc<SlotTable>, placement: Placement) -> Option<SlotGuard> {
    table.reserve(placement, Duration::ZERO).await
}

#[tokio::test]
async fn a_slot_is_never_held_twice_and_comes_back_when_dropped() {
    let table = Arc::new(SlotTable::new(2));
    let a = reserve_now(&table, Placement::Conversation(None))
        .await
        .expect("a slot");
    let b = reserve_now(&table, Placement::Conversation(None))
        .await
        .expect("another");
    assert_ne!(a.id(), b.id());
    assert_eq!(table.busy(), 2);
    assert!(
        reserve_now(&table, Placement::Conversation(None))
            .await
            .is_none(),
        "no third slot"
    );
    let freed = a.id();
    drop(a);
    assert_eq!(table.busy(), 1);
    let c = reserve_now(&table, Placement::Conversation(None))
        .await
        .expect("the freed one");
    assert_eq!(c.id(), freed);
}

#[tokio::test(start_paused = true)]
async fn a_full_table_is_waited_on_for_at_most_the_wait() {
    let table = Arc::new(SlotTable::new(1));
    let held = reserve_now(&table, Placement::Conversation(None))
        .await
        .expect("the slot");
    let started = tokio::time::Instant::now();
    assert!(table
        .reserve(Placement::Conversation(None), Duration::from_millis(50))
        .await
        .is_none());
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(50),
        "waited the bound"
    );
    let waiter = {
        let table = Arc::clone(&table);
        tokio::spawn(async move {
            table
                .reserve(Placement::Conversation(None), Duration::from_secs(5))
                .await
                .map(|g| g.id())
        })
    };
    // 10 ms of the paused clock (it moves only once every task waits): the waiter has run and
    // waits on the full table, so the slot freed next is handed to a waiter, not found free.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the slot is held"
    );
    drop(held);
    assert_eq!(
        waiter.await.expect("joins"),
        Some(0),
        "a waiter takes the freed slot"
    );
}

#[tokio::test]
async fn a_conversation_returns_to_its_slot_else_the_least_recently_used() {
    let table = Arc::new(SlotTable::new(3));
    let first = reserve_now(&table, Placement::Conversation(Some(7)))
        .await
        .expect("slot");
    let other = reserve_now(&table, Placement::Conversation(Some(9)))
        .await
        .expect("slot");
    let (seven, nine) = (first.id(), other.id());
    drop(first);
    drop(other);
    let again = reserve_now(&table, Placement::Conversation(Some(7)))
        .await
        .expect("slot");
    assert_eq!(again.id(), seven, "its last slot holds its prompt");
    let fresh = reserve_now(&table, Placement::Conversation(Some(1)))
        .await
        .expect("slot");
    let never_used = (0..3).find(|i| *i != seven && *i != nine).expect("one");
    assert_eq!(fresh.id(), never_used, "the least recently used free slot");
}

#[tokio::test]
async fn short_prompts_take_the_first_free_slot_and_long_ones_the_last() {
    let table = Arc::new(SlotTable::new(4));
    let long = reserve_now(&table, Placement::Last).await.expect("slot");
    assert_eq!(long.id(), 3);
    let short = reserve_now(&table, Placement::First).await.expect("slot");
    assert_eq!(short.id(), 0);
    let next = reserve_now(&table, Placement::First).await.expect("slot");
    assert_eq!(next.id(), 1);
    let another_long = reserve_now(&table, Placement::Last).await.expect("slot");
    assert_eq!(another_long.id(), 2);
}

/// The id of the partition of a fleet of `names`.
fn partition(names: &[&str]) -> Option<PartitionId> {
    Some(share::Partition::of(names[0], names[1..].iter().copied()).id)
}

/// Every slot of `table` free now, by index.
async fn free_now(table: &Arc<SlotTable>) -> Vec<usize> {
    let mut guards = Vec::new();
    while let Some(guard) = reserve_now(table, Placement::First).await {
        guards.push(guard);
    }
    guards.iter().map(SlotGuard::id).collect()
}

#[tokio::test]
async fn a_gateway_of_a_fleet_reserves_nothing_before_it_has_read_the_fleet() {
    let tables = SlotTables::in_fleet();
    let table = tables.of(&Arc::from("s"), 2);
    assert_eq!(free_now(&table).await, [] as [usize; 0]);
    assert_eq!(tables.partition(), None, "it publishes no partition yet");
    tables.read("a", &[], &[]);
    assert_eq!(
        free_now(&table).await,
        [0, 1],
        "alone in its fleet, every slot is its own at once"
    );
    assert_eq!(tables.partition(), partition(&["a"]));
}

#[tokio::test]
async fn a_slot_moves_to_a_gateway_that_joins_once_the_other_agrees_and_lets_it_go() {
    let server: Arc<str> = Arc::from("s");
    let a = SlotTables::in_fleet();
    a.read("a", &[], &[]);
    let a_table = a.of(&server, 4);
    let first = reserve_now(&a_table, Placement::First).await.expect("slot");
    let second = reserve_now(&a_table, Placement::First).await.expect("slot");
    assert_eq!((first.id(), second.id()), (0, 1));

    // b joins; each reads the other: a keeps slots 0 and 2, b is given 1 and 3.
    a.read("a", &[("b", None)], &[]);
    assert_eq!(
        free_now(&a_table).await,
        [2],
        "a keeps what it had of its share at once; 1 (still held) and 3 are b's"
    );
    let b = SlotTables::in_fleet();
    let held_by_a = [("s", 0), ("s", 1)];
    b.read("b", &[("a", partition(&["a"]))], &held_by_a);
    let b_table = b.of(&server, 4);
    assert_eq!(
        free_now(&b_table).await,
        [] as [usize; 0],
        "a has not published b's partition yet: it may still reserve 1 or 3"
    );
    let waiter = {
        let table = Arc::clone(&b_table);
        tokio::spawn(async move {
            table
                .reserve(Placement::Last, Duration::from_secs(30))
                .await
                .map(|g| g.id())
        })
    };
    tokio::task::yield_now().await;
    b.read("b", &[("a", partition(&["a", "b"]))], &held_by_a);
    assert_eq!(
        waiter.await.expect("joins"),
        Some(3),
        "a agrees and does not hold 3: a waiter takes it"
    );
    assert_eq!(
        free_now(&b_table).await,
        [3],
        "1 waits for a's request in it to end"
    );
    drop(second);
    assert_eq!(
        free_now(&a_table).await,
        [2],
        "the slot a let go of is b's now"
    );
    b.read("b", &[("a", partition(&["a", "b"]))], &[("s", 0)]);
    assert_eq!(free_now(&b_table).await, [1, 3]);
    assert_eq!(
        b.held(),
        [] as [(Arc<str>, Vec<usize>); 0],
        "free_now let its slots go"
    );
    drop(first);

    // A third table, made after the fleet agreed: b's share at once, less what a holds there.
    let other: Arc<str> = Arc::from("t");
    b.read("b", &[("a", partition(&["a", "b"]))], &[("t", 1)]);
    assert_eq!(free_now(&b.of(&other, 4)).await, [3]);
    assert_eq!(b.owned().len(), 2);
}

#[tokio::test]
async fn a_gateway_cut_off_from_the_store_keeps_its_share_or_with_none_takes_every_slot() {
    let server: Arc<str> = Arc::from("s");
    let never = SlotTables::in_fleet();
    let table = never.of(&server, 3);
    never.alone();
    assert_eq!(
        free_now(&table).await,
        [0, 1, 2],
        "as a gateway without a fleet"
    );
    never.read("a", &[("b", partition(&["a", "b"]))], &[]);
    assert_eq!(
        free_now(&table).await,
        [0, 2],
        "the store answers: its share, taken again only once the fleet agrees"
    );

    let had = SlotTables::in_fleet();
    had.read("b", &[("a", partition(&["a", "b"]))], &[]);
    let table = had.of(&server, 3);
    assert_eq!(free_now(&table).await, [1]);
    had.alone();
    assert_eq!(free_now(&table).await, [1], "its share stays");
}
