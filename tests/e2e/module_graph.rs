//! The crate's dependencies point one way. Checks over every file under `src/`:
//!
//! 1. **No cycle among siblings**: within any module (the crate included), the dependencies
//!    between its direct submodules form a DAG. A child using its parent's items (`super::X`) is
//!    structure, not a cycle; two siblings using each other, directly or around a loop, is.
//! 2. **The data path is layered**: `server` composes `meter` and `route`, which never name each
//!    other and both use `proxy`; the shared vocabulary (`context`, `request`, `dialect`, `sse`,
//!    `upstream`, `metrics`, `config`, `tls`) uses none of those four, and `metrics` uses nothing
//!    but `config` (each subsystem owns its series).
//!
//! A dependency is any path in code (not in comments) that names an item of another module:
//! `crate::a::b`, `super::x` (resolved from the file's own module), and `use` trees with braces.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a file defines: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `lib.rs` and
/// `main.rs` are the crate root.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Module = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// The code of a file without comments (line and block), string contents kept out as well.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            let end = text[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |at| i + 2 + at + 2);
            i = end;
        } else if bytes[i..].starts_with(b"r#\"") {
            let end = text[i + 3..]
                .find("\"#")
                .map_or(bytes.len(), |at| i + 3 + at + 2);
            out.push_str("\"\"");
            i = end;
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i += 1;
        } else if bytes[i] == b'\'' && bytes.get(i + 2) == Some(&b'\'') {
            // A char literal such as '{' must not open a use tree.
            out.push_str("' '");
            i += 3;
        } else {
            out.push(bytes[i] as char);
            i += 1;
        }
    }
    out
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Every path that starts at `crate::` or `super::` in `code`, expanded through `{...}` trees
/// (only the leading segments matter, so each tree item contributes its own path).
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_here = (i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':')
            && (code[i..].starts_with("crate::") || code[i..].starts_with("super::"));
        if starts_here {
            let (mut items, end) = tree(code, i);
            found.append(&mut items);
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    found
}

/// Parses a path (possibly ending in a `{...}` tree) at `start`; returns its expansions and where
/// it ends.
fn tree(code: &str, start: usize) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let mut prefix: Vec<String> = Vec::new();
    let mut i = start;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            let mut out = Vec::new();
            i += 1;
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return (out, i + 1);
                }
                let (items, end) = tree(code, i);
                for item in items {
                    let mut full = prefix.clone();
                    full.extend(item);
                    out.push(full);
                }
                if end <= i {
                    return (out, i + 1);
                }
                i = end;
            }
        }
        let ident_start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        if ident_start == i {
            return (vec![prefix], i);
        }
        prefix.push(code[ident_start..i].to_owned());
        if code[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// Resolves a path found in `module` to the module it names (the longest known prefix).
fn resolve(module: &Module, path: &[String], known: &BTreeSet<Module>) -> Option<Module> {
    let mut base: Module = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("super") => {
            base = module.clone();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut target = base;
    let mut best = target.clone();
    for segment in rest {
        if segment == "self" {
            continue;
        }
        target.push(segment.clone());
        if known.contains(&target) {
            best = target.clone();
        } else {
            break;
        }
    }
    Some(best)
}

/// `from` and `to` as the two siblings under their deepest common ancestor, if they differ there.
fn siblings(from: &Module, to: &Module) -> Option<(Module, String, String)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    let (a, b) = (from.get(common)?, to.get(common)?);
    Some((from[..common].to_vec(), a.clone(), b.clone()))
}

fn graph() -> BTreeSet<(Module, Module)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let known: BTreeSet<Module> = files.iter().map(|file| module_of(&src, file)).collect();
    let mut edges = BTreeSet::new();
    for file in &files {
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).expect("read source");
        for path in paths(&code_only(&text)) {
            if let Some(target) = resolve(&module, &path, &known) {
                if target != module {
                    edges.insert((module.clone(), target));
                }
            }
        }
    }
    edges
}

/// A cycle in `edges` (a path back to its start), if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(cycle) = visit(node, edges, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn siblings_depend_on_each_other_one_way() {
    let mut by_parent: BTreeMap<Module, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, to) in graph() {
        if let Some((parent, a, b)) = siblings(&from, &to) {
            by_parent
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .insert(b);
        }
    }
    let cycles: Vec<String> = by_parent
        .iter()
        .filter_map(|(parent, edges)| {
            find_cycle(edges).map(|cycle| {
                let name = if parent.is_empty() {
                    "crate".to_owned()
                } else {
                    parent.join("::")
                };
                format!("in {name}: {}", cycle.join(" -> "))
            })
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// The top-level module a path in the graph starts with.
fn top(module: &Module) -> Option<&str> {
    module.first().map(String::as_str)
}

#[test]
fn the_data_path_is_layered() {
    // The stack reads admission -> meter -> plan -> [budget ->] dispatch -> forward. `server`
    // composes it and may use every layer; `meter` and `route` sit side by side and never name
    // each other (the server wires them; they meet only in the request context and its finish
    // hooks); both use `proxy`, which uses neither. `trace` and `tenant` hang off the finish point
    // (and the head, where the server starts a request's context) and use no other layer, except
    // that the tenant's budget phase is a layer of the stack and answers with `proxy`'s error
    // types, as `meter` and `route` do; no layer uses them (they meet the others in the context).
    // The vocabulary under them uses no layer.
    let layers = ["server", "meter", "route", "proxy", "trace", "tenant"];
    let allowed = [
        ("server", "meter"),
        ("server", "route"),
        ("server", "proxy"),
        ("server", "trace"),
        ("server", "tenant"),
        ("meter", "proxy"),
        ("route", "proxy"),
        ("tenant", "proxy"),
    ];
    let vocabulary = [
        "context", "request", "dialect", "sse", "upstream", "metrics", "config", "tls",
    ];
    let mut wrong = Vec::new();
    for (from, to) in graph() {
        let (Some(a), Some(b)) = (top(&from), top(&to)) else {
            continue;
        };
        if a == b {
            continue;
        }
        let between_layers =
            layers.contains(&a) && layers.contains(&b) && !allowed.contains(&(a, b));
        let vocabulary_uses_layer = vocabulary.contains(&a) && layers.contains(&b);
        if between_layers || vocabulary_uses_layer {
            wrong.push(format!("{} -> {}", from.join("::"), to.join("::")));
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against server -> {{meter, route}} -> proxy (and the vocabulary under \
         them):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn metrics_knows_no_subsystem() {
    // `metrics` is what every subsystem's series share (recorder, histograms, expositions, label
    // capping); each subsystem declares its own series. It reads the config, nothing else.
    let wrong: Vec<String> = graph()
        .into_iter()
        .filter(|(from, to)| {
            top(from) == Some("metrics") && !matches!(top(to), Some("metrics" | "config"))
        })
        .map(|(from, to)| format!("{} -> {}", from.join("::"), to.join("::")))
        .collect();
    assert!(
        wrong.is_empty(),
        "metrics uses a subsystem:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn meter_does_not_plan() {
    // Planning belongs to `route` (its plan layer); the calibration learns at the finish point.
    let wrong: Vec<String> = graph()
        .into_iter()
        .filter(|(from, to)| top(from) == Some("meter") && top(to) == Some("route"))
        .map(|(from, to)| format!("{} -> {}", from.join("::"), to.join("::")))
        .collect();
    assert!(wrong.is_empty(), "meter uses route:\n{}", wrong.join("\n"));
}

#[test]
fn the_checker_sees_paths_and_trees() {
    let code = code_only(
        "use crate::a::{b::C, d, e::{F, G}};\n// use crate::comment::X;\nlet x = super::h::I; \"crate::s\";",
    );
    let found: Vec<String> = paths(&code).iter().map(|path| path.join("::")).collect();
    assert_eq!(
        found,
        vec![
            "crate::a::b::C",
            "crate::a::d",
            "crate::a::e::F",
            "crate::a::e::G",
            "super::h::I"
        ],
        "trees expanded; comments and strings skipped"
    );
    let known: BTreeSet<Module> = [vec!["a".to_owned()], vec!["a".to_owned(), "b".to_owned()]]
        .into_iter()
        .collect();
    let resolved = resolve(
        &vec!["a".to_owned(), "x".to_owned()],
        &["super".to_owned(), "b".to_owned(), "Y".to_owned()],
        &known,
    );
    assert_eq!(
        resolved,
        Some(vec!["a".to_owned(), "b".to_owned()]),
        "super resolved"
    );
    let mut edges = BTreeMap::new();
    edges.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    edges.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert!(find_cycle(&edges).is_some(), "a two-node cycle is found");
    edges.remove("b");
    assert!(find_cycle(&edges).is_none(), "a chain is not a cycle");
}
