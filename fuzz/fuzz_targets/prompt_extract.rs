//! The request side: arbitrary request bodies through inspection (model, stream), the usage
//! injection, and the prompt-size extraction of the router. Must never panic; an injected body must
//! still parse and say the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenmeter::request::{inject_include_usage, inspect, prompt_size, Injection};

fuzz_target!(|body: &[u8]| {
    let facts = inspect(body);
    let _ = prompt_size(body);
    if let Injection::Injected(rewritten) = inject_include_usage(body) {
        let again = inspect(&rewritten).expect("an injected body is still a request");
        let before = facts.expect("only a parsed request is rewritten");
        assert_eq!(again.model, before.model, "injection keeps the model");
        assert_eq!(again.stream, before.stream, "injection keeps stream");
        assert!(
            matches!(inject_include_usage(&rewritten), Injection::NotNeeded),
            "injection is idempotent"
        );
    }
});
