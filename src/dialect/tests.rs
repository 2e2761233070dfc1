use super::walk::keys;
use super::{Dialect, EventSummary, Usage};

/// The usage most classifier tests expect: `prompt` and `completion` tokens, no cache or prefill
/// figure.
pub(super) fn usage(prompt: Option<u64>, completion: Option<u64>) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_tokens: None,
        prefill_micros: None,
    })
}

/// A token event of exactly one token (TGI and Ollama say so per event).
pub(super) fn one_token() -> EventSummary {
    EventSummary {
        token: true,
        tokens: Some(1),
        ..EventSummary::default()
    }
}

/// A stream's last event as most dialects send it: `usage` and the end, no output.
pub(super) fn last_event(usage: Option<Usage>) -> EventSummary {
    EventSummary {
        usage,
        done: true,
        ..EventSummary::default()
    }
}

#[test]
fn all_lists_every_dialect_once() {
    // Exhaustive: a new variant does not compile here until it has a slot, and a slot past
    // the end of `ALL`'s length panics.
    let slot = |dialect: Dialect| match dialect {
        Dialect::OpenAiChat => 0,
        Dialect::OpenAiCompletions => 1,
        Dialect::OpenAiResponses => 2,
        Dialect::AnthropicMessages => 3,
        Dialect::Tgi => 4,
        Dialect::Triton => 5,
        Dialect::OllamaChat => 6,
        Dialect::OllamaGenerate => 7,
        Dialect::LlamaCpp => 8,
        Dialect::Unknown => 9,
    };
    let mut seen = [0; Dialect::ALL.len()];
    for dialect in Dialect::ALL {
        seen[slot(dialect)] += 1;
    }
    assert_eq!(seen, [1; Dialect::ALL.len()], "each dialect exactly once");
}

#[test]
fn keys_read_snake_case_names_renames_and_every_other_name_as_other() {
    keys! {
        #[derive(Debug, PartialEq)]
        enum Key { FinishReason, #[serde(rename = "type")] Kind }
    }
    let cases = [
        (
            "finish_reason",
            Key::FinishReason,
            "a variant is its snake_case name",
        ),
        ("type", Key::Kind, "a variant's own rename is kept"),
        (
            "kind",
            Key::Other,
            "a renamed variant no longer answers to its name",
        ),
        ("FinishReason", Key::Other, "any other name is Other"),
    ];
    for (name, want, why) in cases {
        let read: Key = serde_json::from_str(&format!("\"{name}\"")).expect("a key always reads");
        assert_eq!(read, want, "{name:?}: {why}");
    }
}
