//! Workloads: the distributions of prompt and output lengths, and mixes of request classes.
//!
//! Long on purpose: one grammar (the workload syntax) and its parser.
//!
//! Syntax (also in `tokenmeter bench --help`):
//! - a length distribution `DIST` is `fixed:N` (or just `N`), `uniform:A-B` (inclusive), or
//!   `lognormal:MEDIAN,SIGMA[,MAX]` (rounded and clamped to `1..=MAX`; MAX defaults to
//!   `MEDIAN * e^(3 SIGMA)`, the 99.9th percentile, so one sample cannot stall a whole run);
//! - a class is `NAME:WEIGHT:prompt=DIST:output=DIST`, optionally with `:header=NAME=VALUE`: one
//!   request header its requests carry (a tenant, a priority), the VALUE without `:`, `;`, `,`
//!   or spaces;
//! - a mix is classes separated by `;` or `,` (a `,` only separates when a `NAME:` follows, so
//!   `lognormal:500,1.0` stays one distribution). Weights are relative.
//!
//! Sampling is reproducible per request: request `i` of a run with seed `s` draws from its own
//! RNG seeded by `(s, i)`, so the same request gets the same lengths whatever the scheduling.
//!
//! Multi-turn conversations have their own description in [`session`].
use std::fmt;
use std::str::FromStr;

use http::header::{HeaderName, HeaderValue};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};

pub mod session;

/// A workload description that does not parse; `part` is the offending piece of text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workload: {part:?}: {reason}")]
pub struct WorkloadError {
    pub part: String,
    pub reason: String,
}

fn bad(part: &str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError {
        part: part.to_string(),
        reason: reason.into(),
    }
}

/// A distribution of token counts (always >= 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    Fixed(u32),
    /// Inclusive bounds.
    Uniform {
        lo: u32,
        hi: u32,
    },
    LogNormal {
        median: f64,
        sigma: f64,
        max: u32,
    },
}

impl Dist {
    /// Draws one length.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        match *self {
            Dist::Fixed(n) => n,
            Dist::Uniform { lo, hi } => rng.gen_range(lo..=hi),
            Dist::LogNormal { median, sigma, max } => match LogNormal::new(median.ln(), sigma) {
                Ok(d) => d.sample(rng).round().clamp(1.0, f64::from(max)) as u32,
                // Parsing guarantees valid parameters; the median is the sane fallback.
                Err(_) => median.round().clamp(1.0, f64::from(max)) as u32,
            },
        }
    }

    /// The mean length (lognormal: of the unclamped distribution), for planning and labels.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Fixed(n) => f64::from(n),
            Dist::Uniform { lo, hi } => (f64::from(lo) + f64::from(hi)) / 2.0,
            Dist::LogNormal { median, sigma, .. } => median * (sigma * sigma / 2.0).exp(),
        }
    }
}

fn parse_count(part: &str, s: &str) -> Result<u32, WorkloadError> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| bad(part, format!("{s:?} is not a whole number")))?;
    if n == 0 {
        return Err(bad(part, "lengths must be at least 1"));
    }
    Ok(n)
}

impl FromStr for Dist {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let Some((kind, args)) = s.split_once(':') else {
            return parse_count(s, s).map(Dist::Fixed);
        };
        match kind {
            "fixed" => parse_count(s, args).map(Dist::Fixed),
            "uniform" => {
                let (a, b) = args
                    .split_once('-')
                    .ok_or_else(|| bad(s, "expected uniform:A-B"))?;
                let (lo, hi) = (parse_count(s, a)?, parse_count(s, b)?);
                if lo > hi {
                    return Err(bad(s, format!("lower bound {lo} exceeds upper bound {hi}")));
                }
                Ok(Dist::Uniform { lo, hi })
            }
            "lognormal" => {
                let mut it = args.split(',');
                let (Some(m), Some(sg)) = (it.next(), it.next()) else {
                    return Err(bad(s, "expected lognormal:MEDIAN,SIGMA[,MAX]"));
                };
                let median = f64::from(parse_count(s, m)?);
                let sigma: f64 = sg
                    .trim()
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| bad(s, format!("sigma {sg:?} is not a number >= 0")))?;
                let max = match it.next() {
                    Some(mx) => parse_count(s, mx)?,
                    None => (median * (3.0 * sigma).exp())
                        .ceil()
                        .min(f64::from(u32::MAX)) as u32,
                };
                if it.next().is_some() {
                    return Err(bad(s, "expected lognormal:MEDIAN,SIGMA[,MAX]"));
                }
                if f64::from(max) < median {
                    return Err(bad(s, format!("MAX {max} is below the median {median}")));
                }
                Ok(Dist::LogNormal { median, sigma, max })
            }
            other => Err(bad(
                s,
                format!("unknown distribution {other:?} (fixed, uniform, lognormal)"),
            )),
        }
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dist::Fixed(n) => write!(f, "fixed:{n}"),
            Dist::Uniform { lo, hi } => write!(f, "uniform:{lo}-{hi}"),
            Dist::LogNormal { median, sigma, max } => write!(f, "lognormal:{median},{sigma},{max}"),
        }
    }
}

/// One request class of a mix.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub name: String,
    /// Relative weight (> 0).
    pub weight: f64,
    /// Prompt length in words (one word = one token for the simulated replica).
    pub prompt: Dist,
    /// Output length, sent as `max_tokens` with `ignore_eos`.
    pub output: Dist,
    /// A header every request of the class carries, e.g. `x-tenant-id: acme` for a tenant.
    pub header: Option<(HeaderName, HeaderValue)>,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:prompt={}:output={}",
            self.name, self.weight, self.prompt, self.output
        )?;
        if let Some((name, value)) = &self.header {
            // Parsing admitted only visible ASCII, so the text is the value.
            write!(f, ":header={name}={}", value.to_str().unwrap_or_default())?;
        }
        Ok(())
    }
}

/// A mix of request classes (at least one).
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    classes: Vec<Class>,
}

/// One request's draw from a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Index into [`Workload::classes`].
    pub class: usize,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

impl Workload {
    /// One class named `default`.
    pub fn single(prompt: Dist, output: Dist) -> Self {
        Workload {
            classes: vec![Class {
                name: "default".into(),
                weight: 1.0,
                prompt,
                output,
                header: None,
            }],
        }
    }

    /// A mix from explicit classes; checks weights and names.
    pub fn from_classes(classes: Vec<Class>) -> Result<Self, WorkloadError> {
        if classes.is_empty() {
            return Err(bad("", "a workload needs at least one class"));
        }
        for (i, c) in classes.iter().enumerate() {
            let part = c.to_string();
            if !c
                .name
                .starts_with(|ch: char| ch.is_alphabetic() || ch == '_')
                || !c
                    .name
                    .chars()
                    .all(|ch| ch.is_alphanumeric() || "_-.".contains(ch))
            {
                return Err(bad(
                    &part,
                    "class names start with a letter or '_' and hold letters, digits, '_', '-', '.'",
                ));
            }
            if c.name == "all" {
                return Err(bad(&part, "\"all\" is reserved for the total"));
            }
            if !(c.weight.is_finite() && c.weight > 0.0) {
                return Err(bad(&part, "weight must be a number > 0"));
            }
            if classes[..i].iter().any(|o| o.name == c.name) {
                return Err(bad(&part, format!("class {:?} appears twice", c.name)));
            }
        }
        Ok(Workload { classes })
    }

    pub fn classes(&self) -> &[Class] {
        &self.classes
    }

    /// The class names in order (for reports).
    pub fn class_names(&self) -> Vec<String> {
        self.classes.iter().map(|c| c.name.clone()).collect()
    }

    /// Draws one request's class and lengths.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Sample {
        let total: f64 = self.classes.iter().map(|c| c.weight).sum();
        let mut pick = rng.gen::<f64>() * total;
        let mut class = self.classes.len() - 1;
        for (i, c) in self.classes.iter().enumerate() {
            if pick < c.weight {
                class = i;
                break;
            }
            pick -= c.weight;
        }
        let c = &self.classes[class];
        Sample {
            class,
            prompt_tokens: c.prompt.sample(rng),
            output_tokens: c.output.sample(rng),
        }
    }

    /// Request `index`'s draw for a run seeded with `seed`: independent of scheduling.
    pub fn sample_request(&self, seed: u64, index: u64) -> Sample {
        self.sample(&mut request_rng(seed, index))
    }
}

/// A per-request RNG: splitmix64 of (seed, index) so neighbouring indexes are uncorrelated.
pub(crate) fn request_rng(seed: u64, index: u64) -> StdRng {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.classes.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Splits a mix into class texts: at `;`, and at `,` when a `NAME:` follows (a comma inside
/// `lognormal:500,1.0` is followed by a number, never by a name).
fn split_classes(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, ch) in s.char_indices() {
        let split = match ch {
            ';' => true,
            ',' => starts_with_name(&s[i + 1..]),
            _ => false,
        };
        if split {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

fn starts_with_name(rest: &str) -> bool {
    let rest = rest.trim_start();
    let name_len = rest
        .find(|c: char| !(c.is_alphanumeric() || "_-.".contains(c)))
        .unwrap_or(rest.len());
    name_len > 0
        && rest[name_len..].starts_with(':')
        && rest.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

fn parse_class(text: &str) -> Result<Class, WorkloadError> {
    let t = text.trim();
    let mut it = t.splitn(3, ':');
    let (Some(name), Some(weight), Some(rest)) = (it.next(), it.next(), it.next()) else {
        return Err(bad(t, "expected NAME:WEIGHT:prompt=DIST:output=DIST"));
    };
    let weight: f64 = weight
        .trim()
        .parse()
        .map_err(|_| bad(t, format!("weight {weight:?} is not a number")))?;
    // Keys start a segment with `key=`; the other `:`-segments belong to the previous value.
    let (mut prompt, mut output, mut header) = (None, None, None);
    let mut current: Option<(&str, String)> = None;
    let mut flush = |cur: Option<(&str, String)>| -> Result<(), WorkloadError> {
        let Some((key, value)) = cur else {
            return Ok(());
        };
        if key == "header" {
            if header.replace(parse_header(t, &value)?).is_some() {
                return Err(bad(t, "header= given twice"));
            }
            return Ok(());
        }
        let dist: Dist = value.parse().map_err(|e: WorkloadError| WorkloadError {
            part: format!("{t}: {key}={}", e.part),
            reason: e.reason,
        })?;
        let slot = match key {
            "prompt" => &mut prompt,
            "output" => &mut output,
            other => {
                return Err(bad(
                    t,
                    format!("unknown key {other:?} (prompt, output, header)"),
                ))
            }
        };
        if slot.replace(dist).is_some() {
            return Err(bad(t, format!("{key}= given twice")));
        }
        Ok(())
    };
    for seg in rest.split(':') {
        match seg.split_once('=') {
            Some((key, value)) => {
                flush(current.take())?;
                current = Some((key.trim(), value.to_string()));
            }
            None => match current.as_mut() {
                Some((_, value)) => {
                    value.push(':');
                    value.push_str(seg);
                }
                None => return Err(bad(t, format!("{seg:?} is not key=DIST"))),
            },
        }
    }
    flush(current.take())?;
    let prompt = prompt.ok_or_else(|| bad(t, "missing prompt=DIST"))?;
    let output = output.ok_or_else(|| bad(t, "missing output=DIST"))?;
    Ok(Class {
        name: name.trim().to_string(),
        weight,
        prompt,
        output,
        header,
    })
}

/// A class's `header=NAME=VALUE`. The value may not hold what separates keys and classes (`:`,
/// `;`, `,`), nor spaces, so that the class prints back as it was written.
fn parse_header(class: &str, text: &str) -> Result<(HeaderName, HeaderValue), WorkloadError> {
    let (name, value) = text.split_once('=').ok_or_else(|| {
        bad(
            class,
            format!("header={text:?}: expected header=NAME=VALUE"),
        )
    })?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| bad(class, format!("header {name:?} is not a header name")))?;
    if value.is_empty()
        || !value
            .chars()
            .all(|c| c.is_ascii_graphic() && !":;,".contains(c))
    {
        return Err(bad(
            class,
            format!("header value {value:?}: visible ASCII without ':', ';' or ','"),
        ));
    }
    let value = HeaderValue::from_str(value).map_err(|_| {
        bad(
            class,
            format!("header value {value:?} is not a header value"),
        )
    })?;
    Ok((name, value))
}

impl FromStr for Workload {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let classes = split_classes(s)
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .map(parse_class)
            .collect::<Result<Vec<_>, _>>()?;
        Workload::from_classes(classes)
    }
}

#[cfg(test)]
mod tests;
