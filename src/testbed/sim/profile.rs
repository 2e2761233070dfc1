//! Replica profiles and the roofline model of one engine step.
//!
//! An engine step runs one forward pass over every token scheduled in it. Decode is
//! memory-bandwidth-bound (the weights and every scheduled request's KV cache are read once per
//! step), prefill is compute-bound (2 FLOPs per parameter per token), so
//!
//! ```text
//! t_step = t_fixed + max(mem_bytes / (mem_bandwidth * eff_mem), flops / (peak_flops * eff_compute))
//! mem_bytes = weights_bytes + kv_bytes_per_token * (sum of context tokens of the batch)
//! flops     = 2 * params * tokens_in_step
//! ```
//!
//! `t_fixed` stands for what the roofline ignores (kernel launches, sampling, scheduling, and on
//! tensor-parallel profiles the all-reduces). The profiles are tuned to public ballparks
//! (REFERENCE.md §6); the unit tests pin them.
//!
//! A decode replica of a disaggregated request (see [`super::kv_transfer`]) first pulls the
//! prompt's KV from the prefill replica over the KV link, each pull at the link's full rate:
//!
//! ```text
//! t_transfer = prompt_tokens * kv_bytes_per_token / kv_link_bandwidth
//! ```
use std::time::Duration;

use super::kv_transfer::KvTransferFault;
use super::SimError;

/// Name of the profile used when none is given.
pub const DEFAULT_PROFILE: &str = "llama-3.1-8b-h100";

/// Every profile [`SimConfig::profile`] knows.
pub const PROFILES: [&str; 3] = ["llama-3.1-8b-h100", "llama-3.1-70b-4xh100", "fast"];

/// Everything that shapes a simulated replica: the model and hardware (roofline), the
/// scheduler limits, and how the replica presents itself.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Served model name, listed by `/v1/models` and used as the `model_name` metric label.
    pub model: String,
    /// Parameter count (FLOPs per token = 2 * params).
    pub params: f64,
    /// Bytes of weights read every step.
    pub weights_bytes: f64,
    /// Bytes of KV cache per context token read every step.
    pub kv_bytes_per_token: f64,
    /// Aggregate memory bandwidth in bytes/s (summed over tensor-parallel GPUs).
    pub mem_bandwidth: f64,
    /// Achieved fraction of `mem_bandwidth`, in (0, 1].
    pub eff_mem: f64,
    /// Aggregate dense peak in FLOP/s.
    pub peak_flops: f64,
    /// Achieved fraction of `peak_flops`, in (0, 1].
    pub eff_compute: f64,
    /// Per-step overhead the roofline does not see.
    pub t_fixed: Duration,
    /// Token budget of one step (vLLM `--max-num-batched-tokens`).
    pub max_num_batched_tokens: u64,
    /// Cap on admitted requests (vLLM `--max-num-seqs`).
    pub max_num_seqs: u64,
    /// KV-cache capacity in tokens; a request reserves prompt + max_tokens at admission.
    pub kv_capacity_tokens: u64,
    /// Multiplies every modelled duration (2.0 = half speed, for slow shared machines).
    pub time_scale: f64,
    /// Tokens generated per decode step per request, all in one chunk (speculative decoding).
    pub tokens_per_chunk: u64,
    /// Automatic prefix caching (vLLM V1: on by default): cached prompt blocks skip prefill.
    pub enable_prefix_caching: bool,
    /// Report `usage.prompt_tokens_details.cached_tokens` (vLLM's
    /// `--enable-prompt-tokens-details`: off by default).
    pub enable_prompt_tokens_details: bool,
    /// Bytes/s of the KV link a decode replica pulls a prompt's KV over (vLLM's KV connector,
    /// e.g. NIXL over RDMA); concurrent pulls do not share it (each gets the whole rate).
    pub kv_link_bandwidth: f64,
    /// Fault injection for the prefill/decode protocol (none by default).
    pub kv_transfer_fault: KvTransferFault,
}

impl SimConfig {
    /// The named profile, or `None` when the name is not one of [`PROFILES`].
    pub fn profile(name: &str) -> Option<SimConfig> {
        let common = SimConfig {
            model: String::new(),
            params: 0.0,
            weights_bytes: 0.0,
            kv_bytes_per_token: 0.0,
            mem_bandwidth: 0.0,
            eff_mem: 0.0,
            peak_flops: 0.0,
            eff_compute: 0.0,
            t_fixed: Duration::ZERO,
            // vLLM V1's default budget on H100-class GPUs.
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            kv_capacity_tokens: 0,
            time_scale: 1.0,
            tokens_per_chunk: 1,
            enable_prefix_caching: true,
            enable_prompt_tokens_details: false,
            // A 200 Gb/s RDMA NIC (ConnectX-7 class), what an H100 node pulls KV over.
            kv_link_bandwidth: 25e9,
            kv_transfer_fault: KvTransferFault::None,
        };
        match name {
            // One H100 SXM (3.35 TB/s, 989 TFLOP/s dense BF16), BF16 weights. KV: 32 layers x 8
            // KV heads x 128 dims x 2 (K, V) x 2 bytes = 128 KiB per token. ~52 GB left for KV
            // at 0.9 memory utilisation = ~400k tokens.
            "llama-3.1-8b-h100" => Some(SimConfig {
                model: "meta-llama/Llama-3.1-8B-Instruct".to_owned(),
                params: 8.0e9,
                weights_bytes: 16.0e9,
                kv_bytes_per_token: 131_072.0,
                mem_bandwidth: 3.35e12,
                eff_mem: 0.8,
                peak_flops: 989e12,
                eff_compute: 0.35,
                t_fixed: Duration::from_micros(500),
                kv_capacity_tokens: 400_000,
                ..common
            }),
            // Four H100s with tensor parallelism: bandwidth and FLOPs add up, all-reduces show
            // up in t_fixed. KV: 80 layers x 8 x 128 x 2 x 2 bytes = 320 KiB per token.
            "llama-3.1-70b-4xh100" => Some(SimConfig {
                model: "meta-llama/Llama-3.1-70B-Instruct".to_owned(),
                params: 70.6e9,
                weights_bytes: 141.2e9,
                kv_bytes_per_token: 327_680.0,
                mem_bandwidth: 4.0 * 3.35e12,
                eff_mem: 0.8,
                peak_flops: 4.0 * 989e12,
                eff_compute: 0.3,
                t_fixed: Duration::from_micros(2_500),
                kv_capacity_tokens: 400_000,
                ..common
            }),
            // Steps of about a millisecond: for tests and demos that want many requests quickly.
            "fast" => Some(SimConfig {
                model: "sim-fast".to_owned(),
                params: 1.0e8,
                weights_bytes: 2.0e8,
                kv_bytes_per_token: 1024.0,
                mem_bandwidth: 1.0e12,
                eff_mem: 1.0,
                peak_flops: 1.0e14,
                eff_compute: 1.0,
                t_fixed: Duration::from_millis(1),
                kv_capacity_tokens: 1_000_000,
                // 1 GB/s: a 1000-token pull takes about a step (1 ms), visible but short.
                kv_link_bandwidth: 1e9,
                ..common
            }),
            _ => None,
        }
    }

    /// Modelled duration of one step (before `time_scale`) that processes `tokens_in_step`
    /// tokens (decode and prefill together) over `context_tokens` tokens of KV cache.
    pub fn step_time(&self, tokens_in_step: u64, context_tokens: u64) -> Duration {
        let mem_bytes = self.weights_bytes + self.kv_bytes_per_token * context_tokens as f64;
        let flops = 2.0 * self.params * tokens_in_step as f64;
        let mem_secs = mem_bytes / (self.mem_bandwidth * self.eff_mem);
        let compute_secs = flops / (self.peak_flops * self.eff_compute);
        self.t_fixed + Duration::from_secs_f64(mem_secs.max(compute_secs))
    }

    /// Modelled time (before `time_scale`) to pull the KV of `prompt_tokens` tokens over the KV
    /// link (see the module docs); saturates rather than panics on absurd knobs.
    pub fn kv_transfer_time(&self, prompt_tokens: u64) -> Duration {
        let secs = prompt_tokens as f64 * self.kv_bytes_per_token / self.kv_link_bandwidth;
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }

    /// `duration` stretched by `time_scale`: what the engine actually waits (`Duration::mul_f64`'s
    /// arithmetic, saturating instead of panicking on overflow).
    pub fn scaled(&self, duration: Duration) -> Duration {
        Duration::try_from_secs_f64(duration.as_secs_f64() * self.time_scale)
            .unwrap_or(Duration::MAX)
    }

    /// Checks that every knob is in its domain, so the engine never divides by zero or stalls.
    pub fn validate(&self) -> Result<(), SimError> {
        let positive = [
            ("params", self.params),
            ("weights_bytes", self.weights_bytes),
            ("kv_bytes_per_token", self.kv_bytes_per_token),
            ("mem_bandwidth", self.mem_bandwidth),
            ("peak_flops", self.peak_flops),
            ("time_scale", self.time_scale),
            ("kv_link_bandwidth", self.kv_link_bandwidth),
        ];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(SimError::Invalid(format!(
                    "{name} must be a positive number, got {value}"
                )));
            }
        }
        for (name, value) in [("eff_mem", self.eff_mem), ("eff_compute", self.eff_compute)] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(SimError::Invalid(format!(
                    "{name} must be in (0, 1], got {value}"
                )));
            }
        }
        let counts = [
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_num_seqs", self.max_num_seqs),
            ("kv_capacity_tokens", self.kv_capacity_tokens),
            ("tokens_per_chunk", self.tokens_per_chunk),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(SimError::Invalid(format!("{name} must be at least 1")));
            }
        }
        if self.model.is_empty() {
            return Err(SimError::Invalid("model must not be empty".to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
