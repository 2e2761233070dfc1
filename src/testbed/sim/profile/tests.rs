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

#[test]
fn llama_8b_ballparks() {
    let c = profile("llama-3.1-8b-h100");
    let batch1 = ms(c.step_time(1, 1000));
    assert!(
        (6.0..=7.0).contains(&batch1),
        "8B decode at batch 1: {batch1} ms, want 6-7"
    );
    let batch128 = ms(c.step_time(128, 128 * 2048));
    assert!(
        (18.0..=22.0).contains(&batch128),
        "8B decode at batch 128 x 2k: {batch128} ms, want ~20"
    );
    let prefill = 8192.0 / c.step_time(8192, 8192).as_secs_f64();
    assert!(
        (15_000.0..=25_000.0).contains(&prefill),
        "8B prefill {prefill} tok/s, want 15-25k"
    );
    let stall = c.step_time(8192, 8192).as_secs_f64();
    assert!(
        (0.3..=0.5).contains(&stall),
        "8k prefill chunk stalls a step by {stall} s, want 0.3-0.5"
    );
}

#[test]
fn llama_70b_ballparks() {
    let c = profile("llama-3.1-70b-4xh100");
    let batch1 = ms(c.step_time(1, 1000));
    assert!(
        (15.0..=17.0).contains(&batch1),
        "70B decode at batch 1: {batch1} ms, want 15-17"
    );
    let prefill = 8192.0 / c.step_time(8192, 8192).as_secs_f64();
    assert!(
        (7_000.0..=10_000.0).contains(&prefill),
        "70B prefill {prefill} tok/s, want 7-10k"
    );
}

#[test]
fn fast_profile_is_fast() {
    let c = profile("fast");
    let step = ms(c.step_time(1, 100));
    assert!(
        (1.0..=1.5).contains(&step),
        "fast decode step {step} ms, want ~1"
    );
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
