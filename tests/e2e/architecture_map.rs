//! The map of the code in docs/architecture.md cannot drift from the code: its module table names
//! every module of `src/` and every file of each (a new file without a line in the map fails),
//! every file it names exists, and its diagram shows the stack's layers in the order
//! `src/server/live.rs` builds them.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md")
}

/// The rows of the table headed `| module | owns |`: (first cell, second cell).
fn module_rows(map: &str) -> Vec<(String, String)> {
    let mut lines = map
        .lines()
        .skip_while(|line| !line.starts_with("| module | owns |"));
    lines
        .next()
        .expect("docs/architecture.md has the module table");
    lines
        .skip(1)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').splitn(2, '|').collect();
            (
                cells[0].trim().to_owned(),
                cells.get(1).map_or("", |c| c.trim()).to_owned(),
            )
        })
        .collect()
}

/// Every `backticked` span of a cell.
fn backticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether a backticked span is a path of the tree (`x.rs`, `x/y.rs`, `x/`), not a URL or a name.
fn is_path(item: &str) -> bool {
    (item.ends_with(".rs") || item.ends_with('/'))
        && !item.starts_with('/')
        && item
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/'))
}

/// Every `.rs` file under `dir` that is not a test (`tests.rs`, or anything in a `tests/` folder).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The crate's top-level modules: `src/x.rs` and `src/x/`, but the crate roots.
fn top_level_modules() -> BTreeSet<String> {
    std::fs::read_dir(root().join("src"))
        .expect("src")
        .filter_map(|entry| {
            let path = entry.expect("entry").path();
            let name = path.file_name()?.to_str()?.to_owned();
            let module = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
            let root_file = matches!(name.as_str(), "lib.rs" | "main.rs");
            (!root_file && (path.is_dir() || name.ends_with(".rs"))).then_some(module)
        })
        .collect()
}

#[test]
fn the_module_table_names_every_module_and_file() {
    let map = architecture();
    let src = root().join("src");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (module_cell, owns) in module_rows(&map) {
        let Some(path) = backticked(&module_cell).into_iter().next() else {
            problems.push(format!("a row names no module: {module_cell}"));
            continue;
        };
        let name = path
            .trim_start_matches("src/")
            .trim_end_matches('/')
            .trim_end_matches(".rs")
            .to_owned();
        let dir = src.join(&name);
        let file = src.join(format!("{name}.rs"));
        if !dir.is_dir() && !file.is_file() {
            problems.push(format!("{path}: no such module"));
            continue;
        }
        seen.insert(name.clone());
        // What the row names: files and folders, relative to the module's folder (or to src/,
        // for the module's own file).
        let mut named_files = BTreeSet::new();
        let mut named_dirs = Vec::new();
        let paths = backticked(owns.as_str())
            .into_iter()
            .filter(|item| is_path(item));
        for item in paths {
            if item.ends_with('/') {
                let folder = dir.join(item);
                if folder.is_dir() {
                    named_dirs.push(folder);
                } else {
                    problems.push(format!(
                        "{path}: names `{item}`, which is not a folder of it"
                    ));
                }
            } else if item.ends_with(".rs") {
                let found = [dir.join(item), src.join(item)]
                    .into_iter()
                    .find(|candidate| candidate.is_file());
                match found {
                    Some(found) => {
                        named_files.insert(found);
                    }
                    None => problems.push(format!("{path}: names `{item}`, which does not exist")),
                }
            }
        }
        let mut files = Vec::new();
        sources(&dir, &mut files);
        for source in files {
            let covered = named_files.contains(&source)
                || named_dirs.iter().any(|folder| source.starts_with(folder));
            if !covered {
                let relative = source.strip_prefix(&src).unwrap_or(&source);
                problems.push(format!(
                    "{path}: src/{} is not in its row",
                    relative.display()
                ));
            }
        }
    }
    for module in top_level_modules() {
        if !seen.contains(&module) {
            problems.push(format!("src/{module} has no row in the module table"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's module table and src/ disagree:\n{}",
        problems.join("\n")
    );
}

/// The identifier that ends `text`.
fn last_word(text: &str) -> &str {
    let start = text
        .rfind(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .map_or(0, |at| at + 1);
    &text[start..]
}

#[test]
fn the_diagram_shows_the_stack_in_the_order_it_is_built() {
    let live = std::fs::read_to_string(root().join("src/server/live.rs")).expect("live.rs");
    // The tower layers in the order the builder stacks them (`.layer(AdmissionLayer::new` ->
    // admission, `.layer(MeterLayer::new` -> meter), then the phases below the meter in the order
    // their type nests them (`type Phases = Then<Plan, Then<Option<Budget>, ...` -> plan,
    // budget, ...; `Option` marks a phase only some configs have).
    let builder = live
        .split("tower::ServiceBuilder::new()")
        .nth(1)
        .expect("live.rs builds the stack with a ServiceBuilder");
    let builder = &builder[..builder.find(';').expect("the builder ends")];
    let mut layers: Vec<String> = builder
        .split("Layer::new")
        .filter(|item| item.contains("layer("))
        .map(|before| last_word(before).to_lowercase())
        .collect();
    let (_, phases) = live
        .split_once("type Phases = ")
        .expect("live.rs names the phases' type");
    let phases = &phases[..phases.find(';').expect("the type ends")];
    layers.extend(
        phases
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|name| !name.is_empty() && !matches!(*name, "Then" | "Option"))
            .map(str::to_lowercase),
    );
    assert_eq!(
        layers,
        [
            "admission",
            "meter",
            "plan",
            "budget",
            "dispatch",
            "handoff",
            "forward"
        ],
        "the stack live.rs builds (update the diagram and this list together)"
    );

    let map = architecture();
    let diagram = map
        .split("## How it works")
        .nth(1)
        .and_then(|section| section.split("```").nth(1))
        .expect("a diagram under How it works");
    let mut from = 0;
    for layer in &layers {
        let stage = format!("│ {layer} ");
        let at = diagram[from..].find(&stage).unwrap_or_else(|| {
            panic!("the diagram shows no stage `{layer}` after the previous one:\n{diagram}")
        });
        from += at + stage.len();
    }
    for part in ["TLS", "finish"] {
        assert!(
            diagram.contains(part),
            "the diagram shows {part}:\n{diagram}"
        );
    }
}

#[test]
fn the_checker_finds_what_is_missing() {
    let rows =
        module_rows("| module | owns |\n|---|---|\n| `src/a/` | `x.rs` (one), `y/` |\n\nafter");
    assert_eq!(
        rows,
        vec![("`src/a/`".to_owned(), "`x.rs` (one), `y/`".to_owned())],
        "one row, two cells"
    );
    assert_eq!(backticked("`x.rs` (one), `y/`"), vec!["x.rs", "y/"]);
    assert!(
        is_path("h1/idle.rs") && is_path("h1/"),
        "files and folders are paths"
    );
    assert!(
        !is_path("https://") && !is_path("/metrics"),
        "URLs and routes are not"
    );
}
