//! Reading a Prometheus text exposition the way Prometheus would: sample lines, counter sums, and
//! `histogram_quantile` over buckets summed across series. The demo prints the proxy's view with it
//! (so its figures are the ones a dashboard would show); the tests read `/metrics` with it.
use std::collections::BTreeMap;

/// One parsed sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of an exposition text; lines that do not parse are skipped.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

/// One sample line (`name{labels} value`), `None` if it is not one.
pub fn parse_line(line: &str) -> Option<Sample> {
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

/// Whether the sample is named `name` and carries every label of `filter`.
pub fn matches(sample: &Sample, name: &str, filter: &[(&str, &str)]) -> bool {
    sample.name == name
        && filter
            .iter()
            .all(|(k, v)| sample.labels.get(*k).map(String::as_str) == Some(*v))
}

/// The sum of every sample named `name` whose labels include `filter`.
pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| matches(s, name, filter))
        .map(|s| s.value)
        .sum()
}

/// `histogram_quantile(q, sum by (le) (name_bucket{filter}))` as Prometheus computes it: linear
/// interpolation inside the bucket holding the rank; the highest finite edge when the rank falls in
/// the +Inf bucket; `None` without observations.
pub fn histogram_quantile(
    samples: &[Sample],
    name: &str,
    filter: &[(&str, &str)],
    q: f64,
) -> Option<f64> {
    let bucket_name = format!("{name}_bucket");
    let mut buckets: BTreeMap<OrderedEdge, f64> = BTreeMap::new();
    for sample in samples.iter().filter(|s| matches(s, &bucket_name, filter)) {
        let edge = match sample.labels.get("le").map(String::as_str) {
            Some("+Inf") => f64::INFINITY,
            Some(text) => text.parse().ok()?,
            None => continue,
        };
        *buckets.entry(OrderedEdge(edge)).or_default() += sample.value;
    }
    let total = *buckets.values().last()?;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower_edge = 0.0;
    let mut lower_count = 0.0;
    for (edge, count) in &buckets {
        if *count >= rank {
            if edge.0.is_infinite() {
                return Some(lower_edge);
            }
            let width = count - lower_count;
            let fraction = if width > 0.0 {
                (rank - lower_count) / width
            } else {
                1.0
            };
            return Some(lower_edge + (edge.0 - lower_edge) * fraction);
        }
        lower_edge = edge.0;
        lower_count = *count;
    }
    Some(lower_edge)
}

/// A bucket edge with a total order (edges are finite or +Inf, never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedEdge(f64);

impl Eq for OrderedEdge {}

impl PartialOrd for OrderedEdge {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedEdge {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests;
