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
