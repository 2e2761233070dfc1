//! Ordered routing rules: the first rule whose conditions all hold picks the pool.
//!
//! Conditions: `min_prompt_tokens` (the estimate), `model`, `path` (exact, or prefix with a
//! trailing `*`). A rule without conditions matches everything; a request no rule matches goes to
//! the first pool. The plan for a request lists its pool, then its fallbacks in order: the rule's
//! `fallback` if given, else the pools of the later rules that also match.
use super::RouteError;
use crate::config::RuleConfig;
use crate::context::RoutePlan;

/// What rules look at.
#[derive(Debug, Clone, Copy)]
pub struct RuleInput<'a> {
    pub path: &'a str,
    pub model: Option<&'a str>,
    pub prompt_tokens: u64,
}

/// The compiled rules.
#[derive(Debug, Clone)]
pub struct Rules {
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
    pub fn plan(&self, input: RuleInput<'_>) -> RoutePlan {
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
mod tests {
    use super::*;

    const POOLS: [&str; 3] = ["prefill", "decode", "big"];

    fn rule(pool: &str) -> RuleConfig {
        RuleConfig {
            pool: pool.to_owned(),
            ..RuleConfig::default()
        }
    }

    fn input(prompt_tokens: u64, model: Option<&'static str>) -> RuleInput<'static> {
        RuleInput {
            path: "/v1/chat/completions",
            model,
            prompt_tokens,
        }
    }

    fn split() -> Rules {
        let long = RuleConfig {
            min_prompt_tokens: Some(2048),
            ..rule("prefill")
        };
        Rules::new(&[long, rule("decode")], &POOLS).expect("valid rules")
    }

    #[test]
    fn prompt_length_threshold_is_inclusive() {
        let rules = split();
        assert_eq!(
            rules.plan(input(2047, None)).pools,
            vec![1],
            "short: decode only"
        );
        assert_eq!(
            rules.plan(input(2048, None)).pools,
            vec![0, 1],
            "at the threshold: prefill, falling back to the next matching rule's decode"
        );
        assert_eq!(rules.plan(input(9000, None)).pools, vec![0, 1], "long");
    }

    #[test]
    fn model_and_path_patterns() {
        let by_model = RuleConfig {
            model: Some("meta-llama/Llama-3.1-70B*".to_owned()),
            ..rule("big")
        };
        let by_path = RuleConfig {
            path: Some("/v1/completions".to_owned()),
            ..rule("prefill")
        };
        let rules = Rules::new(&[by_model, by_path, rule("decode")], &POOLS).expect("valid rules");
        assert_eq!(
            rules
                .plan(input(10, Some("meta-llama/Llama-3.1-70B-Instruct")))
                .pools[0],
            2,
            "model prefix"
        );
        assert_eq!(
            rules.plan(input(10, Some("meta-llama/Llama-3.1-8B"))).pools,
            vec![1],
            "other model, chat path: catch-all"
        );
        assert_eq!(
            rules.plan(input(10, None)).pools,
            vec![1],
            "a model rule never matches a request without a model"
        );
        let completions = RuleInput {
            path: "/v1/completions",
            model: None,
            prompt_tokens: 10,
        };
        assert_eq!(rules.plan(completions).pools, vec![0, 1], "exact path");
        let not_exact = RuleInput {
            path: "/v1/completions/x",
            ..completions
        };
        assert_eq!(rules.plan(not_exact).pools, vec![1], "exact means exact");
    }

    #[test]
    fn explicit_fallback_and_no_match() {
        let long = RuleConfig {
            min_prompt_tokens: Some(100),
            fallback: Some("big".to_owned()),
            spill_queue_tokens: Some(5000),
            ..rule("prefill")
        };
        let rules = Rules::new(&[long, rule("decode")], &POOLS).expect("valid rules");
        assert_eq!(
            rules.plan(input(100, None)),
            RoutePlan {
                pools: vec![0, 2],
                spill_queue_tokens: Some(5000)
            },
            "the rule's own fallback replaces the later rules"
        );
        let only_long = Rules::new(
            &[RuleConfig {
                min_prompt_tokens: Some(100),
                ..rule("decode")
            }],
            &POOLS,
        )
        .expect("valid rules");
        assert_eq!(
            only_long.plan(input(5, None)).pools,
            vec![0],
            "no rule matches: the first pool"
        );
        assert_eq!(
            Rules::new(&[], &POOLS)
                .expect("no rules")
                .plan(input(1, None))
                .pools,
            vec![0],
            "no rules at all: the first pool"
        );
    }

    #[test]
    fn unknown_pools_are_errors() {
        let err = Rules::new(&[rule("nope")], &POOLS).expect_err("unknown pool");
        assert!(err.to_string().contains("nope"), "names the pool: {err}");
    }
}
