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
            waiting: 5,
            kv_usage: 0.42
        },
        "waiting summed over models, KV usage read as a fraction"
    );
    assert_eq!(
        VllmGauges::parse("garbage\n"),
        VllmGauges::default(),
        "unparseable text reads as idle"
    );
}
