//! Reading the Prometheus text exposition in tests: the crate's own reader, strict (a line that is
//! not a valid sample fails the test), plus a few lookups.
pub use tokenmeter::metrics::exposition::Sample;
use tokenmeter::metrics::exposition::{matches, parse_line};

/// Parses every sample line; panics on a line that is not valid exposition format.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let sample =
                parse_line(line).unwrap_or_else(|| panic!("not a valid sample line: {line:?}"));
            let name = &sample.name;
            let valid_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            assert!(valid_name, "invalid metric name in {line:?}");
            sample
        })
        .collect()
}

/// The value of the one sample with this name whose labels include all of `labels`; panics when there
/// is none or several.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<Sample> = find(text, name, labels);
    assert_eq!(
        matching.len(),
        1,
        "expected exactly one {name} sample with {labels:?}, got {matching:?}\n{text}"
    );
    matching[0].value
}

/// The sum over samples with this name whose labels include all of `labels` (0 when none).
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    find(text, name, labels).iter().map(|s| s.value).sum()
}

pub fn find(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<Sample> {
    parse(text)
        .into_iter()
        .filter(|sample| matches(sample, name, labels))
        .collect()
}

/// Names declared `# TYPE name histogram`.
pub fn histogram_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" histogram"))
        .map(str::to_owned)
        .collect()
}
