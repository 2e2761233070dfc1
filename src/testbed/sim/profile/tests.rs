use std::ops::RangeInclusive;

use super::*;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn profile(name: &str) -> SimConfig {
    SimConfig::profile(name).expect("known profile")
}

#[test]
fn every_listed_profile_exists_and_is_valid() {
    for name in PROFILES {
        let config = SimConfig::profile(name).expect("listed profile must exist");
        assert!(config.validate().is_ok(), "profile {name} must validate");
    }
    assert!(
        SimConfig::profile("nope").is_none(),
        "unknown profile gives None"
    );
}

#[test]
fn formula_is_exact() {
    let c = profile("llama-3.1-8b-h100");
    // Memory-bound: batch 4, 1000 context tokens each.
    let mem = (16.0e9 + 131_072.0 * 4000.0) / (3.35e12 * 0.8);
    let expected = Duration::from_micros(500) + Duration::from_secs_f64(mem);
    assert_eq!(
        c.step_time(4, 4000),
        expected,
        "decode step is the memory term"
    );
    // Compute-bound: a 4096-token prefill chunk.
    let flops = 2.0 * 8.0e9 * 4096.0 / (989e12 * 0.35);
    let expected = Duration::from_micros(500) + Duration::from_secs_f64(flops);
    assert_eq!(
        c.step_time(4096, 4096),
        expected,
        "prefill step is the compute term"
    );
}

/// Checks that a profile's `figure` (`what`, with its unit) lands in `want`, where published
/// measurements put it.
fn assert_ballpark(figure: f64, want: RangeInclusive<f64>, what: &str) {
    assert!(want.contains(&figure), "{what}: {figure}, want {want:?}");
}

#[test]
fn llama_decode_and_prefill_ballparks() {
    // (profile, decode step at batch 1 in ms, prefill in tok/s)
    let cases = [
        ("llama-3.1-8b-h100", 6.0..=7.0, 15_000.0..=25_000.0),
        ("llama-3.1-70b-4xh100", 15.0..=17.0, 7_000.0..=10_000.0),
    ];
    for (name, decode_ms, prefill_tok_s) in cases {
        let c = profile(name);
        let batch1 = ms(c.step_time(1, 1000));
        assert_ballpark(batch1, decode_ms, &format!("{name}: decode at batch 1, ms"));
        let prefill = 8192.0 / c.step_time(8192, 8192).as_secs_f64();
        assert_ballpark(prefill, prefill_tok_s, &format!("{name}: prefill, tok/s"));
    }
}

#[test]
fn llama_8b_ballparks_at_scale() {
    let c = profile("llama-3.1-8b-h100");
    let batch128 = ms(c.step_time(128, 128 * 2048));
    assert_ballpark(batch128, 18.0..=22.0, "8B decode at batch 128 x 2k, ms");
    let stall = c.step_time(8192, 8192).as_secs_f64();
    assert_ballpark(stall, 0.3..=0.5, "an 8k prefill chunk stalls a step by, s");
}

#[test]
fn fast_profile_is_fast() {
    let c = profile("fast");
    let step = ms(c.step_time(1, 100));
    assert_ballpark(step, 1.0..=1.5, "fast decode step, ms (~1)");
}

#[test]
fn time_scale_stretches() {
    let mut c = profile("fast");
    c.time_scale = 2.5;
    assert_eq!(
        c.scaled(Duration::from_millis(4)),
        Duration::from_millis(10),
        "4 ms x 2.5"
    );
}

#[test]
fn validate_rejects_bad_values() {
    let mut c = profile("fast");
    c.eff_mem = 1.5;
    let err = c
        .validate()
        .expect_err("eff_mem above 1 is invalid")
        .to_string();
    assert!(err.contains("eff_mem"), "error names the knob: {err}");
    let mut c = profile("fast");
    c.max_num_seqs = 0;
    let err = c.validate().expect_err("zero seqs is invalid").to_string();
    assert!(err.contains("max_num_seqs"), "error names the knob: {err}");
}

#[test]
fn kv_transfer_time_is_bytes_over_link_bandwidth() {
    let c = profile("llama-3.1-8b-h100");
    assert_eq!(c.kv_link_bandwidth, 25e9, "a 200 Gb/s RDMA NIC");
    assert_eq!(
        c.kv_transfer_time(4000),
        Duration::from_secs_f64(4000.0 * 131_072.0 / 25e9),
        "4000 tokens x 128 KiB over 25 GB/s"
    );
    assert_ballpark(
        ms(c.kv_transfer_time(4000)),
        20.0..=22.0,
        "8B: a 4k prompt's KV (0.5 GB) moves in ~21 ms, a tenth of its prefill",
    );
    assert_eq!(
        profile("llama-3.1-70b-4xh100").kv_link_bandwidth,
        25e9,
        "the 70B profile pulls over the same NIC"
    );
    let fast = profile("fast");
    assert_eq!(
        fast.kv_transfer_time(1000),
        Duration::from_micros(1024),
        "fast: 1000 tokens x 1 KiB at 1 GB/s"
    );
    assert_eq!(c.kv_transfer_time(0), Duration::ZERO, "nothing to move");
    let mut scaled = fast.clone();
    scaled.time_scale = 10.0;
    assert_eq!(
        scaled.scaled(scaled.kv_transfer_time(1000)),
        Duration::from_micros(10_240),
        "time_scale stretches the pull like every duration"
    );
}

#[test]
fn absurd_knobs_saturate_instead_of_panicking() {
    let mut c = profile("fast");
    c.kv_link_bandwidth = f64::MIN_POSITIVE;
    assert_eq!(c.kv_transfer_time(1), Duration::MAX, "transfer time");
    c.time_scale = 1e300;
    assert_eq!(c.scaled(Duration::from_secs(1)), Duration::MAX, "scaled");
}

#[test]
fn kv_link_bandwidth_must_be_positive() {
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut c = profile("fast");
        c.kv_link_bandwidth = bad;
        let err = c.validate().expect_err("not a bandwidth").to_string();
        assert!(
            err.contains("kv_link_bandwidth"),
            "error names the knob for {bad}: {err}"
        );
    }
}
