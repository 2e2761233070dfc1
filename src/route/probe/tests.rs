use super::*;

#[test]
fn vllm_gauges_are_read_from_prometheus_text() {
    let text = "# HELP vllm:num_requests_waiting Waiting.\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"a\"} 3.0\n\
vllm:num_requests_waiting{model_name=\"b\"} 2\n\
vllm:num_requests_running{model_name=\"a\"} 9\n\
vllm:kv_cache_usage_perc{model_name=\"a\"} 0.42\n";
    assert_eq!(
        VllmGauges::parse(text),
        VllmGauges {
            running: 9,
            waiting: 5,
            kv_usage: 0.42
        },
        "waiting summed over models, KV usage read as a fraction"
    );
    let sglang =
        "sglang:num_running_reqs{model_name=\"a\"} 4\nsglang:num_queue_reqs{model_name=\"a\"} 2\n";
    let llama = "llamacpp:requests_processing 1\nllamacpp:requests_deferred 3\n";
    for (engine, text, running, waiting) in [("SGLang", sglang, 4, 2), ("llama.cpp", llama, 1, 3)] {
        assert_eq!(
            VllmGauges::parse(text),
            VllmGauges {
                running,
                waiting,
                kv_usage: 0.0
            },
            "{engine}'s requests running and waiting"
        );
    }
    assert_eq!(
        VllmGauges::parse("garbage\n"),
        VllmGauges::default(),
        "unparseable text reads as idle"
    );
}
