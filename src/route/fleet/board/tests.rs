use super::*;
use crate::route::fleet::view::{Entry, Seen};

const KEEP: Duration = Duration::from_millis(500);
const EPOCH: u64 = 0xab;

fn figures(streams: u64, queued_tokens: u64, stall_ms: u64) -> Figures {
    Figures {
        streams,
        queued_tokens,
        stall: Duration::from_millis(stall_ms),
    }
}

fn stamp(n: u64) -> Stamp {
    Stamp { epoch: EPOCH, n }
}

/// Reads `entries` (replica, payload), written just now, into `board` at `now`.
fn read(board: &mut Board, entries: &[(&str, &str)], now: Instant) {
    let entries: Vec<Entry> = entries
        .iter()
        .map(|&(name, payload)| Entry {
            name,
            age: Duration::ZERO,
            payload,
        })
        .collect();
    let view = View::read("me", &entries, &mut Seen::new());
    board.read(&view, now);
}

fn streams(board: &Board, backend: &str, now: Instant) -> u64 {
    board.sum("p", backend, now).streams
}

#[test]
fn sums_each_backends_payloads_over_the_replicas() {
    let now = Instant::now();
    let mut board = Board::new(KEEP);
    read(
        &mut board,
        &[
            ("b", "load\tp\tx\t3\t1200\t300\nload\tp\ty\t1\t0\t0\n"),
            ("c", "load\tp\tx\t2\t800\t900\n"),
        ],
        now,
    );
    assert_eq!(board.sum("p", "x", now), figures(5, 2000, 900));
    assert_eq!(
        board.sum("p", "x", now + Duration::from_millis(600)),
        figures(5, 2000, 300),
        "the stall marks run down from the read"
    );
    assert_eq!(board.sum("p", "y", now), figures(1, 0, 0));
    assert_eq!(board.sum("p", "z", now), Figures::default());
    assert_eq!(board.sum("q", "x", now), Figures::default());
}

#[test]
fn a_news_holds_over_older_payloads_until_a_newer_one_or_its_time_is_up() {
    let start = Instant::now();
    let mut board = Board::new(KEEP);
    let payload =
        |n: u64, streams: u64| format!("stamp\t{EPOCH:016x}\t{n}\nload\tp\tx\t{streams}\t0\t0\n");
    read(&mut board, &[("b", &payload(4, 1))], start);
    // b placed a document on x after its payload 4: it says so at once.
    let heard = start + Duration::from_millis(10);
    let news = [("p", "x", figures(2, 9000, 400))];
    assert!(board.hear("b", stamp(5), news, heard));
    assert_eq!(board.sum("p", "x", heard), figures(2, 9000, 400));
    // The next sync reads b's payload 4 again (b has not written since): the news holds.
    let later = heard + Duration::from_millis(200);
    read(&mut board, &[("b", &payload(4, 1))], later);
    assert_eq!(
        board.sum("p", "x", later),
        figures(2, 9000, 200),
        "a news holds over the payload written before it"
    );
    // b's payload 6, written after its news, replaces it.
    read(&mut board, &[("b", &payload(6, 3))], later);
    assert_eq!(streams(&board, "x", later), 3, "a newer payload wins");
    // A news whose payload never comes holds two intervals, then the payload's figures do.
    assert!(board.hear("b", stamp(7), [("p", "x", figures(4, 0, 0))], later));
    read(&mut board, &[("b", &payload(6, 3))], later + KEEP / 2);
    assert_eq!(streams(&board, "x", later), 4);
    read(&mut board, &[("b", &payload(6, 3))], later + KEEP);
    assert_eq!(streams(&board, "x", later), 3, "the news' time is up");
}

#[test]
fn an_older_news_changes_nothing_and_another_run_of_the_replica_starts_afresh() {
    let now = Instant::now();
    let mut board = Board::new(KEEP);
    assert!(board.hear("b", stamp(9), [("p", "x", figures(5, 0, 0))], now));
    assert!(
        !board.hear("b", stamp(8), [("p", "x", figures(1, 0, 0))], now),
        "news can arrive out of order"
    );
    assert!(!board.hear("b", stamp(9), [("p", "x", figures(1, 0, 0))], now));
    assert_eq!(streams(&board, "x", now), 5);
    let restarted = Stamp { epoch: 0xcd, n: 1 };
    assert!(board.hear("b", restarted, [("p", "x", figures(1, 0, 0))], now));
    assert_eq!(
        streams(&board, "x", now),
        1,
        "a replica that restarted counts from 1"
    );
    // Two replicas' news on one backend add up.
    assert!(board.hear("c", stamp(1), [("p", "x", figures(2, 0, 0))], now));
    assert_eq!(streams(&board, "x", now), 3);
}

#[test]
fn a_replica_gone_from_the_view_is_forgotten_with_its_news() {
    let now = Instant::now();
    let mut board = Board::new(KEEP);
    assert!(board.hear("b", stamp(3), [("p", "x", figures(2, 0, 0))], now));
    assert!(board.hear("c", stamp(3), [("p", "x", figures(1, 0, 0))], now));
    // c's payload is of another version (no stamp): its payload is all there is of it.
    read(
        &mut board,
        &[
            ("c", "load\tp\tx\t7\t0\t0\n"),
            ("d", "load\tp\ty\t1\t0\t0\n"),
        ],
        now,
    );
    assert_eq!(
        streams(&board, "x", now),
        7,
        "b is gone, c's unstamped payload replaces its news"
    );
    board.clear();
    assert_eq!(streams(&board, "y", now), 0);
}
