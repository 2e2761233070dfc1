use std::collections::BTreeSet;

use super::*;

fn workload() -> SessionWorkload {
    SessionWorkload {
        system_prompts: 3,
        system_tokens: Dist::Uniform { lo: 20, hi: 40 },
        turns: Dist::Uniform { lo: 1, hi: 9 },
        user_tokens: Dist::Fixed(5),
        output_tokens: Dist::Uniform { lo: 2, hi: 4 },
        think_time: Duration::from_millis(500),
    }
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

#[test]
fn sessions_draw_from_exactly_k_distinct_system_prompts() {
    let w = workload();
    let texts = w.system_prompt_texts(7);
    assert_eq!(texts.len(), 3, "one text per system prompt");
    for (k, text) in texts.iter().enumerate() {
        assert!(
            text.starts_with(&format!("s7p{k} ")),
            "prompt {k} opens with its own word: {text:.20}"
        );
        assert!(
            (20..=40).contains(&words(text)),
            "prompt {k} has system_tokens words, got {}",
            words(text)
        );
    }
    let drawn: BTreeSet<&str> = (0..300)
        .map(|s| texts[w.draw(7, s).system_prompt].as_str())
        .collect();
    assert_eq!(
        drawn.len(),
        3,
        "300 sessions use exactly the K = 3 distinct texts"
    );
    let mut counts = [0u32; 3];
    for s in 0..3000 {
        counts[w.draw(7, s).system_prompt] += 1;
    }
    assert!(
        counts.iter().all(|&c| (850..=1150).contains(&c)),
        "uniform over the K prompts: {counts:?}"
    );
    assert_eq!(
        texts,
        w.system_prompt_texts(7),
        "the same seed gives the same prompts"
    );
    assert_ne!(
        texts[0],
        w.system_prompt_texts(8)[0],
        "another seed gives other prompts (no cache shared across seeds)"
    );
}

#[test]
fn think_time_is_exponential_with_the_given_mean() {
    let w = workload();
    let mut gaps = Vec::new();
    for s in 0..4000 {
        let d = w.draw(1, s);
        assert_eq!(
            d.turns.first().map(|t| t.think),
            (!d.turns.is_empty()).then_some(Duration::ZERO),
            "no think time before the first turn"
        );
        gaps.extend(d.turns.iter().skip(1).map(|t| t.think.as_secs_f64()));
    }
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert!(n > 10_000.0, "enough draws: {n}");
    assert!(
        (mean - 0.5).abs() < 0.02,
        "mean think time {mean:.4} s within 4% of 0.5 s"
    );
    assert!(
        (sd / mean - 1.0).abs() < 0.05,
        "exponential: the standard deviation equals the mean (CV {:.3})",
        sd / mean
    );
    let none = SessionWorkload {
        think_time: Duration::ZERO,
        ..workload()
    };
    assert!(
        (0..100)
            .flat_map(|s| none.draw(1, s).turns)
            .all(|t| t.think.is_zero()),
        "a zero think time never waits"
    );
}

#[test]
fn draws_follow_the_distributions_and_the_seed() {
    let w = workload();
    for s in 0..200 {
        let d = w.draw(3, s);
        assert!((1..=9).contains(&d.turns.len()), "turns in 1..=9");
        assert!(
            d.turns
                .iter()
                .all(|t| t.user_words == 5 && (2..=4).contains(&t.max_tokens)),
            "user and output lengths from their distributions: {d:?}"
        );
        assert_eq!(
            d,
            w.draw(3, s),
            "a session's draws depend only on seed and session"
        );
    }
    let lengths: BTreeSet<usize> = (0..200).map(|s| w.draw(3, s).turns.len()).collect();
    assert_eq!(lengths.len(), 9, "every turn count of uniform:1-9 occurs");
}

#[test]
fn user_texts_are_unique_per_session_and_turn() {
    assert_eq!(user_text(12, 3, 4), "u12t3 w w w", "first word, then w's");
    assert_eq!(user_text(12, 3, 1), "u12t3", "one word");
    assert_eq!(user_text(12, 3, 0), "u12t3", "never empty");
    assert_ne!(
        user_text(1, 12, 3),
        user_text(11, 2, 3),
        "session and turn cannot run together"
    );
}

#[test]
fn json_and_text_forms() {
    let w = SessionWorkload::default();
    assert_eq!(
        w.to_string(),
        "sessions:system_prompts=4:system=fixed:1000:turns=uniform:3-6:user=fixed:100:output=fixed:128:think=2s",
        "canonical text"
    );
    let v = serde_json::to_value(&w).expect("serializes");
    assert_eq!(v["turns"], "uniform:3-6", "distributions as their text");
    assert_eq!(v["think_time_s"], 2.0, "think time in seconds");
    let back: SessionWorkload = serde_json::from_value(v).expect("deserializes");
    assert_eq!(back, w, "round trip");
    let zero = SessionWorkload {
        system_prompts: 0,
        ..w
    };
    assert!(zero.validate().is_err(), "K = 0 is refused");
}
