use super::*;

/// Renders the metrics of `model` after `update` and checks that each of `blocks` (whole lines)
/// stands in the exposition.
fn assert_renders(model: &str, update: impl FnOnce(&mut MetricsState), blocks: &[&str]) {
    let metrics = SimMetrics::new(model);
    metrics.update(update);
    let text = metrics.render();
    for block in blocks {
        assert!(text.contains(block), "missing {block:?} in\n{text}");
    }
}

#[test]
fn histogram_buckets_are_le_and_cumulative() {
    assert_renders(
        "m",
        |s| {
            s.ttft.observe(0.001);
            s.ttft.observe(0.0011);
            s.ttft.observe(5000.0);
        },
        &[
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.001\"} 1\n",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.005\"} 2\n",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"2560.0\"} 2\n",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3\n",
            "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 3\n",
        ],
    );
}

#[test]
fn gauges_counters_and_label_escaping() {
    assert_renders(
        "a\"b",
        |s| {
            s.running = 3;
            s.kv_usage = 0.25;
            s.prompt_tokens = 42;
            s.success = 2;
        },
        &[
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"a\\\"b\"} 3.0\n",
            "vllm:kv_cache_usage_perc{model_name=\"a\\\"b\"} 0.25\n",
            "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"a\\\"b\"} 42\n",
            "vllm:request_success_total{model_name=\"a\\\"b\",finished_reason=\"length\"} 2\n",
        ],
    );
}

#[test]
fn every_histogram_has_its_reference_edges() {
    let text = SimMetrics::new("m").render();
    let sets: [(&str, &[f64]); 4] = [
        ("vllm:time_to_first_token_seconds", &TTFT_BUCKETS),
        ("vllm:inter_token_latency_seconds", &ITL_BUCKETS),
        ("vllm:e2e_request_latency_seconds", &REQUEST_BUCKETS),
        ("vllm:request_queue_time_seconds", &REQUEST_BUCKETS),
    ];
    for (name, edges) in sets {
        let prefix = format!("{name}_bucket{{model_name=\"m\",le=\"");
        let got: Vec<f64> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix)?.split('"').next())
            .filter(|edge| *edge != "+Inf")
            .filter_map(|edge| edge.parse().ok())
            .collect();
        assert_eq!(got, edges, "{name} has exactly the reference edges");
    }
}

/// The sources of one `prompt` of which `cached` tokens were not computed here, `transferred`
/// of them received from another replica.
fn sources_of(prompt: u64, cached: u64, transferred: u64) -> PromptSources {
    let mut sources = PromptSources::default();
    sources.record(prompt, cached, transferred);
    sources
}

#[test]
fn prompt_sources_follow_vllms_arithmetic() {
    let partial = sources_of(100, 96, 0);
    assert_eq!(
        (partial.local_compute, partial.local_cache_hit),
        (4, 96),
        "a partial prefix-cache hit"
    );
    // (prompt, cached, transferred) recorded, (local compute, local hits, received) counted.
    for ((prompt, cached, transferred), (compute, hit, received), what) in [
        ((100, 0, 0), (100, 0, 0), "a cold prompt is computed"),
        (
            (4000, 3999, 3999),
            (1, 1, 3999),
            "a pulled prompt: its last token is computed, and counted as a recomputed hit as vLLM does",
        ),
        (
            (100, 99, 3),
            (1, 97, 3),
            "local hits first, the rest of the prompt but one received",
        ),
    ] {
        assert_eq!(
            sources_of(prompt, cached, transferred),
            PromptSources {
                local_compute: compute,
                local_cache_hit: hit,
                external_kv_transfer: received
            },
            "{what}"
        );
    }
}

#[test]
fn kv_transfer_counters_are_rendered_by_label() {
    assert_renders(
        "m",
        |s| {
            s.kv_transfer_sent = 4000;
            s.kv_transfer_received = 17;
            s.prompt_sources.record(4000, 3999, 3999);
        },
        &[
            "# HELP vllm:kv_transfer_tokens_total Prompt tokens whose KV cache was sent to or received from another replica.\n\
             # TYPE vllm:kv_transfer_tokens_total counter\n\
             vllm:kv_transfer_tokens_total{model_name=\"m\",direction=\"sent\"} 4000\n\
             vllm:kv_transfer_tokens_total{model_name=\"m\",direction=\"received\"} 17\n",
            "# TYPE vllm:prompt_tokens_by_source_total counter\n\
             vllm:prompt_tokens_by_source_total{model_name=\"m\",source=\"local_compute\"} 1\n\
             vllm:prompt_tokens_by_source_total{model_name=\"m\",source=\"local_cache_hit\"} 1\n\
             vllm:prompt_tokens_by_source_total{model_name=\"m\",source=\"external_kv_transfer\"} 3999\n",
        ],
    );
}
