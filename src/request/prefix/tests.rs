use super::*;
use proptest::prelude::*;
use serde_json::json;

const BLOCK: usize = 32;

/// `(key, first block, bytes)` of the fixed prompt of `the_names_of_a_fixed_prompt_never_change`.
const GOLDEN: (u64, Option<u64>, u64) = (15927114907788842003, Some(16335858874168460827), 146);

fn named(body: &serde_json::Value) -> PromptPrefix {
    read(body.to_string().as_bytes(), Some("m"), BLOCK, 4).expect("a prompt")
}

fn chat(messages: &[(&str, &str)]) -> serde_json::Value {
    let messages: Vec<_> = messages
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    json!({"model": "m", "messages": messages, "stream": true})
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

const SYSTEM: &str = "You are a careful assistant. Answer in full sentences and cite sources.";

/// A chat whose `turns` follow the shared [`SYSTEM`] prompt.
fn after_system(turns: &[(&str, &str)]) -> serde_json::Value {
    let mut messages = vec![("system", SYSTEM)];
    messages.extend_from_slice(turns);
    chat(&messages)
}

#[test]
fn a_growing_conversation_keeps_every_block_and_its_key() {
    let turn1 = named(&after_system(&[("user", "What is a KV cache?")]));
    let turn2 = named(&after_system(&[
        ("user", "What is a KV cache?"),
        (
            "assistant",
            "The attention keys and values of earlier tokens, kept.",
        ),
        ("user", "And prefix caching?"),
    ]));
    assert!(
        turn1.blocks.len() >= 2,
        "the first turn fills blocks: {turn1:?}"
    );
    assert_eq!(
        turn2.blocks[..turn1.blocks.len()],
        turn1.blocks[..],
        "the second turn begins with every whole block of the first"
    );
    assert!(turn2.blocks.len() > turn1.blocks.len(), "and has more");
    assert_eq!(turn1.key, turn2.key, "one conversation, one key");
    assert_eq!(
        turn1.key_bytes, turn2.key_bytes,
        "the key covers the same text"
    );
    assert_eq!(
        turn1.key_bytes + 1,
        turn1.bytes,
        "a first turn is all key (system prompt and first user message) but the member's end"
    );
}

#[test]
fn conversations_with_one_system_prompt_share_its_blocks_not_their_key() {
    let a = named(&after_system(&[("user", "Tell me about tides.")]));
    let b = named(&after_system(&[("user", "Tell me about rain.")]));
    let shared = common_prefix(&a.blocks, &b.blocks);
    // The system message is {"role":"system","content":SYSTEM}: member names, values and
    // separators, 113 bytes after "messages" and its separator (10 bytes).
    assert_eq!(
        shared,
        (10 + 113) / BLOCK,
        "the system prompt's whole blocks are shared"
    );
    assert_ne!(
        a.key, b.key,
        "different first questions: different conversations"
    );
}

#[test]
fn only_the_prompt_members_matter() {
    let a = json!({"model": "m", "messages": [{"role": "user", "content": "hi there"}], "temperature": 0.2});
    let b = json!({"temperature": 1.0, "stream": true, "messages": [{"role": "user", "content": "hi there"}], "model": "m", "max_tokens": 9});
    assert_eq!(
        named(&a),
        named(&b),
        "sampling parameters and member order outside the prompt do not"
    );
    let other_model = read(a.to_string().as_bytes(), Some("n"), BLOCK, 4).expect("a prompt");
    assert_ne!(
        other_model.key,
        named(&a).key,
        "another model's cache is another cache"
    );
}

#[test]
fn separators_keep_different_texts_apart() {
    let one = named(&json!({"prompt": ["ab"]}));
    let two = named(&json!({"prompt": ["a", "b"]}));
    assert_ne!(
        one.key, two.key,
        "[\"ab\"] and [\"a\", \"b\"] are different prompts"
    );
    assert_eq!(
        one.bytes,
        "prompt".len() as u64 + 1 + 2 + 1 + 1 + 1,
        "name, sep, text, sep, item end, member end"
    );
}

#[test]
fn a_text_prompt_is_known_by_its_first_key_blocks() {
    let doc = "x".repeat(BLOCK * 10);
    let short = named(&json!({"prompt": &doc[..BLOCK * 2]}));
    let long = named(&json!({"prompt": doc}));
    let longer = named(&json!({"prompt": format!("{doc} and more")}));
    assert_eq!(
        long.key, longer.key,
        "past key_blocks, growth keeps the key"
    );
    assert_eq!(long.key, long.blocks[3], "the key is the 4th block's name");
    assert_eq!(long.key_bytes, 4 * BLOCK as u64);
    assert_eq!(
        short.key_bytes,
        2 * BLOCK as u64,
        "a shorter prompt: its whole blocks"
    );
    let tiny = named(&json!({"prompt": "hi"}));
    assert!(tiny.blocks.is_empty(), "no whole block");
    assert_eq!(
        tiny.key_bytes, tiny.bytes,
        "the key covers the partial text"
    );
    assert_ne!(
        tiny.key,
        named(&json!({"prompt": "ho"})).key,
        "and depends on it"
    );
}

#[test]
fn every_dialect_names_its_prompt() {
    let anthropic = named(&json!({"model": "m", "system": SYSTEM, "max_tokens": 5,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}));
    let anthropic_other = named(
        &json!({"model": "m", "system": "Another system prompt entirely.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}),
    );
    assert_ne!(
        anthropic.key, anthropic_other.key,
        "the system member is part of the key"
    );
    let responses = named(&json!({"model": "m", "instructions": SYSTEM, "input": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}));
    assert!(
        responses.key_bytes < responses.bytes,
        "Responses input items have roles"
    );
    let tgi = named(&json!({"inputs": "hello world", "parameters": {"max_new_tokens": 4}}));
    assert_eq!(tgi.key_bytes, tgi.bytes, "TGI's inputs is a text prompt");
    let ids = named(&json!({"prompt": [1, 2, 3]}));
    assert_ne!(
        ids.key,
        named(&json!({"prompt": [1, 2, 4]})).key,
        "token ids are text too"
    );
    assert!(
        read(b"{\"model\": \"m\"}", None, BLOCK, 4).is_none(),
        "no prompt member"
    );
    assert!(read(b"not json", None, BLOCK, 4).is_none(), "not JSON");
    assert!(
        read(b"{\"prompt\": null}", None, BLOCK, 4).is_none(),
        "null is absent"
    );
}

#[test]
fn escapes_are_read_as_the_text_they_spell() {
    let plain = read(br#"{"prompt": "caf\u00e9 \"x\""}"#, None, BLOCK, 4).expect("a prompt");
    let raw = read(
        "{\"prompt\": \"café \\\"x\\\"\"}".as_bytes(),
        None,
        BLOCK,
        4,
    )
    .expect("a prompt");
    assert_eq!(
        plain, raw,
        "two spellings of one string name the same prompt"
    );
}

#[test]
fn blocks_are_bounded() {
    let huge = "y".repeat(BLOCK * (MAX_BLOCKS + 100));
    let named = read(
        json!({"prompt": huge}).to_string().as_bytes(),
        None,
        BLOCK,
        4,
    )
    .expect("a prompt");
    assert_eq!(named.blocks.len(), MAX_BLOCKS, "at most MAX_BLOCKS names");
    assert_eq!(
        named.bytes,
        (BLOCK * (MAX_BLOCKS + 100) + 9) as u64,
        "every byte is still counted (+ name and separators)"
    );
}

/// The naming as it was before the one walk located the prompt members: its own walk of the whole
/// body finds them (kept here, verbatim, as the reference the one-walk naming must match byte for
/// byte, so tokenmeter replicas of either build agree on every conversation's home); each member
/// is then named as the module names it ([`Naming`], which the golden test pins).
mod reference {
    use super::super::*;
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    use serde::Deserialize;
    use serde_json::value::RawValue;

    pub fn read(
        body: &[u8],
        model: Option<&str>,
        block_bytes: usize,
        key_blocks: usize,
    ) -> Option<PromptPrefix> {
        let text = std::str::from_utf8(body).ok()?;
        let mut de = serde_json::Deserializer::from_str(text);
        let members = de.deserialize_map(TopVisitor).ok()?;
        de.end().ok()?;
        let mut naming = Naming::new(model, block_bytes);
        let mut any = false;
        for (name, raw) in members.in_order() {
            let Some(raw) = raw else { continue };
            any = true;
            naming.member(name, raw.get())?;
        }
        if !any {
            return None;
        }
        Some(naming.finish(key_blocks))
    }

    #[derive(Default)]
    struct Members<'a> {
        instructions: Option<&'a RawValue>,
        system: Option<&'a RawValue>,
        messages: Option<&'a RawValue>,
        input: Option<&'a RawValue>,
        prompt: Option<&'a RawValue>,
        inputs: Option<&'a RawValue>,
    }

    impl<'a> Members<'a> {
        fn in_order(&self) -> [(&'static str, Option<&'a RawValue>); 6] {
            [
                ("instructions", self.instructions),
                ("system", self.system),
                ("messages", self.messages),
                ("input", self.input),
                ("prompt", self.prompt),
                ("inputs", self.inputs),
            ]
        }
    }

    #[derive(Deserialize)]
    #[serde(field_identifier, rename_all = "snake_case")]
    enum TopKey {
        Instructions,
        System,
        Messages,
        Input,
        Prompt,
        Inputs,
        #[serde(other)]
        Other,
    }

    struct TopVisitor;

    impl<'de> Visitor<'de> for TopVisitor {
        type Value = Members<'de>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
            let mut members = Members::default();
            while let Some(key) = map.next_key::<TopKey>()? {
                let slot = match key {
                    TopKey::Instructions => &mut members.instructions,
                    TopKey::System => &mut members.system,
                    TopKey::Messages => &mut members.messages,
                    TopKey::Input => &mut members.input,
                    TopKey::Prompt => &mut members.prompt,
                    TopKey::Inputs => &mut members.inputs,
                    TopKey::Other => {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                };
                let value: &RawValue = map.next_value()?;
                *slot = (value.get() != "null").then_some(value);
            }
            Ok(members)
        }
    }
}

/// A body's members, in any order, with repeats and nulls: what a client may send.
fn body_members() -> impl Strategy<Value = Vec<(String, serde_json::Value)>> {
    let text = "[a-z ]{0,80}";
    let value = prop_oneof![
        text.prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
        proptest::collection::vec(
            (
                prop_oneof![Just("user"), Just("system"), Just("assistant")],
                text
            ),
            0..4
        )
        .prop_map(|messages| json!(messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect::<Vec<_>>())),
        proptest::collection::vec(0u64..50_000, 0..6).prop_map(|ids| json!(ids)),
    ];
    let name = prop_oneof![
        Just("instructions"),
        Just("system"),
        Just("messages"),
        Just("input"),
        Just("prompt"),
        Just("inputs"),
        Just("model"),
        Just("temperature"),
    ];
    proptest::collection::vec((name.prop_map(str::to_owned), value), 0..8)
}

/// The members as a JSON object's text, in their order (repeats kept), with `stream` and
/// `stream_options` placed at `at`, so that the usage splice can fall before any member.
fn object(
    members: &[(String, serde_json::Value)],
    stream: bool,
    options: usize,
    at: usize,
) -> String {
    let mut items: Vec<String> = members
        .iter()
        .map(|(name, value)| format!("{}: {value}", serde_json::Value::from(name.as_str())))
        .collect();
    let at = at % (items.len() + 1);
    let options = match options % 3 {
        0 => None,
        1 => Some(r#""stream_options": null"#.to_owned()),
        _ => Some(r#""stream_options": {"continuous_usage_stats": false}"#.to_owned()),
    };
    if let Some(options) = options {
        items.insert(at, options);
    }
    items.insert(at, format!(r#""stream": {stream}"#));
    format!("{{{}}}", items.join(", "))
}

#[test]
fn the_names_of_a_fixed_prompt_never_change() {
    // The same values any build of tokenmeter computes for this prompt: replicas of different
    // builds behind one Service must agree on every conversation's home.
    let body = after_system(&[("user", "What is a KV cache?")]).to_string();
    for named in [
        read(body.as_bytes(), Some("m"), BLOCK, 4).expect("a prompt"),
        reference::read(body.as_bytes(), Some("m"), BLOCK, 4).expect("a prompt"),
    ] {
        assert_eq!(
            (named.key, named.blocks.first().copied(), named.bytes),
            GOLDEN,
            "{named:?}"
        );
    }
}

proptest! {
    /// The one walk locates the members, and naming them gives exactly the names the whole-body
    /// walk gave; once the usage splice moved them (the body as forwarded), still the same names.
    #[test]
    fn naming_from_the_one_walk_matches_the_whole_body_walk(
        members in body_members(),
        stream in any::<bool>(),
        options in 0usize..3,
        at in 0usize..10,
    ) {
        let body = object(&members, stream, options, at);
        let expected = reference::read(body.as_bytes(), Some("m"), BLOCK, 4);
        let what = crate::request::Read::default().with_prompt_spans();
        let mut inspection = crate::request::read_with(body.as_bytes(), what).expect("an object");
        let spans = inspection.prompt_spans.clone().expect("asked for");
        prop_assert_eq!(&name(body.as_bytes(), &spans, Some("m"), BLOCK, 4), &expected, "{}", body);
        if let crate::request::Injection::Injected(forwarded) = inspection.inject(body.as_bytes()) {
            let moved = inspection.prompt_spans.as_ref().expect("still there");
            prop_assert_eq!(
                &name(&forwarded, moved, Some("m"), BLOCK, 4),
                &expected,
                "after the usage splice: {}",
                String::from_utf8_lossy(&forwarded)
            );
        }
    }

    /// Cutting the same text into strings differently never changes the blocks before the cut:
    /// the chain depends on bytes, not on how the feed was split.
    #[test]
    fn the_chain_depends_on_bytes_alone(text in proptest::collection::vec(any::<u8>(), 0..400), cuts in proptest::collection::vec(0usize..400, 0..6)) {
        let mut whole = Chain::new("m", BLOCK);
        whole.feed(&text);
        let mut pieces = Chain::new("m", BLOCK);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
        cuts.sort_unstable();
        let mut start = 0;
        for cut in cuts.into_iter().chain([text.len()]) {
            pieces.feed(&text[start..cut]);
            start = cut;
        }
        prop_assert_eq!(&whole.blocks, &pieces.blocks);
        prop_assert_eq!(whole.mark(), pieces.mark());
        prop_assert_eq!(whole.blocks.len(), text.len() / BLOCK);
    }
}
