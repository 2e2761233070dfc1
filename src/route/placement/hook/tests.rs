use std::time::Duration;

use super::{met, own_prefill};
use crate::config::SloTargets;
use crate::meter::record::Figures;
use crate::route::backend::predict::{Ask, Load, Outcome};
use crate::route::backend::Backend;
use crate::upstream::Target;

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn targets() -> SloTargets {
    SloTargets {
        ttft: ms(800),
        tpot: ms(35),
        max_gap: None,
    }
}

fn figures(ttft: u64, tpot: u64) -> Figures {
    Figures {
        e2e: ms(ttft + 99 * tpot),
        ttft: Some(ms(ttft)),
        tpot: Some(ms(tpot)),
        max_gap: Some(ms(tpot)),
        output_tokens: 100,
        exact_output: true,
        input_tokens: Some(500),
        cached_input_tokens: None,
    }
}

#[test]
fn a_chat_is_judged_by_its_ttft_and_a_document_whose_own_prefill_misses_it_by_its_tpot_alone() {
    let (short, long) = (ms(100), ms(900));
    assert_eq!(met(&figures(700, 30), targets(), short), Some(true));
    assert_eq!(met(&figures(1_500, 30), targets(), short), Some(false));
    assert_eq!(met(&figures(700, 40), targets(), short), Some(false));
    assert_eq!(met(&figures(1_500, 30), targets(), long), Some(true));
    assert_eq!(met(&figures(1_500, 40), targets(), long), Some(false));
    let no_token = Figures {
        ttft: None,
        ..figures(0, 0)
    };
    assert_eq!(met(&no_token, targets(), short), None, "nothing to judge");
}

#[test]
fn a_gap_past_its_target_is_not_judged_for_the_capacity() {
    let with_gap = SloTargets {
        max_gap: Some(ms(250)),
        ..targets()
    };
    let stalled = Figures {
        max_gap: Some(ms(700)),
        ..figures(300, 30)
    };
    assert_eq!(met(&stalled, with_gap, ms(100)), Some(true));
    // What the capacity answers for still counts with a gap target set.
    assert_eq!(met(&figures(1_500, 30), with_gap, ms(100)), Some(false));
    assert_eq!(met(&figures(300, 40), with_gap, ms(100)), Some(false));
}

#[test]
fn the_own_prefill_is_the_learned_cost_per_token_not_the_queueing_the_fixed_part_took_in() {
    let backend = Backend::new(
        Target::from_url("http://127.0.0.1:1").expect("a target"),
        "p".into(),
        None,
    );
    let chat = Ask {
        prompt_tokens: 500,
        cached_tokens: 0,
    };
    let document = Ask {
        prompt_tokens: 20_000,
        cached_tokens: 0,
    };
    // An overloaded backend: every request, whatever its prompt, waited about 2 s before its
    // prefill, which took 0.1 ms a token; its model's fixed part learns the wait.
    for k in 0..200u64 {
        let prompt_tokens = 200 + (k % 20) * 1_000;
        let ask = Ask {
            prompt_tokens,
            cached_tokens: 0,
        };
        let ttft = ms(2_000) + Duration::from_micros(prompt_tokens * 100);
        let outcome = Outcome {
            ttft,
            tpot: Some(ms(30)),
        };
        backend.learn(64, Load::default(), ask, outcome);
    }
    let alone = backend.predict(Load::default(), chat).alone;
    assert!(
        alone > ms(800),
        "the fixed part took in the wait: {alone:?}"
    );
    let chat_prefill = own_prefill(Some(&backend), chat);
    assert!(chat_prefill < ms(100), "{chat_prefill:?}");
    let document_prefill = own_prefill(Some(&backend), document);
    assert!(
        document_prefill > ms(1_800) && document_prefill < ms(2_200),
        "{document_prefill:?}"
    );
    let unknown = own_prefill(None, document);
    assert!(unknown > ms(800), "the priors' rate: {unknown:?}");
}
