//! Reading the Prometheus text exposition in tests: values by name and labels, and a format check.
use std::collections::BTreeMap;

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses every sample line; panics on a line that is not valid exposition format.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("not a valid sample line: {line:?}")))
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid_name {
        return None;
    }
    let mut map = BTreeMap::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let end = after.find('"')?;
        map.insert(
            key.trim_start_matches(',').to_owned(),
            after[..end].to_owned(),
        );
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(Sample {
        name: name.to_owned(),
        labels: map,
        value,
    })
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
        .filter(|sample| {
            sample.name == name
                && labels
                    .iter()
                    .all(|(k, v)| sample.labels.get(*k).map(String::as_str) == Some(*v))
        })
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
