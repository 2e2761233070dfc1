//! Recursive least squares with exponential forgetting: a linear model `y ≈ θ·x` refitted on
//! every sample in O(N²), holding no history.
//!
//! Each sample weighs `λ` times the one after it, so the fit is a least-squares fit over about
//! `1 / (1 - λ)` of the latest samples: a backend whose behaviour changed (a new model, a noisy
//! neighbour, a smaller batch budget) is seen as it is now within that many requests.
//!
//! Forgetting has a known failure: while the inputs do not vary (an idle backend sees the same
//! load for hours), the covariance `P` grows by `1/λ` per sample without bound and the next
//! sample that does vary swings `θ` wildly ("covariance wind-up"). The trace of `P` is therefore
//! capped at its starting value: the model is never less sure than it was before any sample.
//!
//! It also keeps the features' means, weighted as the samples are: where a caller reads a
//! coefficient as zero (a slope whose sign makes no sense), it reads that feature at its mean
//! instead, so the prediction keeps the share of the intercept that slope paid for.
/// A linear model of `N` features, fitted online.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rls<const N: usize> {
    theta: [f64; N],
    p: [[f64; N]; N],
    lambda: f64,
    max_trace: f64,
    samples: u64,
    /// The features' means over the samples, each weighing `λ` times the next.
    mean: [f64; N],
    /// The samples' total weight, `Σ λᵏ`.
    weight: f64,
}

impl<const N: usize> Rls<N> {
    /// A model that starts at `prior`, as sure of each coefficient as `1 / variance[i]` says (a
    /// larger variance lets the first samples move it further), forgetting with factor `lambda`
    /// (in (0, 1]; 1 never forgets).
    pub fn new(prior: [f64; N], variance: [f64; N], lambda: f64) -> Self {
        let mut p = [[0.0; N]; N];
        for (i, row) in p.iter_mut().enumerate() {
            row[i] = variance[i];
        }
        Self {
            theta: prior,
            p,
            lambda,
            max_trace: variance.iter().sum(),
            samples: 0,
            mean: [0.0; N],
            weight: 0.0,
        }
    }

    /// The model's value at `x`.
    pub fn predict(&self, x: &[f64; N]) -> f64 {
        dot(&self.theta, x)
    }

    /// The coefficients.
    pub(crate) fn theta(&self) -> &[f64; N] {
        &self.theta
    }

    /// The features' means over the samples learned, forgotten as they are (zeros before any).
    pub fn mean(&self) -> &[f64; N] {
        &self.mean
    }

    /// How uncertain coefficient `i` still is: its diagonal entry of `P`, which the samples
    /// shrink in proportion to how much they said of it (a sample whose feature `i` is large
    /// says much, one near zero little). Only comparable between fits of one construction
    /// (the same priors, variances and forgetting).
    pub(crate) fn variance(&self, i: usize) -> f64 {
        self.p[i][i]
    }

    /// Samples learned so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Learns that the value at `x` was `y`. A sample that is not finite is ignored.
    pub fn update(&mut self, x: &[f64; N], y: f64) {
        self.update_weighted(x, y, 1.0);
    }

    /// Learns that the value at `x` was `y`, the sample counting `weight` times in the squared
    /// error the fit minimises (a sample of weight 4 pulls as hard as four of weight 1). The
    /// features' means count it once: they say where the inputs were, not how much each error
    /// mattered. A sample or weight that is not finite, or a weight not above zero, is ignored.
    pub(crate) fn update_weighted(&mut self, x: &[f64; N], y: f64, weight: f64) {
        let usable = y.is_finite() && weight.is_finite() && weight > 0.0;
        if !usable || x.iter().any(|v| !v.is_finite()) {
            return;
        }
        // Weighted least squares is plain least squares on the sample scaled by √weight.
        let scale = weight.sqrt();
        let (unscaled, x, y) = (x, &x.map(|v| v * scale), y * scale);
        // k = P x / (λ + xᵀ P x)
        let mut px = [0.0; N];
        for (i, row) in self.p.iter().enumerate() {
            px[i] = dot(row, x);
        }
        let denominator = self.lambda + dot(x, &px);
        if denominator <= f64::EPSILON {
            return;
        }
        let gain = px.map(|v| v / denominator);
        let error = y - self.predict(x);
        for (theta, k) in self.theta.iter_mut().zip(gain) {
            *theta += k * error;
        }
        // P = (P - k (P x)ᵀ) / λ, with P symmetric so xᵀP = (P x)ᵀ.
        let mut trace = 0.0;
        for (i, (row, k)) in self.p.iter_mut().zip(gain).enumerate() {
            for (v, pxj) in row.iter_mut().zip(px) {
                *v = (*v - k * pxj) / self.lambda;
            }
            trace += row[i];
        }
        if trace > self.max_trace {
            let shrink = self.max_trace / trace;
            for row in &mut self.p {
                for v in row.iter_mut() {
                    *v *= shrink;
                }
            }
        }
        self.weight = self.lambda * self.weight + 1.0;
        for (mean, v) in self.mean.iter_mut().zip(unscaled) {
            *mean += (v - *mean) / self.weight;
        }
        self.samples += 1;
    }
}

fn dot<const N: usize>(a: &[f64; N], b: &[f64; N]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}
