//! Ordered routing rules: the first rule whose conditions all hold picks the pool.
//!
//! Conditions: `min_prompt_tokens` (the estimate), `model`, `path` (exact, or prefix with a
//! trailing `*`). A rule without conditions matches everything; a request no rule matches goes to
//! the first pool. The plan for a request lists its pool, then its fallbacks in order: the rule's
//! `fallback` if given, else the pools of the later rules that also match.
use super::RouteError;
use crate::config::RuleConfig;
use crate::route::record::RoutePlan;

/// What rules look at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleInput<'a> {
    pub path: &'a str,
    pub model: Option<&'a str>,
    pub prompt_tokens: u64,
}

/// The compiled rules.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    pool: usize,
    min_prompt_tokens: Option<u64>,
    model: Option<Pattern>,
    path: Option<Pattern>,
    fallback: Option<usize>,
    spill_queue_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    Prefix(String),
}

impl Pattern {
    fn new(text: &str) -> Self {
        match text.strip_suffix('*') {
            Some(prefix) => Pattern::Prefix(prefix.to_owned()),
            None => Pattern::Exact(text.to_owned()),
        }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Pattern::Exact(exact) => value == exact,
            Pattern::Prefix(prefix) => value.starts_with(prefix.as_str()),
        }
    }
}

impl Rules {
    /// Compiles `rules` against the pool names (in router order).
    pub fn new(rules: &[RuleConfig], pools: &[&str]) -> Result<Self, RouteError> {
        let index = |i: usize, name: &str| {
            pools
                .iter()
                .position(|p| *p == name)
                .ok_or_else(|| RouteError::UnknownPool {
                    index: i,
                    pool: name.to_owned(),
                })
        };
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                Ok(Rule {
                    pool: index(i, &rule.pool)?,
                    min_prompt_tokens: rule.min_prompt_tokens,
                    model: rule.model.as_deref().map(Pattern::new),
                    path: rule.path.as_deref().map(Pattern::new),
                    fallback: rule.fallback.as_deref().map(|f| index(i, f)).transpose()?,
                    spill_queue_tokens: rule.spill_queue_tokens,
                })
            })
            .collect::<Result<Vec<_>, RouteError>>()?;
        Ok(Self { rules })
    }

    /// The candidate pools for a request.
    pub(crate) fn pools_for(&self, input: RuleInput<'_>) -> RoutePlan {
        let mut matching = self.rules.iter().filter(|rule| rule.matches(input));
        let Some(first) = matching.next() else {
            return RoutePlan {
                pools: vec![0],
                spill_queue_tokens: None,
            };
        };
        let mut pools = vec![first.pool];
        let mut push = |pool: usize| {
            if !pools.contains(&pool) {
                pools.push(pool);
            }
        };
        match first.fallback {
            Some(fallback) => push(fallback),
            None => matching.for_each(|rule| push(rule.pool)),
        }
        RoutePlan {
            pools,
            spill_queue_tokens: first.spill_queue_tokens,
        }
    }
}

impl Rule {
    fn matches(&self, input: RuleInput<'_>) -> bool {
        self.min_prompt_tokens
            .map_or(true, |min| input.prompt_tokens >= min)
            && self
                .model
                .as_ref()
                .map_or(true, |p| input.model.is_some_and(|m| p.matches(m)))
            && self.path.as_ref().map_or(true, |p| p.matches(input.path))
    }
}

#[cfg(test)]
mod tests;
