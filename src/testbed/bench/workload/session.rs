//! Session workloads: what a multi-turn conversation looks like, and each session's draws.
//!
//! Prefix-cache-aware routing only pays off when requests share prefixes the way chat traffic
//! does: a few system prompts shared by many sessions, and each session resending its whole
//! history on every turn. So a session workload is:
//!
//! - `system_prompts` distinct system prompts (K), built once per run: prompt `k` is the word
//!   `s{seed}p{k}` followed by `w`s, `system_tokens` words long (drawn once per prompt). The
//!   first word keeps two prompts from sharing a KV block, and the seed keeps runs with
//!   different seeds from warming each other's cache;
//! - per session: one system prompt (uniform over the K), a number of turns (`turns`), and per
//!   turn a user message of `user_tokens` words whose first word `u{session}t{turn}` is unique,
//!   so sessions share nothing beyond the system prompt, an output length (`output_tokens`, sent
//!   as `max_tokens` with `ignore_eos`), and a think time before it (exponential with mean
//!   `think_time`; none before the first turn).
//!
//! Draws are reproducible per session, like the single-turn workload's per request: session `i`
//! of a run with seed `s` draws from its own RNG, whatever the scheduling.
use std::fmt;
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use super::{bad, request_rng, Dist, WorkloadError};

/// Separate RNG streams for the system prompts' lengths and the sessions' draws.
const SYSTEM_SALT: u64 = 0x5E55_1011_5157_E300;
const SESSION_SALT: u64 = 0x5E55_1011_0C0F_FEE0;

/// The shape of every session of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionWorkload {
    /// How many distinct system prompts the sessions share (K >= 1).
    pub system_prompts: u32,
    /// Length of each system prompt, in words (drawn once per prompt).
    #[serde(with = "dist_text")]
    pub system_tokens: Dist,
    /// Turns per session.
    #[serde(with = "dist_text")]
    pub turns: Dist,
    /// Length of each user message, in words.
    #[serde(with = "dist_text")]
    pub user_tokens: Dist,
    /// Output length of each turn (`max_tokens`, with `ignore_eos`).
    #[serde(with = "dist_text")]
    pub output_tokens: Dist,
    /// Mean of the exponential think time between a reply's end and the next turn (zero: none).
    #[serde(rename = "think_time_s", with = "secs")]
    pub think_time: Duration,
}

impl Default for SessionWorkload {
    /// The command line's defaults: 4 system prompts of 1000 words, 3 to 6 turns of 100-word
    /// questions and 128-token answers, 2 s think time.
    fn default() -> Self {
        SessionWorkload {
            system_prompts: 4,
            system_tokens: Dist::Fixed(1000),
            turns: Dist::Uniform { lo: 3, hi: 6 },
            user_tokens: Dist::Fixed(100),
            output_tokens: Dist::Fixed(128),
            think_time: Duration::from_secs(2),
        }
    }
}

/// One session's draws.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDraw {
    /// Index of its system prompt (`0..system_prompts`).
    pub system_prompt: usize,
    /// One entry per turn, in order.
    pub turns: Vec<TurnDraw>,
}

/// One turn's draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnDraw {
    /// How long to wait after the previous turn's reply (zero for the first turn).
    pub think: Duration,
    /// Words of the user message.
    pub user_words: u32,
    /// `max_tokens` of the turn.
    pub max_tokens: u32,
}

impl SessionWorkload {
    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.system_prompts == 0 {
            return Err(bad(
                "system_prompts=0",
                "sessions need at least one system prompt",
            ));
        }
        Ok(())
    }

    /// The run's system prompts, `system_prompts` of them (see the module docs).
    pub fn system_prompt_texts(&self, seed: u64) -> Vec<String> {
        (0..self.system_prompts)
            .map(|k| {
                let words = self
                    .system_tokens
                    .sample(&mut request_rng(seed ^ SYSTEM_SALT, u64::from(k)));
                words_text(format!("s{seed}p{k}"), words)
            })
            .collect()
    }

    /// Session `session`'s draws in a run seeded with `seed`.
    pub fn draw(&self, seed: u64, session: u64) -> SessionDraw {
        let mut rng = request_rng(seed ^ SESSION_SALT, session);
        let system_prompt = rng.gen_range(0..self.system_prompts.max(1)) as usize;
        let turns = self.turns.sample(&mut rng);
        // An exponential with the given mean; `None` for a zero (or unusable) mean: no wait.
        let think = Exp::new(1.0 / self.think_time.as_secs_f64())
            .ok()
            .filter(|_| !self.think_time.is_zero());
        let turns = (0..turns)
            .map(|i| {
                let user_words = self.user_tokens.sample(&mut rng);
                let max_tokens = self.output_tokens.sample(&mut rng);
                let wait = match &think {
                    Some(exp) if i > 0 => exp.sample(&mut rng),
                    _ => 0.0,
                };
                TurnDraw {
                    think: Duration::try_from_secs_f64(wait).unwrap_or(Duration::ZERO),
                    user_words,
                    max_tokens,
                }
            })
            .collect();
        SessionDraw {
            system_prompt,
            turns,
        }
    }
}

/// The user message of turn `turn` (from 1) of session `session`: `words` words, the first one
/// unique to the session and turn.
pub fn user_text(session: u64, turn: u32, words: u32) -> String {
    words_text(format!("u{session}t{turn}"), words)
}

/// `first`, then `w`s up to `words` words in all (at least the first).
fn words_text(mut first: String, words: u32) -> String {
    first.reserve(2 * words as usize);
    for _ in 1..words {
        first.push_str(" w");
    }
    first
}

impl fmt::Display for SessionWorkload {
    /// One line, e.g. `sessions:system_prompts=4:system=fixed:1000:turns=uniform:3-6:user=fixed:100:output=fixed:128:think=2s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sessions:system_prompts={}:system={}:turns={}:user={}:output={}:think={}",
            self.system_prompts,
            self.system_tokens,
            self.turns,
            self.user_tokens,
            self.output_tokens,
            humantime::format_duration(self.think_time)
        )
    }
}

/// A [`Dist`] in JSON as its `--workload` text (`"uniform:3-6"`).
mod dist_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Dist;

    pub fn serialize<S: Serializer>(d: &Dist, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(d)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dist, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A [`Duration`] in JSON as seconds, like every time in the report.
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
