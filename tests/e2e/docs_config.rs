//! Every TOML snippet in README.md and docs/*.md is a config tokenmeter takes: a reader who copies
//! one gets what the text around it says, not a refusal at start.
//!
//! A fenced block with the info string `toml` is a whole config: [`Config::from_toml`] accepts it
//! (the parse and validation `serve --check` starts with, before the environment's overrides and
//! the files the config names), and the config it prints reads back to the same config. A word
//! after `toml` in the info string (GitHub still highlights the block as TOML) says the block is
//! something else:
//! - ```` ```toml partial ````: a piece of a config, its tables named in full, that leans on keys
//!   it leaves out (a `[[rules]]` list naming pools another snippet defines). Every key must exist
//!   and every value have its type (the parse), but the checks across keys may refuse it.
//! - ```` ```toml refused ````: an example of a mistake; the check must refuse it.
//!
//! Any other word fails the test, so a mistyped marker cannot skip a snippet.
//!
//! Every key a snippet names exists: the config refuses an unknown key in each of its tables
//! (`deny_unknown_fields`; `src/config/tests.rs`, `every_table_refuses_an_unknown_key`, holds it
//! for every table), so the parse catches a key that does not. A key a snippet mentions in a
//! comment (`# spill_queue_tokens = 65536`) must exist too: uncommented, it must parse.
use std::path::{Path, PathBuf};

use tokenmeter::config::Config;

/// What a snippet's info string says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Whole,
    Partial,
    Refused,
}

/// One fenced TOML block.
struct Snippet {
    /// `docs/routing.md:203`, the line of its opening fence.
    place: String,
    kind: Kind,
    text: String,
}

/// README.md and every docs/*.md.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// The fenced ```toml blocks of a Markdown text (indented ones, inside list items, dedented).
fn snippets(name: &str, markdown: &str) -> Vec<Snippet> {
    let mut found = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let mut words = info.split_whitespace();
        let is_toml = words.next() == Some("toml");
        let marker = words.next();
        let mut text = String::new();
        for (_, body) in lines.by_ref() {
            if body.trim_start().starts_with("```") {
                break;
            }
            text.push_str(body.get(indent..).unwrap_or(body.trim_start()));
            text.push('\n');
        }
        if !is_toml {
            continue;
        }
        let place = format!("{name}:{}", number + 1);
        let kind = match marker {
            None => Kind::Whole,
            Some("partial") => Kind::Partial,
            Some("refused") => Kind::Refused,
            Some(other) => panic!(
                "{place}: unknown snippet marker {other:?} (none, \"partial\" or \"refused\")"
            ),
        };
        found.push(Snippet { place, kind, text });
    }
    found
}

/// Every TOML snippet of the documents.
fn all_snippets() -> Vec<Snippet> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    documents()
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("read a document");
            let name = path
                .strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string();
            snippets(&name, &text)
        })
        .collect()
}

/// The parse alone: every key exists and every value has its type (no checks across keys).
fn parses(text: &str) -> Result<Config, String> {
    toml::from_str::<Config>(text).map_err(|err| err.to_string())
}

#[test]
fn every_toml_snippet_in_the_docs_is_a_config_serve_check_takes() {
    let snippets = all_snippets();
    assert!(
        snippets.len() >= 10,
        "the snippets were found ({} of them)",
        snippets.len()
    );
    let mut failures = Vec::new();
    for Snippet { place, kind, text } in &snippets {
        let result = match kind {
            Kind::Whole => whole(text),
            Kind::Partial => parses(text).map(drop),
            Kind::Refused => match Config::from_toml(text) {
                Ok(_) => Err("marked refused, but the check accepts it".to_owned()),
                Err(_) => Ok(()),
            },
        };
        if let Err(err) = result {
            failures.push(format!("{place} ({kind:?}): {err}\n{text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A whole config: checked, and printed back to the same config.
fn whole(text: &str) -> Result<(), String> {
    let config = Config::from_toml(text).map_err(|err| err.to_string())?;
    let printed = config.to_toml().map_err(|err| err.to_string())?;
    let again = Config::from_toml(&printed).map_err(|err| format!("printed: {err}"))?;
    if again != config {
        return Err(format!("printed, it reads back differently:\n{printed}"));
    }
    Ok(())
}

#[test]
fn every_key_a_snippet_mentions_in_a_comment_exists() {
    let mut mentioned = 0;
    let mut failures = Vec::new();
    for Snippet { place, kind, text } in all_snippets() {
        if kind == Kind::Refused {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(key_line) = commented_key(line) else {
                continue;
            };
            mentioned += 1;
            let mut uncommented = lines.clone();
            uncommented[i] = key_line;
            if let Err(err) = parses(&uncommented.join("\n")) {
                failures.push(format!("{place}: {key_line:?}, uncommented: {err}"));
            }
        }
    }
    assert!(mentioned > 0, "the docs mention keys in comments");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `key = value` of a line `# key = value ...`, when the comment is a commented-out key.
fn commented_key(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let (key, _) = rest.split_once('=')?;
    let is_key = !key.trim().is_empty()
        && key
            .trim()
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    is_key.then_some(rest)
}

#[test]
fn the_markers_are_read_from_the_info_string() {
    let markdown = "text\n```toml\na = 1\n```\n\n1. item\n   ```toml partial\n   [[rules]]\n   pool = \"x\"\n   ```\n```toml refused\nb = 2\n```\n```sh\nc = 3\n```\n";
    let found = snippets("t.md", markdown);
    let seen: Vec<(&str, Kind, &str)> = found
        .iter()
        .map(|s| (s.place.as_str(), s.kind, s.text.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("t.md:2", Kind::Whole, "a = 1\n"),
            ("t.md:7", Kind::Partial, "[[rules]]\npool = \"x\"\n"),
            ("t.md:11", Kind::Refused, "b = 2\n"),
        ],
        "toml blocks only, dedented, each with its marker"
    );
    assert_eq!(
        commented_key("# spill_queue_tokens = 65536"),
        Some("spill_queue_tokens = 65536"),
        "a commented-out key"
    );
    assert_eq!(
        commented_key("   # protocol = \"grpc\"   # then 4317"),
        Some("protocol = \"grpc\"   # then 4317")
    );
    assert_eq!(
        commented_key("# e.g. a value = 3"),
        None,
        "prose is not a key"
    );
}
