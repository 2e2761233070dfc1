use super::*;
use crate::testbed::bench::client::{request_body, Destination};
use crate::testbed::bench::workload::session::user_text;
use crate::testbed::bench::Endpoint;

fn target(endpoint: Endpoint) -> Destination {
    Destination {
        uri: "http://127.0.0.1:1/v1/x".parse().expect("uri"),
        endpoint,
        model: "m".into(),
    }
}

/// The bodies of a three-turn session whose replies were `replies`.
fn bodies(endpoint: Endpoint, replies: &[&str]) -> Vec<serde_json::Value> {
    let mut conv = Conversation::new("s0p1 w w w".into());
    let mut out = Vec::new();
    for (i, reply) in replies.iter().enumerate() {
        let turn = i as u32 + 1;
        conv.ask(user_text(5, turn, 3));
        out.push(request_body(
            &target(endpoint),
            &conv.request(turn.into(), 4, None),
        ));
        conv.answer((*reply).to_string());
    }
    out
}

#[test]
fn each_turn_resends_the_previous_turn_then_the_reply_then_a_new_question() {
    let replies = [" tok0 tok1 tok2 tok3", " tok0 tok1, \"quoted\"", " tok0"];
    let bodies = bodies(Endpoint::Chat, &replies);
    let messages: Vec<Vec<Message>> = bodies
        .iter()
        .map(|b| serde_json::from_value(b["messages"].clone()).expect("messages parse"))
        .collect();
    assert_eq!(
        messages[0],
        [
            Message {
                role: Role::System,
                content: "s0p1 w w w".into()
            },
            Message {
                role: Role::User,
                content: "u5t1 w w".into()
            }
        ],
        "turn 1 is [system, user1]"
    );
    for k in 0..2 {
        let (this, next) = (&messages[k], &messages[k + 1]);
        assert_eq!(
            next.len(),
            this.len() + 2,
            "turn {} adds two messages",
            k + 2
        );
        assert_eq!(
            next[..this.len()],
            this[..],
            "turn {} starts with turn {}'s messages",
            k + 2,
            k + 1
        );
        assert_eq!(
            next[this.len()],
            Message {
                role: Role::Assistant,
                content: replies[k].into()
            },
            "then the reply exactly as received"
        );
        assert_eq!(
            next[this.len() + 1],
            Message {
                role: Role::User,
                content: user_text(5, k as u32 + 2, 3)
            },
            "then the new user message"
        );
        // Byte level: the earlier array without its closing bracket opens the later one.
        let (a, b) = (
            serde_json::to_string(&bodies[k]["messages"]).expect("json"),
            serde_json::to_string(&bodies[k + 1]["messages"]).expect("json"),
        );
        let open = a.strip_suffix(']').expect("an array");
        assert!(
            b.starts_with(open) && b[open.len()..].starts_with(','),
            "turn {}'s serialized messages extend turn {}'s:\n{a}\n{b}",
            k + 2,
            k + 1
        );
    }
}

#[test]
fn completions_prompts_grow_the_same_way() {
    let replies = [" tok0 tok1", " tok0 tok1 tok2", " tok0"];
    let bodies = bodies(Endpoint::Completions, &replies);
    let prompts: Vec<&str> = bodies
        .iter()
        .map(|b| b["prompt"].as_str().expect("a text prompt"))
        .collect();
    assert_eq!(prompts[0], "s0p1 w w w\nu5t1 w w", "system, then user 1");
    assert_eq!(
        prompts[1], "s0p1 w w w\nu5t1 w w\n tok0 tok1\nu5t2 w w",
        "then the reply and user 2, newline-separated"
    );
    assert_eq!(
        prompts[2],
        format!("{}\n tok0 tok1 tok2\nu5t3 w w", prompts[1]),
        "each prompt extends the previous one with its reply and the next question"
    );
}

#[test]
fn the_request_carries_the_words_and_the_header() {
    let mut conv = Conversation::new("s0p0 w w".into());
    conv.ask("u0t1 w".into());
    conv.answer(" tok0 tok1".into());
    conv.ask("u0t2 w w w".into());
    assert_eq!(conv.words(), 3 + 2 + 2 + 4, "every message's words");
    let header = (
        HeaderName::from_static("x-session-id"),
        HeaderValue::from(7u64),
    );
    let plan = conv.request(9, 16, Some(header.clone()));
    assert_eq!(
        (plan.index, plan.prompt_words, plan.max_tokens),
        (9, 11, 16),
        "index, words and max_tokens"
    );
    assert_eq!(plan.header, Some(header), "the session header");
    assert_eq!(
        plan.prompt,
        Prompt::Messages(conv.messages().to_vec()),
        "every message so far"
    );
}
