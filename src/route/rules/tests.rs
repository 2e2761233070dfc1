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
        rules.pools_for(input(2047, None)).pools,
        vec![1],
        "short: decode only"
    );
    assert_eq!(
        rules.pools_for(input(2048, None)).pools,
        vec![0, 1],
        "at the threshold: prefill, falling back to the next matching rule's decode"
    );
    assert_eq!(rules.pools_for(input(9000, None)).pools, vec![0, 1], "long");
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
            .pools_for(input(10, Some("meta-llama/Llama-3.1-70B-Instruct")))
            .pools[0],
        2,
        "model prefix"
    );
    assert_eq!(
        rules
            .pools_for(input(10, Some("meta-llama/Llama-3.1-8B")))
            .pools,
        vec![1],
        "other model, chat path: catch-all"
    );
    assert_eq!(
        rules.pools_for(input(10, None)).pools,
        vec![1],
        "a model rule never matches a request without a model"
    );
    let completions = RuleInput {
        path: "/v1/completions",
        model: None,
        prompt_tokens: 10,
    };
    assert_eq!(rules.pools_for(completions).pools, vec![0, 1], "exact path");
    let not_exact = RuleInput {
        path: "/v1/completions/x",
        ..completions
    };
    assert_eq!(
        rules.pools_for(not_exact).pools,
        vec![1],
        "exact means exact"
    );
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
        rules.pools_for(input(100, None)),
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
        only_long.pools_for(input(5, None)).pools,
        vec![0],
        "no rule matches: the first pool"
    );
    assert_eq!(
        Rules::new(&[], &POOLS)
            .expect("no rules")
            .pools_for(input(1, None))
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
