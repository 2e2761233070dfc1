use super::*;
use crate::trace::record::next_trace_id;

const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

fn parent(header: &str) -> TraceParent {
    TraceParent::parse(header).expect("valid")
}

#[test]
fn parent_based_samplers_follow_the_callers_flag() {
    let trace = TraceId([0xff; 16]);
    for sampler in [
        Sampler::ParentbasedAlwaysOn,
        Sampler::ParentbasedAlwaysOff,
        Sampler::ParentbasedTraceidratio,
    ] {
        let sampling = Sampling::new(sampler, 0.0);
        assert!(
            sampling.decide(Some(&parent(SAMPLED)), &trace),
            "{sampler:?} records a sampled caller's trace"
        );
        assert!(
            !sampling.decide(Some(&parent(UNSAMPLED)), &trace),
            "{sampler:?} skips an unsampled caller's trace"
        );
    }
    let on = Sampling::new(Sampler::ParentbasedAlwaysOn, 0.0);
    let off = Sampling::new(Sampler::ParentbasedAlwaysOff, 1.0);
    assert!(
        on.decide(None, &trace) && !off.decide(None, &trace),
        "roots"
    );
}

#[test]
fn always_samplers_ignore_the_caller() {
    let trace = TraceId([1; 16]);
    let on = Sampling::new(Sampler::AlwaysOn, 0.0);
    let off = Sampling::new(Sampler::AlwaysOff, 1.0);
    assert!(on.decide(Some(&parent(UNSAMPLED)), &trace));
    assert!(!off.decide(Some(&parent(SAMPLED)), &trace));
}

#[test]
fn a_ratio_keeps_that_share_of_new_traces() {
    for ratio in [0.0, 0.01, 0.25, 1.0] {
        let sampling = Sampling::new(Sampler::ParentbasedTraceidratio, ratio);
        let kept = (0..100_000)
            .filter(|_| sampling.decide(None, &next_trace_id()))
            .count();
        let share = kept as f64 / 100_000.0;
        // 100 000 draws: the binomial standard deviation is at most 0.0016.
        assert!(
            (share - ratio).abs() < 0.01,
            "ratio {ratio}: kept {share} of new traces"
        );
    }
}

#[test]
fn a_ratio_decides_by_the_trace_id_alone() {
    let sampling = Sampling::new(Sampler::Traceidratio, 0.5);
    let mut low = [0u8; 16];
    low[8] = 0x10;
    let mut high = [0u8; 16];
    high[8] = 0xf0;
    assert!(sampling.decide(None, &TraceId(low)), "low ids are kept");
    assert!(!sampling.decide(None, &TraceId(high)), "high ids are not");
    assert_eq!(
        sampling.decide(None, &TraceId(low)),
        sampling.decide(Some(&parent(UNSAMPLED)), &TraceId(low)),
        "a plain ratio sampler ignores the parent"
    );
}
