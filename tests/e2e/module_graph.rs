//! The crate's dependencies point one way. Checks over every file under `src/`:
//!
//! 1. **No cycle among siblings**: within any module (the crate included), the dependencies
//!    between its direct submodules form a DAG. A child using its parent's items (`super::X`) is
//!    structure, not a cycle; two siblings using each other, directly or around a loop, is.
//! 2. **The data path is layered**: `server` composes `meter` and `route`, which never name each
//!    other and both use `proxy`; the shared vocabulary (`context`, `request`, `dialect`, `sse`,
//!    `upstream`, `metrics`, `config`, `tls`) uses none of those four, and `metrics` uses nothing
//!    but `config` (each subsystem owns its series). A layer's **records** (a module named
//!    `record` in its folder: `route/record.rs`, `meter/record.rs`...) are that vocabulary too: the
//!    part of the request context its subsystem writes, defined where it is written. The context
//!    and every layer may name a record, and a record names no layer (only the vocabulary and other
//!    records), so checks 1 and 2 read it as a module of its own (`record`), not of its layer.
//! 3. **No cycle among files** (#38): check 1 takes a module for one node, so it cannot see
//!    `router.rs -> handoff/ -> handoff/serve.rs -> dispatch.rs -> super::Router`, a loop through
//!    the files of one module. Here every file is a node and an edge goes to the file that
//!    *defines* what a path names: `super::Router`, re-exported by `route/mod.rs`, is an edge to
//!    `route/router.rs`, and a parent naming its child (`serve::run`) is an edge too. A parent
//!    and a child that use each other are a cycle: what both need belongs in a file of its own.
//!
//! A dependency is any path in code (not in comments) that names an item of another module:
//! `crate::a::b`, `super::x` (resolved from the file's own module), and `use` trees with braces.
//! The file graph also reads paths from a file's own children (`serve::run`), `self::`, names it
//! imports (`slo::Demand` after `use super::slo`), and calls of a type's methods that live in
//! another file than the type (`router.handoff(..)`, with `impl Router` in `handoff/serve.rs`);
//! it does not see other method calls (that needs types).
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
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
    let roots = BTreeSet::from(["crate".to_owned(), "super".to_owned()]);
    paths_at(code, &roots)
        .into_iter()
        .map(|(_, path)| path)
        .collect()
}

/// Every path in `code` whose first segment is one of `roots`, with where it starts, expanded
/// through `{...}` trees as [`paths`] does.
fn paths_at(code: &str, roots: &BTreeSet<String>) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        // A path's start, not a segment further on (`a::crate`) nor a method (`.serve::<T>()`).
        let boundary = i == 0 || !is_ident(bytes[i - 1]) && !matches!(bytes[i - 1], b':' | b'.');
        if boundary && is_ident(bytes[i]) {
            let end = ident_end(code, i);
            if code[end..].starts_with("::")
                && roots.contains(&code[i..end])
                && !in_visibility(&code[..i])
            {
                let (items, after) = tree(code, i);
                found.extend(items.into_iter().map(|path| (i, path)));
                i = after.max(i + 1);
            } else {
                i = end;
            }
        } else {
            i += 1;
        }
    }
    found
}

/// Whether a path after `before` is the scope of a visibility (`pub(in crate::config)`): it
/// says who may see an item, and depends on nothing.
fn in_visibility(before: &str) -> bool {
    before
        .trim_end()
        .strip_suffix("in")
        .is_some_and(|rest| rest.trim_end().ends_with("pub("))
}

fn ident_end(code: &str, start: usize) -> usize {
    let bytes = code.as_bytes();
    let mut i = start;
    while i < bytes.len() && is_ident(bytes[i]) {
        i += 1;
    }
    i
}

fn skip_space(code: &str, start: usize) -> usize {
    let bytes = code.as_bytes();
    let mut i = start;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Whether `text` ends with the word `word` (not with a longer identifier).
fn ends_with_word(text: &str, word: &str) -> bool {
    text.strip_suffix(word)
        .is_some_and(|before| !before.bytes().last().is_some_and(is_ident))
}

/// Whether the keyword `word` stands at `at` (not inside a longer identifier). Compares bytes, so
/// any `at` will do (`code_only` keeps a non-ASCII byte of code as a char of two bytes).
fn keyword_at(code: &str, at: usize, word: &str) -> bool {
    let bytes = code.as_bytes();
    bytes[at..].starts_with(word.as_bytes())
        && (at == 0 || !is_ident(bytes[at - 1]))
        && !bytes.get(at + word.len()).copied().is_some_and(is_ident)
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
            // `Name as Alias` (in a use tree) names `Name`; the alias is no path.
            let after = skip_space(code, i);
            if keyword_at(code, after, "as") {
                return (vec![prefix], ident_end(code, skip_space(code, after + 2)));
            }
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

/// The layers of the data path (check 2), whose `record` modules are vocabulary.
const LAYERS: [&str; 6] = ["server", "meter", "route", "proxy", "trace", "tenant"];

/// A layer's record (and the record's own children) read as a module of the vocabulary:
/// `route::handoff::record` is `record::{route::handoff::record}`; any other module is itself.
fn as_node(module: Module) -> Module {
    let in_layer = top(&module).is_some_and(|top| LAYERS.contains(&top));
    match module.iter().position(|part| part == "record") {
        Some(at) if in_layer => vec!["record".to_owned(), module[..=at].join("::")],
        _ => module,
    }
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
                let (from, to) = (as_node(module.clone()), as_node(target));
                if from != to {
                    edges.insert((from, to));
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
    // The vocabulary under them (the layers' records included) uses no layer.
    let layers = LAYERS;
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
        "context", "request", "dialect", "sse", "upstream", "metrics", "config", "tls", "record",
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
fn a_layers_record_is_vocabulary() {
    let module = |path: &str| -> Module { path.split("::").map(str::to_owned).collect() };
    assert_eq!(
        as_node(module("route::handoff::record")),
        vec!["record".to_owned(), "route::handoff::record".to_owned()],
        "a layer's record is a module of the vocabulary"
    );
    assert_eq!(
        as_node(module("meter::record::tests")),
        vec!["record".to_owned(), "meter::record".to_owned()],
        "a record's children are the record"
    );
    assert_eq!(
        as_node(module("testbed::bench::record")),
        module("testbed::bench::record"),
        "outside the layers, a module named record is itself"
    );
    assert_eq!(
        as_node(module("route::dispatch")),
        module("route::dispatch")
    );
}

#[test]
fn the_checker_sees_paths_and_trees() {
    let code = code_only(
        "use crate::a::{b::C, d, e::{F, G}};\n// use crate::comment::X;\nlet x = super::h::I; \"crate::s\";\npub(in crate::vis) use super::j::K;",
    );
    let found: Vec<String> = paths(&code).iter().map(|path| path.join("::")).collect();
    assert_eq!(
        found,
        vec![
            "crate::a::b::C",
            "crate::a::d",
            "crate::a::e::F",
            "crate::a::e::G",
            "super::h::I",
            "super::j::K"
        ],
        "trees expanded; comments, strings and visibility scopes skipped"
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

// The file graph: one node per file, an edge to the file that defines what a path names.

/// A `use` statement: where it stands, whether it re-exports (`pub`, `pub(crate)`, ...), and each
/// name it brings in with the path it names (`*` for a glob).
struct UseStatement {
    span: Range<usize>,
    public: bool,
    items: Vec<(String, Vec<String>)>,
}

/// The body of a `mod name { ... }` block, and its name.
type InlineModule = (Range<usize>, String);

/// For each file, the files it depends on, each with the first path that makes the edge.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// What the file graph reads from one file.
struct FileFacts {
    /// The file, relative to `src/`, as the report names it.
    file: String,
    module: Module,
    code: String,
    /// The bodies of `mod name { ... }` blocks: their items are this file's.
    inline: Vec<InlineModule>,
    /// The modules it declares with `mod name;`, each in a file of its own.
    children: BTreeSet<String>,
    uses: Vec<UseStatement>,
    /// The names its top-level `use` statements bring in, public or not (a child reaches a
    /// private import with `super::Name`), with the paths they name.
    imports: BTreeMap<String, Vec<String>>,
    /// Its inherent impl blocks: the type's path and the methods it makes visible outside.
    impls: Vec<(Vec<String>, Vec<String>)>,
}

/// The `mod name { ... }` bodies and the `mod name;` declarations (with where they stand) of
/// `code`.
fn modules_declared(code: &str) -> (Vec<InlineModule>, Vec<(usize, String)>) {
    let bytes = code.as_bytes();
    let (mut inline, mut declared) = (Vec::new(), Vec::new());
    for at in 0..bytes.len() {
        if !keyword_at(code, at, "mod") {
            continue;
        }
        let name_start = skip_space(code, at + 3);
        let name_end = ident_end(code, name_start);
        if name_end == name_start {
            continue;
        }
        let name = code[name_start..name_end].to_owned();
        let next = skip_space(code, name_end);
        match bytes.get(next) {
            Some(b';') => declared.push((at, name)),
            Some(b'{') => inline.push((next + 1..block_end(code, next), name)),
            _ => {}
        }
    }
    (inline, declared)
}

/// Parses a use tree at `start` under `prefix`: each name it brings in with its path, and where
/// the tree ends.
fn use_tree(
    code: &str,
    start: usize,
    mut prefix: Vec<String>,
) -> (Vec<(String, Vec<String>)>, usize) {
    let bytes = code.as_bytes();
    let mut i = skip_space(code, start);
    if prefix.is_empty() && code[i..].starts_with("::") {
        i += 2;
    }
    loop {
        i = skip_space(code, i);
        match bytes.get(i) {
            Some(b'{') => {
                let mut out = Vec::new();
                i += 1;
                loop {
                    while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                        i += 1;
                    }
                    if i >= bytes.len() || bytes[i] == b'}' {
                        return (out, i + 1);
                    }
                    let (items, end) = use_tree(code, i, prefix.clone());
                    out.extend(items);
                    if end <= i {
                        return (out, i + 1);
                    }
                    i = end;
                }
            }
            Some(b'*') => return (vec![("*".to_owned(), prefix)], i + 1),
            Some(&byte) if is_ident(byte) => {
                let end = ident_end(code, i);
                let segment = &code[i..end];
                i = end;
                if code[i..].starts_with("::") {
                    prefix.push(segment.to_owned());
                    i += 2;
                    continue;
                }
                // `{self, ...}` brings in the module the tree is under.
                if segment != "self" || prefix.is_empty() {
                    prefix.push(segment.to_owned());
                }
                let mut name = prefix.last().cloned().unwrap_or_default();
                let after = skip_space(code, i);
                if keyword_at(code, after, "as") {
                    let alias = skip_space(code, after + 2);
                    i = ident_end(code, alias);
                    name = code[alias..i].to_owned();
                }
                return (vec![(name, prefix)], i);
            }
            _ => return (Vec::new(), i),
        }
    }
}

/// Every `use` statement of `code`.
fn use_statements(code: &str) -> Vec<UseStatement> {
    let mut found = Vec::new();
    for at in 0..code.len() {
        if !keyword_at(code, at, "use") {
            continue;
        }
        let (items, end) = use_tree(code, at + 3, Vec::new());
        let end = code[end..]
            .find(';')
            .map_or(code.len(), |semi| end + semi + 1);
        let before = code[..at].trim_end();
        let visibility = match before.strip_suffix(')') {
            Some(inside) => inside
                .rfind('(')
                .map_or("", |open| inside[..open].trim_end()),
            None => before,
        };
        found.push(UseStatement {
            span: at..end,
            public: ends_with_word(visibility, "pub"),
            items,
        });
    }
    found
}

/// Where the `<...>` that opens at `start` closes (an `->` inside is no bracket).
fn skip_angles(code: &str, start: usize) -> usize {
    let bytes = code.as_bytes();
    let mut depth = 0usize;
    for (i, &byte) in bytes.iter().enumerate().skip(start) {
        match byte {
            b'<' => depth += 1,
            b'>' if bytes[i - 1] != b'-' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    bytes.len()
}

/// Where the `{` at `open` closes.
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, byte) in code.bytes().enumerate().skip(open) {
        match byte {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The inherent impl blocks of `code` (`impl<T> Path<T> { ... }`, not `impl Trait for Type`
/// nor `-> impl Trait`): each type's path and the names of its methods that are `pub` (in any
/// scope), the ones another file can call.
fn inherent_impls(code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for at in 0..bytes.len() {
        if !keyword_at(code, at, "impl") {
            continue;
        }
        let before = code[..at].trim_end();
        let item = before.is_empty()
            || before.ends_with(['}', ';', ']', '{'])
            || ends_with_word(before, "unsafe");
        if !item {
            continue;
        }
        let mut i = skip_space(code, at + 4);
        if bytes.get(i) == Some(&b'<') {
            i = skip_space(code, skip_angles(code, i));
        }
        let mut path = Vec::new();
        loop {
            let end = ident_end(code, i);
            if end == i {
                break;
            }
            path.push(code[i..end].to_owned());
            i = end;
            if code[i..].starts_with("::") {
                i += 2;
            } else {
                break;
            }
        }
        i = skip_space(code, i);
        if bytes.get(i) == Some(&b'<') {
            i = skip_space(code, skip_angles(code, i));
        }
        if keyword_at(code, i, "where") {
            i = code[i..].find('{').map_or(code.len(), |open| i + open);
        }
        if path.is_empty() || bytes.get(i) != Some(&b'{') {
            continue;
        }
        let body = i + 1..block_end(code, i);
        let mut methods = Vec::new();
        let mut depth = 0usize;
        for j in body.clone() {
            match bytes[j] {
                b'{' => depth += 1,
                b'}' => depth = depth.saturating_sub(1),
                _ if depth == 0 && keyword_at(code, j, "fn") => {
                    let line = &code[code[..j].rfind('\n').map_or(0, |nl| nl + 1)..j];
                    let start = skip_space(code, j + 2);
                    let public = line
                        .split(|c: char| !is_ident(c as u8))
                        .any(|word| word == "pub");
                    if public {
                        methods.push(code[start..ident_end(code, start)].to_owned());
                    }
                }
                _ => {}
            }
        }
        found.push((path, methods));
    }
    found
}

fn file_facts(file: &str, text: &str) -> FileFacts {
    let code = code_only(text);
    let (inline, declared) = modules_declared(&code);
    let at_top = |at: usize| !inline.iter().any(|(body, _)| body.contains(&at));
    let children = declared
        .into_iter()
        .filter(|(at, _)| at_top(*at))
        .map(|(_, name)| name)
        .collect();
    let uses = use_statements(&code);
    let imports = uses
        .iter()
        .filter(|statement| at_top(statement.span.start))
        .flat_map(|statement| statement.items.iter().cloned())
        .filter(|(name, _)| !matches!(name.as_str(), "*" | "_"))
        .collect();
    let impls = inherent_impls(&code);
    FileFacts {
        file: file.to_owned(),
        module: module_of(Path::new(""), Path::new(file)),
        code,
        inline,
        children,
        uses,
        imports,
        impls,
    }
}

type Files = BTreeMap<Module, FileFacts>;

/// The module of the file that holds `module`'s items: the longest prefix of it that is a file
/// (the rest are inline modules).
fn file_module(files: &Files, module: &Module) -> Option<Module> {
    (0..=module.len())
        .rev()
        .map(|len| module[..len].to_vec())
        .find(|prefix| files.contains_key(prefix))
}

/// The file (its module) that defines what `path`, written in module `scope`, names. A path to
/// a module goes to its file; a name in it that the file imports (a re-export, or a private
/// `use` that a child reaches with `super::Name`) is followed to where it comes from, as many
/// times as it takes; any other name stays with the file. `None` for a path out of the crate.
fn locate(files: &Files, scope: &Module, path: &[String], depth: usize) -> Option<Module> {
    let home = file_module(files, scope)?;
    let facts = &files[&home];
    let (mut target, mut rest): (Module, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (scope.clone(), &path[1..]),
        "super" => {
            let (mut base, mut rest) = (scope.clone(), path);
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        first if facts.children.contains(first) => (home.clone(), path),
        first => {
            // A name the file imports (`use super::slo; slo::Demand`), or another crate.
            let imported = facts.imports.get(first)?;
            if depth > 8 {
                return Some(home);
            }
            let through = [imported.as_slice(), &path[1..]].concat();
            return locate(files, &home, &through, depth + 1);
        }
    };
    while let Some(segment) = rest.first() {
        let mut deeper = target.clone();
        deeper.push(segment.clone());
        if segment == "self" {
            rest = &rest[1..];
        } else if files.contains_key(&deeper) {
            target = deeper;
            rest = &rest[1..];
        } else {
            break;
        }
    }
    let file = file_module(files, &target)?;
    let Some(name) = rest.first() else {
        return Some(file);
    };
    match files[&file].imports.get(name) {
        Some(imported) if target == file && depth <= 8 => {
            let through = [imported.as_slice(), &rest[1..]].concat();
            locate(files, &file, &through, depth + 1)
        }
        _ => Some(file),
    }
}

/// Whether `code` names `name` as a word outside `use` statements and `mod` declarations (not as
/// a field, a method or a later path segment).
fn names_word(facts: &FileFacts, name: &str) -> bool {
    let code = &facts.code;
    let bytes = code.as_bytes();
    code.match_indices(name).any(|(at, _)| {
        let end = at + name.len();
        let before = code[..at].trim_end();
        (at == 0 || !is_ident(bytes[at - 1]))
            && !bytes.get(end).copied().is_some_and(is_ident)
            && !before.ends_with("::")
            && !before.ends_with('.')
            && !ends_with_word(before, "mod")
            && !facts
                .uses
                .iter()
                .any(|statement| statement.span.contains(&at))
    })
}

/// The file graph of `sources` (each a file relative to `src/` and its text): for each file,
/// the files its code names an item of, each with the first path that does.
///
/// A `pub use` line is a pass-through, not a dependency of its own file: paths through it reach
/// the file that defines the item, and the file depends on what it re-exports only where its own
/// code names it too.
fn file_graph(sources: &[(String, String)]) -> Edges {
    let files: Files = sources
        .iter()
        .map(|(file, text)| {
            let facts = file_facts(file, text);
            (facts.module.clone(), facts)
        })
        .collect();
    let mut edges: Edges = BTreeMap::new();
    for facts in files.values() {
        let scope_at = |at: usize| {
            let mut scope = facts.module.clone();
            scope.extend(
                facts
                    .inline
                    .iter()
                    .filter(|(body, _)| body.contains(&at))
                    .map(|(_, name)| name.clone()),
            );
            scope
        };
        let mut roots: BTreeSet<String> = ["crate", "super", "self"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        roots.extend(facts.children.iter().cloned());
        roots.extend(facts.imports.keys().cloned());
        let mut named: Vec<(Module, Vec<String>, String)> = paths_at(&facts.code, &roots)
            .into_iter()
            .filter(|(at, _)| {
                !facts
                    .uses
                    .iter()
                    .any(|statement| statement.public && statement.span.contains(at))
            })
            .map(|(at, path)| {
                let shown = match path.split_last() {
                    Some((last, head)) if last == "self" => head.join("::"),
                    _ => path.join("::"),
                };
                (scope_at(at), path, shown)
            })
            .collect();
        for statement in facts.uses.iter().filter(|statement| statement.public) {
            for (name, _) in &statement.items {
                if name != "*" && names_word(facts, name) {
                    let witness = format!("{name} (re-exported and used here)");
                    named.push((facts.module.clone(), vec![name.clone()], witness));
                }
            }
        }
        for (scope, path, witness) in named {
            let Some(target) = locate(&files, &scope, &path, 0) else {
                continue;
            };
            if target != facts.module {
                edges
                    .entry(facts.file.clone())
                    .or_default()
                    .entry(files[&target].file.clone())
                    .or_insert(witness);
            }
        }
    }
    // A type's methods in a file other than the type's (`impl super::Router { ... }` in
    // `dispatch.rs`) are items of that file: a file that names the type and calls one of them
    // (`router.handoff(...)`, `Router::handoff`, `Self::handoff`) depends on the file that
    // defines the method.
    let mut methods_elsewhere = Vec::new();
    for facts in files.values() {
        for (path, methods) in &facts.impls {
            let Some(owner) = locate(&files, &facts.module, path, 0) else {
                continue;
            };
            if owner != facts.module && !methods.is_empty() {
                let name = path.last().cloned().unwrap_or_default();
                methods_elsewhere.push((files[&owner].file.clone(), name, &facts.file, methods));
            }
        }
    }
    let by_path = edges.clone();
    for facts in files.values() {
        for (owner, name, defined_in, methods) in &methods_elsewhere {
            let names_type = facts.file == *owner
                || by_path
                    .get(&facts.file)
                    .is_some_and(|to| to.contains_key(owner))
                    && has_word(&facts.code, name);
            if !names_type || facts.file == **defined_in {
                continue;
            }
            let called = methods.iter().find_map(|method| {
                [
                    format!(".{method}("),
                    format!(".{method}::<"),
                    format!("{name}::{method}"),
                    format!("Self::{method}"),
                ]
                .into_iter()
                .find(|call| match call.strip_prefix('.') {
                    Some(_) => facts.code.contains(call.as_str()),
                    None => has_word(&facts.code, call),
                })
            });
            if let Some(call) = called {
                let call = call.trim_end_matches(['(', ':', '<']);
                let call = if call.starts_with('.') {
                    format!("{call}()")
                } else {
                    call.to_owned()
                };
                edges
                    .entry(facts.file.clone())
                    .or_default()
                    .entry((*defined_in).clone())
                    .or_insert(format!("{call}, a method of {name}"));
            }
        }
    }
    edges
}

/// Whether `code` has `word` as a whole identifier.
fn has_word(code: &str, word: &str) -> bool {
    let bytes = code.as_bytes();
    code.match_indices(word).any(|(at, _)| {
        (at == 0 || !is_ident(bytes[at - 1]))
            && !bytes.get(at + word.len()).copied().is_some_and(is_ident)
    })
}

/// The strongly connected components of more than one node: each a set of files that all
/// reach each other (Tarjan's algorithm).
fn tangles(edges: &Edges) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let order = self.index.len();
            self.index.insert(node, order);
            self.low.insert(node, order);
            self.stack.push(node);
            for next in self.edges.get(node).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    component.insert(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found.sort();
    walk.found
}

/// One loop through `component`, the shortest from its first file back to it, each step with
/// the path that makes it.
fn witness(edges: &Edges, component: &BTreeSet<String>) -> Vec<String> {
    let Some(start) = component.first() else {
        return Vec::new();
    };
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.as_str()]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !component.contains(next) || came_from.contains_key(next.as_str()) {
                continue;
            }
            came_from.insert(next, node);
            if next == start {
                queue.clear();
                break;
            }
            queue.push_back(next);
        }
    }
    let mut steps = Vec::new();
    let mut node = start.as_str();
    while let Some(&from) = came_from.get(node) {
        steps.push(format!("{from} -> {node} ({})", edges[from][node]));
        node = from;
        if node == start {
            break;
        }
    }
    steps.reverse();
    steps
}

/// File cycles that are known and not broken yet, each with why. A cycle found must lie within
/// one entry (it may shrink while it is untangled; a new one, or one that takes in another file,
/// fails), and an entry that no cycle needs any more must go.
const KNOWN_FILE_CYCLES: &[(&[&str], &str)] = &[];

/// The sources of the library, each relative to `src/` (`main.rs` is the binary's crate: it names
/// the library as `tokenmeter::`).
fn library_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files
        .iter()
        .map(|file| {
            let relative = file.strip_prefix(&src).expect("under src");
            let name = relative
                .iter()
                .map(|part| part.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            (name, std::fs::read_to_string(file).expect("read source"))
        })
        .filter(|(name, _)| name != "main.rs")
        .collect()
}

#[test]
fn files_depend_on_each_other_one_way() {
    let edges = file_graph(&library_sources());
    let found = tangles(&edges);
    let describe = |component: &BTreeSet<String>| {
        let files: Vec<&str> = component.iter().map(String::as_str).collect();
        format!(
            "{} files: {}\n    {}",
            files.len(),
            files.join(", "),
            witness(&edges, component).join("\n    ")
        )
    };
    let known = |component: &BTreeSet<String>| {
        KNOWN_FILE_CYCLES
            .iter()
            .any(|(files, _)| component.iter().all(|file| files.contains(&file.as_str())))
    };
    let new: Vec<String> = found
        .iter()
        .filter(|component| !known(component))
        .map(describe)
        .collect();
    let stale: Vec<String> = KNOWN_FILE_CYCLES
        .iter()
        .filter(|(files, _)| {
            !found
                .iter()
                .any(|component| component.iter().all(|file| files.contains(&file.as_str())))
        })
        .map(|(files, _)| files.join(", "))
        .collect();
    assert!(
        new.is_empty(),
        "files that depend on each other in a cycle (each set reaches itself; one loop shown, \
         with the path that makes each step):\n{}\nall cycles found:\n{}",
        new.join("\n"),
        found.iter().map(describe).collect::<Vec<_>>().join("\n")
    );
    assert!(
        stale.is_empty(),
        "KNOWN_FILE_CYCLES lists cycles that are gone (remove them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_file_graph_follows_reexports_and_child_paths() {
    let sources: Vec<(String, String)> = [
        (
            "a/mod.rs",
            "mod inner;\nmod router;\nmod serve;\npub use inner::Deep;\npub use router::Router;\n\
             use std::sync::Arc;\npub fn go() { serve::run(); }",
        ),
        ("a/router.rs", "use super::serve::Hook;\npub struct Router;"),
        (
            "a/serve.rs",
            "pub struct Hook;\npub fn run() { let _ = super::Router; let _: super::Arc<()>; }\n\
             #[cfg(test)]\nmod tests { use super::*; }",
        ),
        ("a/inner.rs", "mod deeper;\npub(crate) use self::deeper::{Deep, Other as Alias};"),
        ("a/inner/deeper.rs", "pub struct Deep; pub struct Other;"),
        (
            "b.rs",
            "use crate::a::Deep; // crate::a::router::Router\nfn f() { let _ = \"crate::a::serve::run\"; }",
        ),
        ("c.rs", "mod d;\npub use d::D;\npub fn make() -> D { D }"),
        ("c/d.rs", "pub struct D;"),
        (
            "m.rs",
            "mod extra;\nmod kind;\nmod last;\nmod other;\nuse kind::Kind;\npub fn f(k: &Kind) { k.more(); }",
        ),
        ("m/kind.rs", "pub struct Kind;\nconst E: char = 'é'; impl Kind {}"),
        (
            "m/extra.rs",
            "use super::kind::Kind;\nimpl Kind {\n    pub(super) fn more(&self) {}\n    \
             pub(super) fn make() -> Kind { Kind }\n    fn private(&self) {}\n}",
        ),
        (
            "m/other.rs",
            "use super::kind::Kind;\nfn g() -> Kind { Kind::make() }",
        ),
        ("m/last.rs", "use super::kind::Kind;\nfn h(k: &Kind) { k.private(); }"),
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod m;"),
    ]
    .into_iter()
    .map(|(file, text)| (file.to_owned(), text.to_owned()))
    .collect();
    let edges = file_graph(&sources);
    let pairs: BTreeSet<(&str, &str)> = edges
        .iter()
        .flat_map(|(from, to)| to.keys().map(move |to| (from.as_str(), to.as_str())))
        .collect();
    let expected = BTreeSet::from([
        ("a/mod.rs", "a/serve.rs"),
        ("a/router.rs", "a/serve.rs"),
        ("a/serve.rs", "a/router.rs"),
        ("b.rs", "a/inner/deeper.rs"),
        ("c.rs", "c/d.rs"),
        ("m.rs", "m/kind.rs"),
        ("m.rs", "m/extra.rs"),
        ("m/extra.rs", "m/kind.rs"),
        ("m/other.rs", "m/kind.rs"),
        ("m/other.rs", "m/extra.rs"),
        ("m/last.rs", "m/kind.rs"),
    ]);
    assert_eq!(
        pairs, expected,
        "`serve::run` is an edge to the child; `super::Router` and `crate::a::Deep` follow the \
         re-exports (through `inner`'s own) to the files that define them; the `pub use` lines of \
         `a` and `inner` are no edges, `c`'s is one because `c` uses `D` itself; `super::Arc` \
         leaves the crate; `use super::*` in an inline module stays in its file; comments and \
         strings are skipped; `k.more()` and `Kind::make()` are edges to the file with that \
         `impl Kind`, a call of a method that is not `pub` is none; a non-ASCII char in code \
         reads fine"
    );
    assert_eq!(
        tangles(&edges),
        vec![BTreeSet::from([
            "a/router.rs".to_owned(),
            "a/serve.rs".to_owned()
        ])],
        "the one cycle, as the set of its files"
    );
    let component = &tangles(&edges)[0];
    assert_eq!(
        witness(&edges, component),
        vec![
            "a/router.rs -> a/serve.rs (super::serve::Hook)",
            "a/serve.rs -> a/router.rs (super::Router)"
        ],
        "a loop through the cycle, each step with its path"
    );
    let mut chain = edges.clone();
    chain.remove("a/serve.rs");
    assert!(tangles(&chain).is_empty(), "a chain is no cycle");
}
