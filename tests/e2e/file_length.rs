//! A production file over 400 lines says why, in its module docs (a line that starts
//! `//! Long on purpose:`), or it is split: one idea per file is what keeps the folder tree
//! readable, and a file that grows past this has usually taken a second idea in. Tests
//! (`tests.rs`, anything under a `tests/` folder) are left out: a subject's cases belong together.
use std::path::{Path, PathBuf};

/// Lines a production file may have without saying why.
const LIMIT: usize = 400;

/// The marker of a file long on purpose.
const MARKER: &str = "//! Long on purpose:";

fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                production_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// Whether `text` says why it is long: the marker, followed by a reason.
fn says_why(text: &str) -> bool {
    text.lines()
        .take_while(|line| line.starts_with("//!") || line.trim().is_empty())
        .any(|line| {
            line.strip_prefix(MARKER)
                .is_some_and(|reason| reason.trim().len() > 10)
        })
}

#[test]
fn long_production_files_say_why() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    production_files(&src, &mut files);
    let mut unexplained: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).expect("read source");
            let lines = text.lines().count();
            (lines > LIMIT && !says_why(&text)).then(|| {
                let shown = file.strip_prefix(&src).unwrap_or(file).display();
                format!("src/{shown}: {lines} lines")
            })
        })
        .collect();
    unexplained.sort();
    assert!(
        unexplained.is_empty(),
        "over {LIMIT} lines without a `{MARKER} <reason>` line in the module docs (split it, or \
         say why it is one idea):\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn the_marker_needs_a_reason() {
    assert!(says_why(
        "//! The scanner.\n//!\n//! Long on purpose: one state machine.\nuse x;\n"
    ));
    assert!(!says_why(
        "//! The scanner.\n//! Long on purpose:\nuse x;\n"
    ));
    assert!(
        !says_why("//! The scanner.\nuse x;\n// Long on purpose: one state machine.\n"),
        "only the module docs count"
    );
}
