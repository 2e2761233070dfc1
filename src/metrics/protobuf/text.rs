//! The exporter's text exposition (counters and gauges) read back into families, so that the
//! protobuf exposition carries every family the text one does. Only what tokenmeter's renderers
//! write is read: `# HELP` / `# TYPE` lines and `name{labels} value` samples, label values and
//! help escaped as the text format escapes them, and unescaped here: reading the text is this
//! file's alone, so the encoder in `protobuf.rs` uses it and it uses nothing of the encoder.

/// One family of the text exposition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TextFamily {
    pub name: String,
    pub help: Option<String>,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
    pub samples: Vec<TextSample>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TextSample {
    /// The sample's own name (a histogram's `_bucket`, `_sum`, `_count` differ from the family's).
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// The families of `text`, in order of first appearance. A sample before any `# TYPE` line for
/// its name starts an untyped family; lines that do not parse are skipped.
pub fn families(text: &str) -> Vec<TextFamily> {
    let mut out: Vec<TextFamily> = Vec::new();
    let family_of = |out: &mut Vec<TextFamily>, name: &str| -> usize {
        match out.iter().rposition(|family| family.name == name) {
            Some(index) => index,
            None => {
                out.push(TextFamily {
                    name: name.to_owned(),
                    kind: "untyped".to_owned(),
                    ..TextFamily::default()
                });
                out.len() - 1
            }
        }
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let index = family_of(&mut out, name);
            out[index].help = Some(unescape(help));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let index = family_of(&mut out, name);
            out[index].kind = kind.trim().to_owned();
        } else if line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else if let Some(sample) = sample(line) {
            let family = family_name(&out, &sample.name);
            let index = family_of(&mut out, &family);
            out[index].samples.push(sample);
        }
    }
    out
}

/// The family a sample belongs to: its own name, or for `_bucket` / `_sum` / `_count` the
/// histogram or summary family it is part of.
fn family_name(families: &[TextFamily], sample: &str) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix) {
            let composite = families
                .iter()
                .any(|f| f.name == base && (f.kind == "histogram" || f.kind == "summary"));
            if composite {
                return base.to_owned();
            }
        }
    }
    sample.to_owned()
}

/// One sample line: `name{label="value",...} value [timestamp]`.
fn sample(line: &str) -> Option<TextSample> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest.split_once("=\"")?;
            let (value, after) = quoted(after)?;
            labels.push((key.trim().to_owned(), value));
            rest = after;
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        other => other.parse().ok()?,
    };
    Some(TextSample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The label value up to its closing quote (escapes undone), and what follows the quote.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match (c, escaped) {
            ('\\', false) => escaped = true,
            ('"', false) => return Some((unescape(&text[..i]), &text[i + 1..])),
            _ => escaped = false,
        }
    }
    None
}

/// Undoes the text format's escapes (`\\`, `\n`, `\"`).
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}
