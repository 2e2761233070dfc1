use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::rls::Rls;
use super::{Ask, LatencyModel, Load, Outcome};

/// A synthetic backend: TTFT = base + work / rate + per_stream x streams, TPOT likewise, each with
/// multiplicative noise of up to ±`noise`.
#[derive(Debug, Clone, Copy)]
struct Synthetic {
    ttft: [f64; 3],
    tpot: [f64; 3],
    noise: f64,
}

impl Synthetic {
    fn ttft(&self, load: Load, ask: Ask) -> f64 {
        let work = (load.queued_tokens + ask.uncached()) as f64 / 1000.0;
        self.ttft[0] + self.ttft[1] * work + self.ttft[2] * load.streams as f64
    }

    fn tpot(&self, load: Load, ask: Ask) -> f64 {
        let work = (load.queued_tokens + ask.uncached()) as f64 / 1000.0;
        self.tpot[0] + self.tpot[1] * (load.streams + 1) as f64 + self.tpot[2] * work
    }

    /// A random request on a random load, and what it took.
    fn sample(&self, rng: &mut StdRng) -> (Load, Ask, Outcome) {
        let load = Load {
            queued_tokens: rng.gen_range(0..20_000),
            streams: rng.gen_range(0..64),
        };
        let prompt_tokens = rng.gen_range(100..8_000);
        let ask = Ask {
            prompt_tokens,
            cached_tokens: rng.gen_range(0..=prompt_tokens / 2),
        };
        let mut noisy = |v: f64| v * (1.0 + rng.gen_range(-self.noise..=self.noise));
        let outcome = Outcome {
            ttft: Duration::from_secs_f64(noisy(self.ttft(load, ask))),
            tpot: Some(Duration::from_secs_f64(noisy(self.tpot(load, ask)))),
        };
        (load, ask, outcome)
    }

    /// Teaches `model` `n` random requests of this backend.
    fn teach(&self, model: &mut LatencyModel, rng: &mut StdRng, n: usize) {
        for _ in 0..n {
            let (load, ask, outcome) = self.sample(rng);
            model.learn(load, ask, outcome);
        }
    }
}

/// An 8B replica on a fast GPU: 10 000 prefill tokens/s, 20 ms base, 2 ms per stream.
const FAST: Synthetic = Synthetic {
    ttft: [0.020, 0.100, 0.002],
    tpot: [0.007, 0.0004, 0.002],
    noise: 0.1,
};

/// The same replica at half speed.
const SLOW: Synthetic = Synthetic {
    ttft: [0.040, 0.200, 0.004],
    tpot: [0.014, 0.0008, 0.004],
    noise: 0.1,
};

/// The median absolute relative error of `model` on `n` fresh samples of `backend`.
fn median_error(model: &LatencyModel, backend: &Synthetic, rng: &mut StdRng, n: usize) -> f64 {
    let mut errors: Vec<f64> = (0..n)
        .map(|_| {
            let (load, ask, _) = backend.sample(rng);
            let truth = backend.ttft(load, ask);
            (model.ttft(load, ask).as_secs_f64() - truth).abs() / truth
        })
        .collect();
    errors.sort_by(f64::total_cmp);
    errors[n / 2]
}

#[test]
fn converges_on_a_synthetic_backend() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = LatencyModel::new(200);
    let before = median_error(&model, &FAST, &mut rng, 201);
    FAST.teach(&mut model, &mut rng, 300);
    let after = median_error(&model, &FAST, &mut rng, 201);
    assert!(before > 0.3, "the priors are not this backend: {before}");
    assert!(after < 0.03, "within 3 % after 300 requests: {after}");
    let [a0, queued, own, a3] = model.ttft_coefficients();
    assert!(
        (own - 0.100).abs() < 0.005 && (queued - 0.100).abs() < 0.005,
        "prefill 10 000 tokens/s learned, queued and own: {queued} {own}"
    );
    assert!(
        (a0 - 0.020).abs() < 0.02 && (a3 - 0.002).abs() < 0.0005,
        "{a0} {a3}"
    );
    let [_, c1, c2] = model.tpot_coefficients();
    assert!(
        (c1 - 0.0004).abs() < 0.0001,
        "the per-stream decode cost: {c1}"
    );
    assert!((c2 - 0.002).abs() < 0.0005, "the prefill mixed in: {c2}");
    assert_eq!(model.samples(), 300, "every request taught it");
}

#[test]
fn forgets_a_backend_that_changed() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut model = LatencyModel::new(100);
    FAST.teach(&mut model, &mut rng, 500);
    let load = Load {
        queued_tokens: 4_000,
        streams: 16,
    };
    let ask = Ask {
        prompt_tokens: 2_000,
        cached_tokens: 0,
    };
    let fast = model.ttft(load, ask).as_secs_f64();
    assert!((fast / FAST.ttft(load, ask) - 1.0).abs() < 0.03, "{fast}");
    // The backend halves its speed (a noisy neighbour); three memories later the model says so.
    SLOW.teach(&mut model, &mut rng, 300);
    let slow = model.ttft(load, ask).as_secs_f64();
    assert!(
        (slow / SLOW.ttft(load, ask) - 1.0).abs() < 0.05,
        "the slower backend is seen as it is now: {slow} against {}",
        SLOW.ttft(load, ask)
    );
    // Within 6 %, where the noise is ±10 %: the slow backend's samples weigh half as much as the
    // fast one's did (its TTFTs are twice as long), so the old fit fades a little slower.
    let error = median_error(&model, &SLOW, &mut rng, 201);
    assert!(error < 0.06, "{error}");
}

#[test]
fn a_cached_prefix_shortens_the_predicted_prefill() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = LatencyModel::new(200);
    FAST.teach(&mut model, &mut rng, 300);
    let load = Load::default();
    let cold = Ask {
        prompt_tokens: 6_000,
        cached_tokens: 0,
    };
    let warm = Ask {
        cached_tokens: 5_000,
        ..cold
    };
    let saved = model.ttft(load, cold).as_secs_f64() - model.ttft(load, warm).as_secs_f64();
    assert!(
        (saved - 0.5).abs() < 0.03,
        "5 000 cached tokens save half a second at 10 000 tokens/s: {saved}"
    );
}

#[test]
fn the_stall_is_the_uncached_prefill_at_the_learned_rate() {
    let mut rng = StdRng::seed_from_u64(4);
    let mut model = LatencyModel::new(200);
    SLOW.teach(&mut model, &mut rng, 300);
    let document = Ask {
        prompt_tokens: 8_000,
        cached_tokens: 2_000,
    };
    let stall = model.stall(document).as_secs_f64();
    assert!(
        (stall - 1.2).abs() < 0.06,
        "6 000 uncached tokens at 5 000 tokens/s: {stall}"
    );
    let predicted = model.predict(Load::default(), document);
    assert_eq!(predicted.stall, model.stall(document));
    assert_eq!(model.stall(Ask::default()), Duration::ZERO);
}

#[test]
fn slopes_are_never_negative_and_predictions_never_below_zero() {
    let mut model = LatencyModel::new(50);
    // A backend whose TTFT falls as its queue grows (not a physical one): the fit's slope goes
    // negative, the prediction treats it as flat.
    for i in 0..200u64 {
        let load = Load {
            queued_tokens: i * 100,
            streams: 0,
        };
        let ttft = Duration::from_secs_f64(1.0 - i as f64 * 0.004);
        model.learn(load, Ask::default(), Outcome { ttft, tpot: None });
    }
    assert!(
        model.ttft_coefficients()[1] < 0.0,
        "the fit itself is negative"
    );
    let empty = model.ttft(Load::default(), Ask::default());
    let full = model.ttft(
        Load {
            queued_tokens: 1_000_000,
            streams: 0,
        },
        Ask::default(),
    );
    assert_eq!(empty, full, "a longer queue is never predicted faster");
}

#[test]
fn a_negative_slope_is_read_at_its_mean_not_dropped() {
    let mut model = LatencyModel::new(200);
    let mut rng = StdRng::seed_from_u64(11);
    // A busy replica: 90-110 streams, which its TTFT does not rise with (it falls a little, by
    // chance of what else ran): 142 ms - 1 ms per stream + 40 ms per 1 000 tokens.
    for _ in 0..2_000 {
        let load = Load {
            queued_tokens: rng.gen_range(0..4_000),
            streams: rng.gen_range(90..=110),
        };
        let ask = Ask {
            prompt_tokens: rng.gen_range(100..2_000),
            cached_tokens: 0,
        };
        let work = (load.queued_tokens + ask.uncached()) as f64 / 1000.0;
        let ttft = 0.142 - 0.001 * load.streams as f64 + 0.040 * work;
        let outcome = Outcome {
            ttft: Duration::from_secs_f64(ttft),
            tpot: None,
        };
        model.learn(load, ask, outcome);
    }
    assert!(model.ttft_coefficients()[3] < 0.0, "the fit is negative");
    let ask = Ask {
        prompt_tokens: 1_000,
        cached_tokens: 0,
    };
    let at = |streams| {
        let load = Load {
            queued_tokens: 0,
            streams,
        };
        model.ttft(load, ask).as_secs_f64()
    };
    // At its mean of 100 streams, 142 - 100 + 40 = 82 ms: dropping the slope would say 182.
    assert!((at(100) - 0.082).abs() < 0.002, "{}", at(100));
    assert_eq!(at(0), at(1_000), "more streams are never predicted faster");
}

#[test]
fn a_queued_token_and_an_own_token_are_learned_apart() {
    // A replica whose queued prompts are partly prefilled by the time a request arrives: a queued
    // token costs 60 % of one of its own.
    let mut rng = StdRng::seed_from_u64(5);
    let mut model = LatencyModel::new(200);
    let truth = |load: Load, ask: Ask| {
        0.015 + 0.030 * load.queued_tokens as f64 / 1000.0 + 0.050 * ask.uncached() as f64 / 1000.0
    };
    for _ in 0..400 {
        let load = Load {
            queued_tokens: rng.gen_range(0..30_000),
            streams: rng.gen_range(0..64),
        };
        let ask = Ask {
            prompt_tokens: rng.gen_range(100..10_000),
            cached_tokens: 0,
        };
        let ttft = Duration::from_secs_f64(truth(load, ask));
        model.learn(load, ask, Outcome { ttft, tpot: None });
    }
    let [_, queued, own, _] = model.ttft_coefficients();
    assert!((queued - 0.030).abs() < 0.001, "queued: {queued}");
    assert!((own - 0.050).abs() < 0.001, "own: {own}");
    let document = Ask {
        prompt_tokens: 8_000,
        cached_tokens: 0,
    };
    let stall = model.stall(document).as_secs_f64();
    assert!(
        (stall - 0.400).abs() < 0.01,
        "the stall is the request's own prefill, not a queued token's share: {stall}"
    );
}

#[test]
fn small_requests_are_not_predicted_by_the_large_ones_errors() {
    // Chats of 10-20 ms beside documents of 1-3 s that also wait up to 800 ms for the step in
    // progress (a busy step is long): the unweighted fit lets the documents' waits set the
    // intercept, the weighted one keeps the chats' relative error small.
    let mut rng = StdRng::seed_from_u64(9);
    let mut weighted = LatencyModel::new(500);
    let mut unweighted = Rls::new([0.0; 4], [1.0; 4], 1.0 - 1.0 / 500.0);
    for i in 0..1_000 {
        let document = i % 5 == 0;
        let ask = Ask {
            prompt_tokens: if document {
                rng.gen_range(20_000..60_000)
            } else {
                rng.gen_range(100..400)
            },
            cached_tokens: 0,
        };
        let load = Load::default();
        let truth = 0.008 + 0.045 * ask.uncached() as f64 / 1000.0;
        let wait = if document { 0.800 } else { 0.002 };
        let ttft = truth + rng.gen_range(0.0..wait);
        let x = [1.0, 0.0, ask.uncached() as f64 / 1000.0, 0.0];
        unweighted.update(&x, ttft);
        let ttft = Duration::from_secs_f64(ttft);
        weighted.learn(load, ask, Outcome { ttft, tpot: None });
    }
    let chat = Ask {
        prompt_tokens: 200,
        cached_tokens: 0,
    };
    let truth = 0.008 + 0.045 * 0.2 + 0.001;
    let weighted = weighted.ttft(Load::default(), chat).as_secs_f64();
    let unweighted = unweighted.predict(&[1.0, 0.0, 0.2, 0.0]);
    assert!(
        (weighted / truth - 1.0).abs() < 0.10,
        "weighted: {weighted} against {truth}"
    );
    assert!(
        (unweighted / truth - 1.0).abs() > 0.3,
        "the unweighted fit is the one that misses: {unweighted} against {truth}"
    );
}

#[test]
fn a_weighted_sample_pulls_as_hard_as_repeated_ones() {
    let mut once = Rls::new([0.0; 2], [1.0; 2], 1.0);
    let mut repeated = once.clone();
    once.update(&[1.0, 1.0], 1.0);
    once.update_weighted(&[1.0, 3.0], 2.0, 3.0);
    repeated.update(&[1.0, 1.0], 1.0);
    for _ in 0..3 {
        repeated.update(&[1.0, 3.0], 2.0);
    }
    for (a, b) in once.theta().iter().zip(repeated.theta()) {
        assert!(
            (a - b).abs() < 1e-9,
            "{:?} {:?}",
            once.theta(),
            repeated.theta()
        );
    }
    assert_eq!(once.samples(), 2, "counted once each");
    assert_eq!(once.mean(), &[1.0, 2.0], "the means count it once");
    once.update_weighted(&[1.0, 1.0], 1.0, 0.0);
    once.update_weighted(&[1.0, 1.0], 1.0, f64::NAN);
    assert_eq!(once.samples(), 2, "a weight of zero or NaN is no sample");
}

#[test]
fn the_features_means_forget_as_the_samples_do() {
    let mut rls = Rls::new([0.0; 2], [1.0; 2], 0.9);
    assert_eq!(rls.mean(), &[0.0, 0.0], "none before any sample");
    rls.update(&[1.0, 10.0], 1.0);
    assert_eq!(rls.mean(), &[1.0, 10.0], "the first sample is the mean");
    for _ in 0..200 {
        rls.update(&[1.0, 50.0], 1.0);
    }
    assert!((rls.mean()[1] - 50.0).abs() < 1e-6, "{:?}", rls.mean());
}

#[test]
fn a_constant_input_does_not_wind_the_covariance_up() {
    let mut rls = Rls::new([0.0, 0.0], [1.0, 1.0], 0.9);
    for _ in 0..10_000 {
        rls.update(&[1.0, 0.0], 0.5);
    }
    // The second feature was never excited: with an unbounded P, this one sample would swing it
    // by orders of magnitude.
    rls.update(&[1.0, 1.0], 0.6);
    let [intercept, slope] = *rls.theta();
    assert!((intercept - 0.5).abs() < 0.05, "{intercept}");
    assert!(slope.abs() < 0.5, "a bounded step: {slope}");
    assert!(
        (rls.predict(&[1.0, 1.0]) - 0.6).abs() < 0.1,
        "{}",
        rls.predict(&[1.0, 1.0])
    );
}

#[test]
fn samples_that_are_not_finite_are_ignored() {
    let mut rls = Rls::new([1.0], [1.0], 0.99);
    rls.update(&[1.0], f64::NAN);
    rls.update(&[f64::INFINITY], 1.0);
    assert_eq!(rls.samples(), 0);
    assert_eq!(rls.theta(), &[1.0]);
}

#[test]
fn two_documents_say_more_of_the_prefill_cost_than_sixty_chats() {
    // A half-speed replica: 20 ms, and 0.1 s per thousand uncached prompt tokens, when idle.
    let idle = |tokens: u64| Duration::from_secs_f64(0.02 + 0.1 * tokens as f64 / 1000.0);
    let learn = |model: &mut LatencyModel, tokens: u64| {
        let ask = Ask {
            prompt_tokens: tokens,
            cached_tokens: 0,
        };
        let outcome = Outcome {
            ttft: idle(tokens),
            tpot: None,
        };
        model.learn(Load::default(), ask, outcome);
    };
    let (mut documents, mut chats) = (LatencyModel::new(256), LatencyModel::new(256));
    assert_eq!(
        documents.prefill_cost(),
        None,
        "nothing learned, nothing to say"
    );
    for _ in 0..2 {
        learn(&mut documents, 8_000);
    }
    for _ in 0..60 {
        learn(&mut chats, 300);
    }
    let (document_cost, document_precision) = documents.prefill_cost().unwrap();
    let (chat_cost, chat_precision) = chats.prefill_cost().unwrap();
    let mean = (document_cost * document_precision + chat_cost * chat_precision)
        / (document_precision + chat_precision);
    println!(
        "documents {document_cost:.4} s/1000 at {document_precision:.1}, \
         chats {chat_cost:.4} at {chat_precision:.1}: {mean:.4}"
    );
    assert!(
        (document_cost - 0.1).abs() < 0.01,
        "two documents teach the cost: {document_cost}"
    );
    assert!(
        document_precision > 2.0 * chat_precision,
        "and are surer of it than sixty chats: {document_precision} against {chat_precision}"
    );
    assert!(
        (mean - 0.1).abs() < (chat_cost - 0.1).abs() / 2.0,
        "the precision-weighted mean leans to the documents' cost: {mean} (chats' {chat_cost})"
    );
}
