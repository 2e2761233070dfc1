use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::metrics::exemplar::TraceId;
use crate::route::handoff::record::{HandoffRecord, HandoffResult};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A context whose marks are `t0 + offsets` (milliseconds), in the order of [`Marks`]' fields:
/// admitted, body_read, dispatched, first_attempt, attempt, connected, written, head, first token.
fn context_at(offsets: [Option<u64>; 9], new_connection: bool) -> (RequestContext, Instant) {
    let t0 = Instant::now();
    let at = |i: usize| offsets[i].map(|n| t0 + ms(n));
    let mut context = RequestContext::new(t0, None);
    context.marks = Marks {
        admitted: at(0),
        body_read: at(1),
        dispatched: at(2),
        first_attempt: at(3),
        attempt: at(4),
        connected: at(5),
        new_connection,
        written: at(6),
        head: at(7),
        first_token_sent: None,
    };
    context.stream.first_token = at(8);
    (context, t0)
}

#[test]
fn the_phases_of_a_stream_add_up_to_its_ttft() {
    let marks = [1, 3, 4, 4, 4, 6, 7, 9, 120].map(Some);
    let (context, _) = context_at(marks, true);
    let phases = Phases::of(&context);
    assert_eq!(phases.reached, 8, "every phase reached");
    assert_eq!(
        phases.times,
        [ms(1), ms(2), ms(1), ms(0), ms(0), ms(2), ms(3), ms(111)],
        "admission, body, routing, handoff, retries, connect, head, first token"
    );
    assert_eq!(phases.total(), ms(120), "the sum is the TTFT");
    // A new connection: its connect is the network's, not the proxy's.
    assert_eq!(phases.overhead_request, ms(1) + ms(1), "routing + writing");
}

#[test]
fn a_reused_connection_counts_its_checkout_as_the_proxys() {
    let marks = [1, 3, 4, 4, 4, 5, 6, 9, 20].map(Some);
    let (context, _) = context_at(marks, false);
    let phases = Phases::of(&context);
    assert_eq!(phases.overhead_request, ms(1) + ms(1) + ms(1));
}

#[test]
fn retries_and_a_handoff_have_their_own_phases() {
    let marks = [0, 1, 2, 50, 80, 81, 82, 83, 90].map(Some);
    let (mut context, _) = context_at(marks, true);
    let phases = Phases::of(&context);
    assert_eq!(
        phases.times[2],
        ms(1) + ms(48),
        "no handoff: the gap is routing's"
    );
    assert_eq!(phases.times[3], ms(0));
    assert_eq!(phases.times[4], ms(30), "the failed attempt's time");
    context.handoff = Some(HandoffRecord::new(HandoffResult::LocalShort, 100));
    assert_eq!(
        Phases::of(&context).times[2],
        ms(49),
        "prefilled where it decodes: the layer's time is routing's"
    );
    let mut record = HandoffRecord::new(HandoffResult::Remote, 4000);
    record.prefill_started = Some(context.received + ms(3));
    context.handoff = Some(record);
    let phases = Phases::of(&context);
    assert_eq!(phases.times[2], ms(1), "routing alone");
    assert_eq!(phases.times[3], ms(48), "the remote prefill and transfer");
    assert_eq!(phases.total(), ms(90));
}

#[test]
fn missing_and_early_marks_last_zero_and_the_sum_holds() {
    // A passthrough: no body read, no dispatch mark; a clock step put `connected` before `attempt`.
    let marks = [
        Some(2),
        None,
        None,
        Some(5),
        Some(6),
        Some(4),
        Some(8),
        Some(9),
        Some(30),
    ];
    let (context, _) = context_at(marks, true);
    let phases = Phases::of(&context);
    assert_eq!(phases.times[1], ms(0), "no body read");
    assert_eq!(phases.times[5], ms(0), "an early mark lasts zero");
    assert_eq!(phases.total(), ms(30));
    for time in phases.times {
        assert!(time <= ms(30));
    }
}

#[test]
fn a_request_refused_early_reaches_only_its_first_phases() {
    let marks = [Some(1), None, None, None, None, None, None, None, None];
    let (context, _) = context_at(marks, true);
    let phases = Phases::of(&context);
    assert_eq!(phases.reached, 1);
    assert_eq!(phases.reached().count(), 1);
    assert_eq!(phases.overhead_request, Duration::ZERO, "never sent");
    assert_eq!(phases.overhead_first_token, None);
}

#[test]
fn the_first_tokens_hold_is_from_its_arrival_to_its_hand_over() {
    let marks = [1, 3, 4, 4, 4, 6, 7, 9, 120].map(Some);
    let (mut context, t0) = context_at(marks, true);
    context.marks.first_token_sent = Some(t0 + ms(120) + Duration::from_micros(7));
    let phases = Phases::of(&context);
    assert_eq!(phases.overhead_first_token, Some(Duration::from_micros(7)));
}

#[test]
fn server_timing_names_the_phases_before_the_head_and_the_trace() {
    let marks = [1, 3, 4, 4, 4, 6, 7, 9, 120].map(Some);
    let (context, _) = context_at(marks, true);
    let header = Phases::of(&context).server_timing(Some(&TraceId([0xab; 16])));
    assert_eq!(
        header.to_str().expect("ascii"),
        "tm-admission;dur=1.000, tm-request_body;dur=2.000, tm-routing;dur=1.000, \
         tm-handoff;dur=0.000, tm-retries;dur=0.000, tm-connect;dur=2.000, \
         tm-upstream_head;dur=3.000, tm-trace;desc=\"abababababababababababababababab\""
    );
}
