//! The token path allocates nothing per chunk in the steady state: a counting global allocator
//! watches the real `MeteredBody` (SSE framer, OpenAI classifier, stream record, TTFB / TTFT /
//! ITL histograms) forward thousands of vLLM chunks after a warm-up.
//!
//! The counter is per thread, so the test harness's other threads cannot disturb it.

use crate::alloc_support;
use bytes::Bytes;

#[path = "../../benches/common/meter_fixture.rs"]
mod fixture;

use fixture::{metered, noop_waker, poll_one, series, Repeat, VLLM_CHUNK};

use alloc_support::allocations;

#[test]
fn metering_a_chunk_allocates_nothing_in_the_steady_state() {
    let _alone = crate::alone_blocking();
    let series = series();
    let mut body = metered(&series, Repeat(Bytes::from_static(VLLM_CHUNK)));
    let waker = noop_waker();
    // Warm-up: the first frame records TTFB and TTFT, scanner buffers reach their size.
    for _ in 0..100 {
        assert_eq!(
            poll_one(&mut body, &waker),
            VLLM_CHUNK.len(),
            "chunk forwarded whole"
        );
    }
    let before = allocations();
    const CHUNKS: usize = 20_000;
    let mut forwarded = 0;
    for _ in 0..CHUNKS {
        forwarded += poll_one(&mut body, &waker);
    }
    let during = allocations() - before;
    assert_eq!(
        forwarded,
        CHUNKS * VLLM_CHUNK.len(),
        "every chunk is forwarded unchanged"
    );
    assert_eq!(
        during, 0,
        "{during} heap allocations while metering {CHUNKS} chunks (want 0 per chunk)"
    );
    // The chunks were metered, not skipped: every one after the first is an ITL sample.
    let rendered = series.metrics().render();
    let itl_count = rendered
        .lines()
        .find(|line| line.starts_with(&format!("{}_count", tokenmeter::meter::series::ITL)))
        .map(str::to_owned);
    assert!(
        itl_count
            .as_deref()
            .is_some_and(|line| line.ends_with(&format!(" {}", 100 + CHUNKS - 1))),
        "ITL histogram counted every gap: {itl_count:?}"
    );
}
