//! Overriding a profile from a TOML file (`--config FILE`) and from the command line.
//!
//! Precedence, lowest first: the profile (`--profile`, else the file's `profile`, else
//! [`DEFAULT_PROFILE`]), the file, the command-line flags. Unknown keys in the file are errors
//! that name the key, so a typo cannot silently leave a default in place.
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SimOverrides, SimError> {
        SimOverrides::from_toml(text, Path::new("test.toml"))
    }

    #[test]
    fn file_then_flags_override_the_profile() {
        let file = parse("profile = \"fast\"\nmax_num_seqs = 4\nt_fixed = \"3ms\"\nparams = 2e9\ntime_scale = 3\n")
            .expect("valid overrides");
        let flags = SimOverrides {
            max_num_seqs: Some(9),
            ..SimOverrides::default()
        };
        let config = resolve(&file, &flags).expect("resolves");
        let mut want = SimConfig::profile("fast").expect("fast profile");
        want.max_num_seqs = 9;
        want.t_fixed = Duration::from_millis(3);
        want.params = 2e9;
        want.time_scale = 3.0;
        assert_eq!(
            config, want,
            "flags beat the file, the file beats the profile; integers read as floats"
        );
    }

    #[test]
    fn example_files_resolve() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim");
        let file =
            SimOverrides::from_file(&dir.join("8b-chunked-2k.toml")).expect("example parses");
        let config = resolve(&file, &SimOverrides::default()).expect("example resolves");
        assert_eq!(config.max_num_batched_tokens, 2048, "the example's budget");
        let file = SimOverrides::from_file(&dir.join("70b-4xh100-spec-decode.toml"))
            .expect("example parses");
        let config = resolve(&file, &SimOverrides::default()).expect("example resolves");
        assert_eq!(
            (config.tokens_per_chunk, config.t_fixed),
            (3, Duration::from_micros(3500)),
            "spec decode example"
        );
        assert_eq!(
            config.model, "meta-llama/Llama-3.1-70B-Instruct",
            "the file's profile applies"
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse("max_num_seq = 4\n")
            .expect_err("typo must be rejected")
            .to_string();
        assert!(
            err.contains("max_num_seq") && err.contains("test.toml"),
            "error names key and file: {err}"
        );
    }

    #[test]
    fn bad_values_are_placed() {
        let err = parse("t_fixed = \"soon\"\n")
            .expect_err("bad duration")
            .to_string();
        assert!(err.contains("t_fixed"), "error names the key: {err}");
    }

    #[test]
    fn unknown_profile_lists_the_known_ones() {
        let flags = SimOverrides {
            profile: Some("gpt-9".to_owned()),
            ..SimOverrides::default()
        };
        let err = resolve(&SimOverrides::default(), &flags)
            .expect_err("unknown profile")
            .to_string();
        assert!(
            err.contains("gpt-9") && err.contains("llama-3.1-8b-h100"),
            "helpful error: {err}"
        );
    }

    #[test]
    fn invalid_result_is_rejected() {
        let flags = SimOverrides {
            eff_compute: Some(0.0),
            ..SimOverrides::default()
        };
        let err = resolve(&SimOverrides::default(), &flags)
            .expect_err("zero efficiency")
            .to_string();
        assert!(err.contains("eff_compute"), "error names the knob: {err}");
    }
}
