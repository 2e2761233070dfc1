//! What a replica publishes of its load and reads of the others': one line per backend it has
//! load on, `<pool>\t<backend>\t<streams>\t<queued prompt tokens>`. Text, so that `redis-cli
//! hgetall` shows an operator what each replica sees; a few dozen bytes a backend.
use std::collections::HashMap;

/// One replica's load on one backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub streams: u64,
    pub queued_tokens: u64,
}

impl Figures {
    fn add(&mut self, other: Figures) {
        self.streams = self.streams.saturating_add(other.streams);
        self.queued_tokens = self.queued_tokens.saturating_add(other.queued_tokens);
    }

    fn is_zero(self) -> bool {
        self == Figures::default()
    }
}

/// The payload of `entries` (pool, backend label, figures): backends with no load are left out
/// (absent reads as none), and so is a name with a tab or a line break in it, which the format
/// cannot carry (no pool name or backend address has one).
pub fn encode<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str, Figures)>) -> String {
    let mut out = String::new();
    for (pool, backend, figures) in entries {
        if figures.is_zero()
            || [pool, backend]
                .iter()
                .any(|name| name.contains(['\t', '\n']))
        {
            continue;
        }
        let Figures {
            streams,
            queued_tokens,
        } = figures;
        out.push_str(&format!("{pool}\t{backend}\t{streams}\t{queued_tokens}\n"));
    }
    out
}

/// The others' load per (pool, backend label), summed over the `payloads` of every other
/// replica. A line that does not read (a replica of another version, a torn write) is skipped.
pub fn sum<'a>(
    payloads: impl IntoIterator<Item = &'a str>,
) -> HashMap<(&'a str, &'a str), Figures> {
    let mut sums: HashMap<(&str, &str), Figures> = HashMap::new();
    for line in payloads.into_iter().flat_map(str::lines) {
        let mut fields = line.split('\t');
        let (Some(pool), Some(backend), Some(streams), Some(queued), None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let (Ok(streams), Ok(queued_tokens)) = (streams.parse(), queued.parse()) else {
            continue;
        };
        sums.entry((pool, backend)).or_default().add(Figures {
            streams,
            queued_tokens,
        });
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(streams: u64, queued_tokens: u64) -> Figures {
        Figures {
            streams,
            queued_tokens,
        }
    }

    #[test]
    fn encodes_backends_with_load_one_line_each() {
        let payload = encode([
            ("chat", "10.0.0.1:8000", figures(3, 1200)),
            ("chat", "10.0.0.2:8000", figures(0, 0)),
            ("docs", "10.0.0.3:8000", figures(0, 9000)),
            ("bad\tname", "10.0.0.4:8000", figures(1, 1)),
        ]);
        assert_eq!(
            payload,
            "chat\t10.0.0.1:8000\t3\t1200\ndocs\t10.0.0.3:8000\t0\t9000\n"
        );
    }

    #[test]
    fn sums_the_others_per_backend_and_skips_what_does_not_read() {
        let a = encode([
            ("chat", "b1", figures(3, 1200)),
            ("chat", "b2", figures(1, 0)),
        ]);
        let b = "chat\tb1\t2\t800\nchat\tb1\tx\t1\ngarbage\nchat\tb2\t1\t2\t3\n".to_owned();
        let sums = sum([a.as_str(), b.as_str()]);
        assert_eq!(sums.len(), 2);
        assert_eq!(sums[&("chat", "b1")], figures(5, 2000));
        assert_eq!(sums[&("chat", "b2")], figures(1, 0));
    }
}
