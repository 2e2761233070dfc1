use super::*;

fn tokens(range: std::ops::Range<u64>) -> Vec<u64> {
    range.collect()
}

#[test]
fn a_shared_prefix_hits_by_whole_blocks_and_a_differing_block_ends_the_match() {
    let mut cache = PrefixCache::default();
    let first = tokens(0..50);
    assert_eq!(cache.lookup(&first), 0, "empty cache");
    cache.insert(&first);
    assert_eq!(cache.cached_tokens(), 48, "three full blocks of 50 tokens");
    let mut longer = tokens(0..50);
    longer.extend(100..130);
    assert_eq!(
        cache.lookup(&longer),
        48,
        "the conversation grew: its 3 blocks hit"
    );
    let mut changed = tokens(0..50);
    changed[20] = 999;
    assert_eq!(
        cache.lookup(&changed),
        16,
        "a token in block 2 differs: block 1 hits, nothing after it (the hash chain)"
    );
    let mut shifted = vec![7];
    shifted.extend(0..50);
    assert_eq!(
        cache.lookup(&shifted),
        0,
        "same tokens, shifted: no block matches"
    );
}

#[test]
fn a_whole_cached_prompt_still_computes_its_last_token() {
    let mut cache = PrefixCache::default();
    let prompt = tokens(0..32);
    cache.insert(&prompt);
    assert_eq!(
        cache.lookup(&prompt),
        31,
        "at most prompt - 1 tokens cached"
    );
}

#[test]
fn the_least_recently_used_blocks_go_first() {
    let mut cache = PrefixCache::default();
    let a = tokens(0..32);
    let b = tokens(1000..1032);
    cache.insert(&a);
    cache.insert(&b);
    assert_eq!(cache.lookup(&a), 31, "a used again: b is now the oldest");
    cache.fit(32);
    assert_eq!(cache.cached_tokens(), 32, "room for two blocks");
    assert_eq!(cache.lookup(&a), 31, "a kept");
    assert_eq!(cache.lookup(&b), 0, "b evicted");
    cache.fit(0);
    assert_eq!(cache.cached_tokens(), 0, "no room: everything goes");
}
