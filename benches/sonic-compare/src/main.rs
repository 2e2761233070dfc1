//! How fast sonic-rs's lazy path getters read what the meter needs from a vLLM chunk, next to
//! tokenmeter's skim fast path and its serde walk. Run from this folder: cargo run --release (docs/performance.md)
use std::hint::black_box;
use std::time::Instant;

const CHUNK: &[u8] = br#"{"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1764400000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}"#;

thread_local! {
    /// The three paths, built once (as a classifier would).
    static TREE: sonic_rs::PointerTree = {
        let mut tree = sonic_rs::PointerTree::new();
        tree.add_path(sonic_rs::pointer!["choices", 0, "delta", "content"]);
        tree.add_path(sonic_rs::pointer!["choices", 0, "finish_reason"]);
        tree.add_path(sonic_rs::pointer!["usage"]);
        tree
    };
}

/// The fields the meter reads, through sonic-rs: token (any choice's delta content non-empty),
/// finish_reason non-null, usage present. Only the first choice, and no validation of the rest:
/// less than the meter needs, so a lower bound for a sonic-rs classifier.
fn sonic(data: &[u8]) -> (bool, bool, bool) {
    summarize(TREE.with(|tree| unsafe { sonic_rs::get_many_unchecked(data, tree) }))
}

/// The same with validation (`get_many`, the safe API).
fn sonic_checked(data: &[u8]) -> (bool, bool, bool) {
    summarize(TREE.with(|tree| sonic_rs::get_many(data, tree)))
}

/// (token, finish, usage) from the three looked-up values.
fn summarize(found: sonic_rs::Result<Vec<Option<sonic_rs::LazyValue<'_>>>>) -> (bool, bool, bool) {
    use sonic_rs::JsonValueTrait;
    let Ok(values) = found else {
        return (false, false, false);
    };
    let token = values[0].as_ref().and_then(|v| v.as_str()).is_some_and(|s| !s.is_empty());
    let finish = values[1].as_ref().is_some_and(|v| !v.is_null());
    let usage = values[2].as_ref().is_some_and(|v| !v.is_null());
    (token, finish, usage)
}

fn time<T>(name: &str, f: impl Fn(&[u8]) -> T) {
    let n = 2_000_000;
    for _ in 0..100_000 {
        black_box(f(black_box(CHUNK)));
    }
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            black_box(f(black_box(CHUNK)));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
    }
    println!("{name:<28} {best:6.1} ns per chunk (best of 5 x {n})");
}

fn main() {
    assert_eq!(sonic(CHUNK), (true, false, false));
    assert_eq!(sonic_checked(CHUNK), (true, false, false));
    time("skim (tokenmeter fast path)", tokenmeter::dialect::openai::classify);
    time("serde walk (tokenmeter)", tokenmeter::dialect::openai::classify_parsed);
    time("sonic-rs get_many", sonic_checked);
    time("sonic-rs get_many_unchecked", sonic);
}
