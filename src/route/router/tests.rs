use super::*;
use crate::config::{BalanceLoad, PoolConfig, RuleConfig};
use crate::route::backend::LoadGuard;
use crate::route::health::Fault;
use crate::route::rules::RuleInput;

/// Two pools: prompts of 2048 tokens and more go to `prefill` (spilling past 10 000 queued tokens),
/// the rest to `decode`.
fn config() -> Config {
    let pools = vec![
        PoolConfig {
            name: "prefill".to_owned(),
            urls: vec!["http://127.0.0.1:8101".to_owned()],
            balance: BalanceLoad::PromptTokens,
            ..PoolConfig::default()
        },
        PoolConfig {
            name: "decode".to_owned(),
            urls: vec!["http://127.0.0.1:8102".to_owned()],
            ..PoolConfig::default()
        },
    ];
    let rules = vec![
        RuleConfig {
            pool: "prefill".to_owned(),
            min_prompt_tokens: Some(2048),
            spill_queue_tokens: Some(10_000),
            ..RuleConfig::default()
        },
        RuleConfig {
            pool: "decode".to_owned(),
            ..RuleConfig::default()
        },
    ];
    Config {
        pools,
        rules,
        ..Config::default()
    }
}

fn router(edit: impl FnOnce(&mut Config)) -> Router {
    let mut config = config();
    edit(&mut config);
    config.validate().expect("valid config");
    let metrics = Arc::new(Metrics::new(&config).expect("metrics"));
    Router::from_config(&config, metrics).expect("router")
}

fn long_plan(router: &Router) -> RoutePlan {
    router.rules.pools_for(RuleInput {
        path: "/v1/chat/completions",
        model: None,
        prompt_tokens: 4000,
    })
}

/// Fails the backend of pool `pool` until it is ejected, and returns it.
fn eject(router: &Router, pool: usize) -> Arc<Backend> {
    let backend = Arc::clone(&router.pools[pool].backends()[0]);
    for _ in 0..router.settings.policy.after {
        backend.on_failure(Instant::now(), &router.settings.policy, Fault::Connection);
    }
    backend
}

fn picked(router: &Router, plan: &RoutePlan) -> Option<(String, &'static str)> {
    router
        .pick(
            plan,
            &Default::default(),
            Default::default(),
            &[],
            Instant::now(),
        )
        .map(|pick| (router.pools[pick.pool].name.to_string(), pick.reason))
}

// On paused time: each ejection lasts `eject_base` (1 s) of the clock, which a loaded machine could
// let pass before the last pick, which needs both pools still ejected.
#[tokio::test(start_paused = true)]
async fn falls_back_when_the_pool_has_no_healthy_backend() {
    let router = router(|_| {});
    let plan = long_plan(&router);
    assert_eq!(
        picked(&router, &plan),
        Some(("prefill".to_owned(), "rule")),
        "a long prompt goes to prefill"
    );
    eject(&router, 0);
    assert_eq!(
        picked(&router, &plan),
        Some(("decode".to_owned(), "fallback")),
        "prefill ejected: the next matching rule's pool"
    );
    let strict = self::router(|c| c.routing.fallback = false);
    eject(&strict, 0);
    assert_eq!(
        picked(&strict, &long_plan(&strict)),
        Some(("prefill".to_owned(), "panic")),
        "fallback disabled: the rule's pool, whatever its health (panic mode)"
    );
    eject(&router, 1);
    assert_eq!(
        picked(&router, &plan),
        Some(("prefill".to_owned(), "panic")),
        "every pool ejected: the first pool of the plan, in panic mode"
    );
}

#[test]
fn spills_when_the_prefill_queue_is_deeper_than_the_threshold() {
    let router = router(|_| {});
    let plan = long_plan(&router);
    let prefill = Arc::clone(&router.pools[0].backends()[0]);
    let _queued = LoadGuard::new(Arc::clone(&prefill), 10_000);
    assert_eq!(
        picked(&router, &plan),
        Some(("prefill".to_owned(), "rule")),
        "10 000 queued tokens is not more than the threshold"
    );
    let _more = LoadGuard::new(prefill, 1);
    assert_eq!(
        picked(&router, &plan),
        Some(("decode".to_owned(), "spill")),
        "10 001 queued tokens spill to decode"
    );
}

// On paused time: the ejection lasts `eject_base` (1 s) of the clock, which a loaded machine could
// let pass between the failures and the checks that it holds.
#[tokio::test(start_paused = true)]
async fn a_reload_keeps_what_the_router_learned_about_backends_that_stay() {
    let before = router(|_| {});
    let plan = long_plan(&before);
    let prefill = eject(&before, 0);
    let _in_flight = LoadGuard::new(Arc::clone(&before.pools[1].backends()[0]), 0);

    // A decode backend added, and the spill dropped.
    let mut config = config();
    config.pools[1]
        .urls
        .push("http://127.0.0.1:8103".to_owned());
    config.rules[0].spill_queue_tokens = None;
    config.validate().expect("valid config");
    let after = before.reloaded(&config).expect("reloads");
    assert!(
        Arc::ptr_eq(&after.pools[0].backends()[0], &prefill),
        "the prefill backend stays the same backend"
    );
    assert!(
        !after.pools[0].backends()[0].available(Instant::now()),
        "and stays ejected"
    );
    assert_eq!(
        after.pools[1].backends()[0].streams(),
        1,
        "a decode backend that stays keeps its streams in flight"
    );
    assert_eq!(after.pools[1].backends().len(), 2, "the added backend");
    assert_eq!(
        picked(&after, &plan),
        Some(("decode".to_owned(), "fallback")),
        "the reloaded router routes around the ejected backend at once"
    );
    assert!(
        Arc::ptr_eq(after.calibrator(), before.calibrator()),
        "unchanged priors keep the calibration"
    );
    config.routing.prior_tokens_per_byte = 0.3;
    let recalibrated = before.reloaded(&config).expect("reloads");
    assert!(
        !Arc::ptr_eq(recalibrated.calibrator(), before.calibrator()),
        "a new prior starts a new calibration"
    );
}

/// The headroom signal of pool `decode` (placed by `slo`).
fn headroom(router: &Router) -> &crate::route::placement::headroom::Headroom {
    router.pools[1]
        .placement
        .as_ref()
        .and_then(|placement| placement.slo.headroom())
        .expect("an slo pool has a headroom")
}

#[tokio::test(start_paused = true)]
async fn a_reload_keeps_an_slo_pools_headroom_while_its_settings_and_targets_stay() {
    let slo = |config: &mut Config| config.pools[1].balance = BalanceLoad::Slo;
    let before = router(slo);
    // A decode replica added, as an autoscaler's reload adds one: the same signal, and only the
    // new pool's watcher ticks it.
    let mut config = config();
    slo(&mut config);
    config.pools[1]
        .urls
        .push("http://127.0.0.1:8103".to_owned());
    config.validate().expect("valid config");
    let claimed = headroom(&before).claimed();
    let after = before.reloaded(&config).expect("reloads");
    assert!(std::ptr::eq(headroom(&after), headroom(&before)));
    assert_eq!(headroom(&after).claimed(), claimed + 1);
    // Other autoscale settings, or other targets: a new signal.
    let mut tuned = config.clone();
    tuned.pools[1].autoscale = Some(crate::config::AutoscaleConfig {
        headroom: 1.5,
        ..Default::default()
    });
    let retuned = after.reloaded(&tuned).expect("reloads");
    assert!(!std::ptr::eq(headroom(&retuned), headroom(&after)));
    let mut stricter = config.clone();
    stricter.slo.ttft = std::time::Duration::from_millis(500);
    let retargeted = after.reloaded(&stricter).expect("reloads");
    assert!(!std::ptr::eq(headroom(&retargeted), headroom(&after)));
}
