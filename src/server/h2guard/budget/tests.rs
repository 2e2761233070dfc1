use super::*;

const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

fn head(kind: u8, flags: u8, length: u32) -> FrameHead {
    FrameHead {
        length,
        kind,
        flags,
        stream: 1,
    }
}

/// Counts `n` frames like `frame` at `at`; the 1-based index of the first refused and why.
fn first_refused(tally: &mut Tally, frame: FrameHead, n: u32, at: Instant) -> Option<(u32, Abuse)> {
    (1..=n).find_map(|i| tally.frame(frame, &mut || at).err().map(|abuse| (i, abuse)))
}

/// Counts frames like `frame` until one is refused: the one past `allowed`, for `abuse`.
fn assert_trips_past(
    tally: &mut Tally,
    frame: FrameHead,
    allowed: u32,
    abuse: Abuse,
    now: Instant,
) {
    assert_eq!(
        first_refused(tally, frame, allowed + 10, now),
        Some((allowed + 1, abuse)),
        "{abuse:?}: {allowed} allowed, the next refused"
    );
}

/// The default server's budgets, a fresh tally under them, and a moment to count at.
fn fresh() -> (Budgets, Tally, Instant) {
    let budgets = Budgets::for_server(DEFAULT_MAX_HEADER_BYTES);
    (budgets, Tally::new(budgets), Instant::now())
}

#[test]
fn each_window_budget_trips_one_past_its_count() {
    let budgets = Budgets::for_server(DEFAULT_MAX_HEADER_BYTES);
    let now = Instant::now();
    let cases = [
        (head(RST_STREAM, 0, 4), budgets.resets, Abuse::RapidReset),
        (head(SETTINGS, 0, 6), budgets.settings, Abuse::SettingsFlood),
        (head(PING, 0, 8), budgets.pings, Abuse::PingFlood),
        (
            head(WINDOW_UPDATE, 0, 4),
            budgets.window_updates,
            Abuse::WindowUpdateFlood,
        ),
    ];
    for (frame, budget, abuse) in cases {
        assert_trips_past(&mut Tally::new(budgets), frame, budget, abuse, now);
    }
}

#[test]
fn acks_and_other_frames_are_never_counted() {
    let (_, mut tally, now) = fresh();
    for frame in [
        head(SETTINGS, FLAG_ACK, 0),
        head(PING, FLAG_ACK, 8),
        head(0x0, 0, 16_384),
        head(0x2, 0, 5),
        head(HEADERS, FLAG_END_HEADERS, 100),
    ] {
        assert_eq!(
            first_refused(&mut tally, frame, 100_000, now),
            None,
            "{frame:?} is not counted"
        );
    }
}

#[test]
fn a_new_window_starts_the_counts_again() {
    let (budgets, mut tally, start) = fresh();
    let reset = head(RST_STREAM, 0, 4);
    assert_eq!(
        first_refused(&mut tally, reset, budgets.resets, start),
        None,
        "the first window's budget"
    );
    let later = start + budgets.window - Duration::from_millis(1);
    assert_eq!(
        first_refused(&mut tally, reset, 1, later),
        Some((1, Abuse::RapidReset)),
        "still the first window"
    );
    let mut tally = Tally::new(budgets);
    assert_eq!(
        first_refused(&mut tally, reset, budgets.resets, start),
        None,
        "the first window's budget"
    );
    let next = start + budgets.window;
    assert_eq!(
        first_refused(&mut tally, reset, budgets.resets, next),
        None,
        "a full budget again in the next window"
    );
}

#[test]
fn written_bytes_earn_pings_and_window_updates() {
    let (budgets, mut tally, now) = fresh();
    let written = 1 << 20;
    tally.wrote(written);
    let cases = [
        (
            head(WINDOW_UPDATE, 0, 4),
            budgets.window_updates,
            budgets.written_bytes_per_window_update,
            Abuse::WindowUpdateFlood,
        ),
        (
            head(PING, 0, 8),
            budgets.pings,
            budgets.written_bytes_per_ping,
            Abuse::PingFlood,
        ),
    ];
    for (frame, base, bytes_per_frame, abuse) in cases {
        // 1 MiB written earns this many more.
        let earned = u32::try_from(written as u64 / bytes_per_frame).expect("fits");
        assert_trips_past(&mut tally, frame, base + earned, abuse, now);
    }
}

#[test]
fn pongs_do_not_pay_for_a_ping_flood() {
    let (budgets, mut tally, now) = fresh();
    let ping = head(PING, 0, 8);
    let refused = (1..=100_000).find(|_| {
        let verdict = tally.frame(ping, &mut || now);
        tally.wrote(17);
        verdict.is_err()
    });
    assert!(
        refused.is_some_and(|n| n < 3 * budgets.pings),
        "a flood answered with PONGs still runs out: {refused:?}"
    );
}

#[test]
fn header_blocks_are_bounded_in_frames_and_bytes() {
    let budgets = Budgets::for_server(DEFAULT_MAX_HEADER_BYTES);
    assert_eq!(
        budgets.continuations, 5,
        "h2's bound for 64 KiB lists: max(5, 4 + 4/4)"
    );
    let now = Instant::now();

    // Empty CONTINUATIONs without END_HEADERS: the flood.
    let mut tally = Tally::new(budgets);
    assert_eq!(
        tally.frame(head(HEADERS, 0, 10), &mut || now),
        Ok(()),
        "a block starts"
    );
    assert_eq!(
        first_refused(&mut tally, head(CONTINUATION, 0, 0), 1000, now),
        Some((budgets.continuations + 1, Abuse::ContinuationFlood)),
        "one CONTINUATION past h2's bound"
    );

    // A legitimately large block: full frames up to just under the limit, then END_HEADERS.
    let mut tally = Tally::new(budgets);
    for _ in 0..3 {
        assert_eq!(
            tally.frame(head(HEADERS, 0, 16_384), &mut || now),
            Ok(()),
            "a block starts"
        );
        for _ in 0..2 {
            assert_eq!(
                tally.frame(head(CONTINUATION, 0, 16_384), &mut || now),
                Ok(()),
                "within"
            );
        }
        assert_eq!(
            tally.frame(head(CONTINUATION, FLAG_END_HEADERS, 16_000), &mut || now),
            Ok(()),
            "64 000 bytes in 4 frames is within 64 KiB"
        );
    }

    // Over the limit in bytes, in one frame or over several.
    let mut tally = Tally::new(budgets);
    let limit = u32::try_from(budgets.header_block_bytes).expect("fits");
    assert_eq!(
        tally.frame(head(HEADERS, FLAG_END_HEADERS, limit + 1), &mut || now),
        Err(Abuse::HeaderListTooLarge),
        "one frame over the limit"
    );
    let mut tally = Tally::new(budgets);
    assert_eq!(
        tally.frame(head(HEADERS, 0, 16_384), &mut || now),
        Ok(()),
        "a block starts"
    );
    let refused = first_refused(&mut tally, head(CONTINUATION, 0, 16_384), 10, now);
    assert_eq!(
        refused,
        Some((4, Abuse::HeaderListTooLarge)),
        "the fifth 16 KiB frame is over 64 KiB"
    );
}

#[test]
fn a_continuation_outside_a_block_is_left_to_h2() {
    let (_, mut tally, now) = fresh();
    assert_eq!(
        first_refused(&mut tally, head(CONTINUATION, 0, 0), 100, now),
        None,
        "no block: not counted (h2 answers it with a GOAWAY)"
    );
}

#[test]
fn larger_header_limits_allow_more_continuations() {
    let budgets = Budgets::for_server(1 << 20);
    assert_eq!(
        budgets.continuations, 80,
        "64 frames of 16 KiB carry 1 MiB, plus a quarter"
    );
    assert_eq!(
        budgets.header_block_bytes,
        1 << 20,
        "the byte bound follows max_header_bytes"
    );
}
