//! Overriding a profile from a TOML file (`--config FILE`) and from the command line.
//!
//! Precedence, lowest first: the profile (`--profile`, else the file's `profile`, else
//! [`DEFAULT_PROFILE`]), the file, the command-line flags. Unknown keys in the file are errors
//! that name the key, so a typo cannot silently leave a default in place.
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::kv_transfer::KvTransferFault;
use super::profile::{DEFAULT_PROFILE, PROFILES};
use super::{SimConfig, SimError};

/// Every knob of [`SimConfig`], each optional: the schema of `--config` files and the flags of
/// `tokenmeter sim` (same names, `_` becomes `-`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct SimOverrides {
    /// Replica profile: llama-3.1-8b-h100 (default), llama-3.1-70b-4xh100, fast.
    #[arg(long)]
    pub profile: Option<String>,
    /// Served model name (listed by /v1/models, the `model_name` metric label).
    #[arg(long)]
    pub model: Option<String>,
    /// Model parameters (FLOPs per token = 2 x params).
    #[arg(long)]
    pub params: Option<f64>,
    /// Bytes of weights read per step.
    #[arg(long)]
    pub weights_bytes: Option<f64>,
    /// KV-cache bytes per context token.
    #[arg(long)]
    pub kv_bytes_per_token: Option<f64>,
    /// Memory bandwidth in bytes/s.
    #[arg(long)]
    pub mem_bandwidth: Option<f64>,
    /// Achieved fraction of the memory bandwidth, (0, 1].
    #[arg(long)]
    pub eff_mem: Option<f64>,
    /// Peak FLOP/s.
    #[arg(long)]
    pub peak_flops: Option<f64>,
    /// Achieved fraction of the peak FLOP/s, (0, 1].
    #[arg(long)]
    pub eff_compute: Option<f64>,
    /// Per-step overhead, a human duration such as "500us" or "2ms".
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(default, deserialize_with = "human_duration")]
    pub t_fixed: Option<Duration>,
    /// Token budget of one engine step.
    #[arg(long)]
    pub max_num_batched_tokens: Option<u64>,
    /// Most requests in the batch.
    #[arg(long)]
    pub max_num_seqs: Option<u64>,
    /// KV-cache capacity in tokens.
    #[arg(long)]
    pub kv_capacity_tokens: Option<u64>,
    /// Multiply every modelled duration by this factor (2 = half speed).
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Tokens per chunk per step (speculative decoding).
    #[arg(long)]
    pub tokens_per_chunk: Option<u64>,
    /// Automatic prefix caching: cached prompt blocks skip prefill (on by default, as in vLLM
    /// V1; `--enable-prefix-caching false` or `--no-enable-prefix-caching` turns it off).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub enable_prefix_caching: Option<bool>,
    /// vLLM's spelling for turning prefix caching off.
    #[arg(long)]
    #[serde(skip)]
    pub no_enable_prefix_caching: bool,
    /// Report usage.prompt_tokens_details.cached_tokens, as vLLM does with this flag.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub enable_prompt_tokens_details: Option<bool>,
    /// Bytes/s of the KV link prefill/decode transfers use (H100 profiles: 25e9, a 200 Gb/s
    /// RDMA NIC; fast: 1e9).
    #[arg(long)]
    pub kv_link_bandwidth: Option<f64>,
    /// Fail prefill/decode KV transfers: none (default); prefill (the prefill answer carries
    /// "kv_transfer_params": null); decode (the pull fails: HTTP 500 after the transfer time).
    #[arg(long, value_enum)]
    pub kv_transfer_fault: Option<KvTransferFault>,
}

fn human_duration<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(de)?;
    humantime::parse_duration(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

impl SimOverrides {
    /// Parses a TOML override file's text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &Path) -> Result<SimOverrides, SimError> {
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize(de).map_err(|err| {
            let path = err.path().to_string();
            SimError::ParseConfig {
                path: origin.to_owned(),
                message: format!("at `{path}`: {}", err.into_inner()),
            }
        })
    }

    /// Reads and parses a TOML override file.
    pub fn from_file(path: &Path) -> Result<SimOverrides, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Writes every knob that is set into `config`.
    pub fn apply(&self, config: &mut SimConfig) {
        let SimOverrides {
            profile: _,
            model,
            params,
            weights_bytes,
            kv_bytes_per_token,
            mem_bandwidth,
            eff_mem,
            peak_flops,
            eff_compute,
            t_fixed,
            max_num_batched_tokens,
            max_num_seqs,
            kv_capacity_tokens,
            time_scale,
            tokens_per_chunk,
            enable_prefix_caching,
            no_enable_prefix_caching,
            enable_prompt_tokens_details,
            kv_link_bandwidth,
            kv_transfer_fault,
        } = self.clone();
        fn set<T>(slot: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *slot = value;
            }
        }
        set(&mut config.model, model);
        set(&mut config.params, params);
        set(&mut config.weights_bytes, weights_bytes);
        set(&mut config.kv_bytes_per_token, kv_bytes_per_token);
        set(&mut config.mem_bandwidth, mem_bandwidth);
        set(&mut config.eff_mem, eff_mem);
        set(&mut config.peak_flops, peak_flops);
        set(&mut config.eff_compute, eff_compute);
        set(&mut config.t_fixed, t_fixed);
        set(&mut config.max_num_batched_tokens, max_num_batched_tokens);
        set(&mut config.max_num_seqs, max_num_seqs);
        set(&mut config.kv_capacity_tokens, kv_capacity_tokens);
        set(&mut config.time_scale, time_scale);
        set(&mut config.tokens_per_chunk, tokens_per_chunk);
        set(&mut config.enable_prefix_caching, enable_prefix_caching);
        if no_enable_prefix_caching {
            config.enable_prefix_caching = false;
        }
        set(
            &mut config.enable_prompt_tokens_details,
            enable_prompt_tokens_details,
        );
        set(&mut config.kv_link_bandwidth, kv_link_bandwidth);
        set(&mut config.kv_transfer_fault, kv_transfer_fault);
    }
}

/// Builds the validated config from the file's overrides and then the flags' overrides.
pub fn resolve(file: &SimOverrides, flags: &SimOverrides) -> Result<SimConfig, SimError> {
    let name = flags
        .profile
        .as_deref()
        .or(file.profile.as_deref())
        .unwrap_or(DEFAULT_PROFILE);
    let mut config = SimConfig::profile(name).ok_or_else(|| SimError::UnknownProfile {
        name: name.to_owned(),
        known: PROFILES.join(", "),
    })?;
    file.apply(&mut config);
    flags.apply(&mut config);
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests;
