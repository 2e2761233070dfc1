use super::*;

/// An 8B model on one GPU, roughly (the priors): 20 ms + 50 ms per thousand prompt tokens
/// queued or its own + 1 ms per stream to the first token; 8 ms + 0.3 ms per stream + 1 ms per
/// thousand prefill tokens a step.
const TTFT: [f64; 4] = [0.020, 0.050, 0.050, 0.001];
const TPOT: [f64; 3] = [0.008, 0.0003, 0.001];

fn model() -> LatencyModel {
    LatencyModel::with_coefficients(TTFT, TPOT)
}

/// The pool's mix on the simulated fleet, roughly: 1 160 prompt tokens and 150 output tokens a
/// request.
const MIX: Mix = Mix {
    uncached: 1.16,
    square: 1.16 * 1.16,
    output: 150.0,
};

/// The same mean prompt as chats and documents: nine tenths of 400 tokens, a tenth of 8 000.
const CHATS_AND_DOCUMENTS: Mix = Mix {
    uncached: 0.9 * 0.4 + 0.1 * 8.0,
    square: 0.9 * 0.4 * 0.4 + 0.1 * 8.0 * 8.0,
    output: 150.0,
};

const LOOSE: Limits = Limits {
    ttft: 100.0,
    tpot: 100.0,
};

/// The steady state solved directly: with every slope positive the four equations are linear in
/// (TTFT, TPOT) once `Q` and `S` are substituted.
fn solved(rate: f64, mix: Mix) -> (f64, f64) {
    let [a0, a1, a2, a3] = TTFT;
    let [c0, c1, c2] = TPOT;
    let (u, o) = (mix.uncached, mix.output - 1.0);
    // T (1 - a1 λ U - a3 λ) - a3 λ O P = a0 + a2 U
    // -(c1 λ + c2 λ U) T + (1 - c1 λ O) P = c0 + c1 + c2 U
    let (m11, m12, r1) = (1.0 - a1 * rate * u - a3 * rate, -a3 * rate * o, a0 + a2 * u);
    let (m21, m22, r2) = (
        -(c1 * rate + c2 * rate * u),
        1.0 - c1 * rate * o,
        c0 + c1 + c2 * u,
    );
    let det = m11 * m22 - m12 * m21;
    ((r1 * m22 - m12 * r2) / det, (m11 * r2 - m21 * r1) / det)
}

#[test]
fn the_steady_state_is_the_fixed_point_of_the_model_and_littles_law() {
    for rate in [0.0, 1.0, 4.0, 8.0] {
        let state = steady(&model(), MIX, rate, LOOSE).expect("settles");
        let (ttft, tpot) = solved(rate, MIX);
        assert!(
            (state.ttft - ttft).abs() < 1e-6,
            "{rate}: {state:?} vs {ttft}"
        );
        assert!(
            (state.tpot - tpot).abs() < 1e-6,
            "{rate}: {state:?} vs {tpot}"
        );
        assert!((state.queued - rate * MIX.uncached * ttft).abs() < 1e-6);
        let streams = rate * (ttft + (MIX.output - 1.0) * tpot);
        assert!((state.streams - streams).abs() < 1e-6, "{state:?}");
    }
    // Idle: the model's intercepts and the request's own prefill.
    let idle = steady(&model(), MIX, 0.0, LOOSE).expect("settles");
    assert!((idle.ttft - (0.020 + 0.050 * 1.16)).abs() < 1e-12);
    assert_eq!(idle.streams, 0.0);
}

#[test]
fn the_rate_sustained_puts_the_tighter_mean_at_its_limit() {
    let limits = Limits {
        ttft: 0.8 / TTFT_TAIL,
        tpot: 0.035,
    };
    let rate = sustained(&model(), MIX, limits);
    let (ttft, tpot) = solved(rate, MIX);
    let tightest = (ttft / limits.ttft).max(tpot / limits.tpot);
    assert!((tightest - 1.0).abs() < 1e-4, "{rate}: {ttft} {tpot}");
    // Just above it, the steady state passes a limit.
    assert!(steady(&model(), MIX, rate * 1.01, limits).is_none());
    assert!(steady(&model(), MIX, rate * 0.99, limits).is_some());
    // Here TTFT binds: 9.8 requests a second, about 11 400 prompt tokens a second of the 20 000
    // the backend prefills, because a queue's tail needs its mean at a third of the target.
    assert!((9.7..9.9).contains(&rate), "{rate}");
}

#[test]
fn a_tight_tpot_target_binds_on_the_decode_side() {
    // 10 ms: 2 ms over the step's intercept, about 4 streams' worth at 0.3 ms each, less what the
    // prefill in flight adds to a step.
    let limits = Limits {
        ttft: 10.0,
        tpot: 0.010,
    };
    let rate = sustained(&model(), MIX, limits);
    let (_, tpot) = solved(rate, MIX);
    assert!((tpot / limits.tpot - 1.0).abs() < 1e-4, "{rate}: {tpot}");
}

#[test]
fn longer_prompts_and_longer_answers_lower_the_rate() {
    let limits = Limits {
        ttft: 0.8 / TTFT_TAIL,
        tpot: 0.035,
    };
    let base = sustained(&model(), MIX, limits);
    let documents = Mix {
        uncached: 4.0,
        square: 16.0,
        ..MIX
    };
    assert!(sustained(&model(), documents, limits) < base / 2.0);
    let tight = Limits {
        ttft: 10.0,
        tpot: 0.012,
    };
    let essays = Mix {
        output: 600.0,
        ..MIX
    };
    assert!(sustained(&model(), essays, tight) < sustained(&model(), MIX, tight) / 2.0);
}

#[test]
fn a_backend_that_misses_even_idle_sustains_nothing_and_a_free_one_is_bounded() {
    let limits = Limits {
        ttft: 0.05,
        tpot: 0.035,
    };
    // Its own prefill alone is 78 ms.
    assert_eq!(sustained(&model(), MIX, limits), 0.0);
    // Every slope zero, the prefill's too (its rate read at the priors' 20 000 tokens a second):
    // the backstop speaks, 80 % of the backend's time prefilling 1 160 tokens a request.
    let free = LatencyModel::with_coefficients([0.02, 0.0, 0.0, 0.0], [0.008, 0.0, 0.0]);
    let backstop = MOST_PREFILL_BUSY * 20_000.0 / 1_160.0;
    let rate = sustained(&free, MIX, LOOSE);
    assert!(
        (rate - backstop).abs() < 1e-4 * backstop,
        "{rate} vs {backstop}"
    );
}

#[test]
fn a_model_whose_load_slopes_read_zero_is_bounded_by_its_prefill_rate() {
    // Learned at a light load: the queue and the streams seem free, the prefill is known (25 ms
    // a thousand tokens: 40 000 tokens a second).
    let light = LatencyModel::with_coefficients([0.02, 0.0, 0.025, 0.0], [0.008, 0.0, 0.0]);
    let rate = sustained(&light, MIX, LOOSE);
    let backstop = MOST_PREFILL_BUSY * 40_000.0 / 1_160.0;
    assert!(
        (rate - backstop).abs() < 1e-4 * backstop,
        "{rate} vs {backstop}"
    );
    // The same backend with its slopes learned sustains less than the backstop.
    let learned = LatencyModel::with_coefficients([0.02, 0.025, 0.025, 0.001], TPOT);
    let limits = Limits {
        ttft: 0.8 / TTFT_TAIL,
        tpot: 0.035,
    };
    assert!(sustained(&learned, MIX, limits) < backstop);
}

#[test]
fn a_saturated_backend_does_not_settle() {
    // 1 / (a₁ U) = 17 requests a second fill the queue faster than it drains: no steady state
    // however loose the limits.
    assert!(steady(&model(), MIX, 20.0, LOOSE).is_none());
}

#[test]
fn the_prefill_backstop_is_the_wait_of_one_prefill_after_another() {
    // No load slope learned, the prefill's cost known (a₂ 50 ms a thousand: 20 000 tokens a
    // second): the rate is where the Pollaczek–Khinchine wait and the request's own prefill
    // reach the TTFT limit, λ·a₂²·E[U²] / (2·(1 - λ·a₂·U)) + a₂·U = L, solved for λ.
    let free = LatencyModel::with_coefficients([0.0, 0.0, 0.050, 0.0], [0.008, 0.0, 0.0]);
    let limits = Limits {
        ttft: 0.8 / TTFT_TAIL,
        tpot: 0.035,
    };
    let (a2, u, e) = (
        0.050,
        CHATS_AND_DOCUMENTS.uncached,
        CHATS_AND_DOCUMENTS.square,
    );
    let room = limits.ttft - a2 * u;
    let expected = room / (a2 * a2 * e / 2.0 + room * a2 * u);
    let rate = sustained(&free, CHATS_AND_DOCUMENTS, limits);
    assert!(
        (rate - expected).abs() < 1e-4 * expected,
        "{rate} vs {expected}"
    );
    // 10.3 a second, 60 % of the backend's time prefilling: short of the 80 % the busy share
    // allows (13.8), because a chat that comes behind a document waits for it whole.
    assert!((10.2..10.4).contains(&rate), "{rate}");
    let busy = MOST_PREFILL_BUSY * 20_000.0 / (u * 1000.0);
    assert!((13.7..13.9).contains(&busy), "{busy}");
    // One prompt of the same mean: the busy share binds, as before.
    let same_mean = Mix {
        square: u * u,
        ..CHATS_AND_DOCUMENTS
    };
    let rate = sustained(&free, same_mean, limits);
    assert!((rate - busy).abs() < 1e-4 * busy, "{rate} vs {busy}");
}
