#!/usr/bin/env bash
# Prefill/decode disaggregation against load balancing and length routing, on four simulated
# replicas (docs/disaggregation.md, "Measured on simulated replicas").
#
# Four simulated Llama-3.1-8B/H100 replicas (which speak vLLM's KV-connector protocol), the same
# open-loop Poisson mix of chats and documents, each set-up through tokenmeter (so proxy overhead
# is identical), at each rate of RATES:
#   p2c:     one pool of the four (vLLM's default max_num_batched_tokens 8192), power of two
#            choices on streams in flight: the best a user has without tokenmeter's routing;
#   2p2d:    length routing: prompts of >= 2048 estimated tokens to two prefill replicas (16384),
#            the rest to two decode replicas (2048); each request prefills and decodes on one;
#   1p3d_pd, 2p2d_pd: disaggregated: every request decodes on the decode replicas (2048); a prompt
#            whose uncached part is >= 2048 estimated tokens prefills on the prefill replicas
#            (16384) and its KV cache moves to the decode replica (25 GB/s); chats prefill where
#            they decode, unless the prefill pool has fewer than SHORT_QUEUE tokens queued (0:
#            never); a document prefills where it decodes while the prefill pool's shortest queue
#            is past SPILL_QUEUE tokens (0, the default: never; 8192 measured worse, see the doc).
#   1p3d_pd_slo, 2p2d_pd_slo: the same pools, the decode pool placing by predicted latency
#            (balance = "slo"), which then decides each prefill by prediction too: on the prefill
#            pool when it would stall the decode replica's streams, unless the prefill pool's queue
#            would miss a TTFT target the decode replica meets (the token thresholds unused).
# Writes docs/disagg-results.json and the table between the disagg4 markers of
# docs/disaggregation.md (RESULTS and BLOCK name others: the _slo comparison is
# RESULTS=docs/disagg-slo-results.json BLOCK=disagg_slo).
#
# Usage: scripts/bench-disagg.sh        (RATES, DURATION, SEED, WORKLOAD, SETUPS, SHORT_QUEUE,
#                                        SPILL_QUEUE, PREFILL_TIMEOUT override; a set-up name may
#                                        carry a suffix, e.g. SETUPS=2p2d_pd_t60 with
#                                        PREFILL_TIMEOUT=60s, to keep its results apart)
#        scripts/bench-disagg.sh --summarize DIR   (rebuild the outputs from DIR/*.json)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATES=${RATES:-"36 48 60"}
DURATION=${DURATION:-60s}
SEED=${SEED:-1}
SETUPS=${SETUPS:-"p2c 2p2d 1p3d_pd 2p2d_pd"}
SHORT_QUEUE=${SHORT_QUEUE:-0}
SPILL_QUEUE=${SPILL_QUEUE:-0}
PREFILL_TIMEOUT=${PREFILL_TIMEOUT:-10s}
RESULTS=${RESULTS:-docs/disagg-results.json}
BLOCK=${BLOCK:-disagg4}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
PROFILE=llama-3.1-8b-h100
BIN=${BIN:-target/release/tokenmeter}
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
cargo build --release --quiet
tmp=$(mktemp -d)

# config SETUP: the proxy config of a set-up; budgets SETUP: each replica's token budget.
config() {
    local prefill decode
    case $1 in
    p2c) printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "streams"\n' "$(urls 8101 8102 8103 8104)" ;;
    2p2d)
        printf '[[pools]]\nname = "prefill"\nurls = %s\nbalance = "prompt_tokens"\n\n' "$(urls 8101 8102)"
        printf '[[pools]]\nname = "decode"\nurls = %s\nbalance = "streams"\n\n' "$(urls 8103 8104)"
        printf '[[rules]]\npool = "prefill"\nmin_prompt_tokens = 2048\nfallback = "decode"\n\n[[rules]]\npool = "decode"\n'
        ;;
    1p3d_pd* | 2p2d_pd*)
        if [ "${1#1p3d_pd}" != "$1" ]; then prefill=(8101) decode=(8102 8103 8104); else prefill=(8101 8102) decode=(8103 8104); fi
        printf '[[pools]]\nname = "prefill"\nurls = %s\nbalance = "prompt_tokens"\n\n' "$(urls "${prefill[@]}")"
        local balance=streams
        case $1 in *_slo*) balance=slo ;; esac
        printf '[[pools]]\nname = "decode"\nurls = %s\nbalance = "%s"\n' "$(urls "${decode[@]}")" "$balance"
        printf '[pools.handoff]\nprefill_pool = "prefill"\nprotocol = "vllm"\nmin_prompt_tokens = 2048\nshort_queue_tokens = %s\nspill_queue_tokens = %s\nprefill_timeout = "%s"\n\n' "$SHORT_QUEUE" "$SPILL_QUEUE" "$PREFILL_TIMEOUT"
        printf '[[rules]]\npool = "decode"\n'
        ;;
    esac
}
budgets() {
    case $1 in
    p2c) echo "8192 8192 8192 8192" ;;
    2p2d | 2p2d_pd*) echo "16384 16384 2048 2048" ;;
    1p3d_pd*) echo "16384 2048 2048 2048" ;;
    esac
}

# run SETUP RATE
run() {
    local name=$1 rate=$2 port=8101 budget sims=()
    for budget in $(budgets "$name"); do
        "$BIN" sim --listen "127.0.0.1:$port" --profile "$PROFILE" --max-num-batched-tokens "$budget" \
            >"$tmp/sim-$port-$name-$rate.log" 2>&1 &
        sims+=("$!")
        pids+=("$!")
        port=$((port + 1))
    done
    for port in 8101 8102 8103 8104; do wait_http "http://127.0.0.1:$port/health"; done
    config "$name" >"$tmp/$name.toml"
    "$BIN" serve --config "$tmp/$name.toml" >"$tmp/serve-$name-$rate.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz"
    echo "== $name: rate $rate/s for $DURATION" >&2
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --rate "$rate" --duration "$DURATION" \
        --seed "$SEED" --workload "$WORKLOAD" --json "$tmp/$name-$rate.json" >&2
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$name-$rate.prom"
    grep -E '^tokenmeter_(route_decisions|disaggregated_requests)_total' "$tmp/$name-$rate.prom" >&2 || true
    for port in 8101 8102 8103 8104; do
        curl -s "http://127.0.0.1:$port/metrics" | sed "s/^/$port /" >>"$tmp/$name-$rate.sims.prom"
    done
    kill "$serve" "${sims[@]}"
    wait "$serve" "${sims[@]}" 2>/dev/null || true
}

for rate in $RATES; do
    for setup in $SETUPS; do run "$setup" "$rate"; done
done
echo "raw results in $tmp" >&2
fi

summary='def c($n): .points[0].classes[] | select(.class == $n);
  { requests: (c("all").requests), errors: (c("all").errors),
    chat_itl_p50_ms: (c("chat").itl.p50 * 1000), chat_itl_p99_ms: (c("chat").itl.p99 * 1000),
    chat_itl_max_ms: (c("chat").itl.max * 1000), chat_tpot_p99_ms: (c("chat").tpot.p99 * 1000),
    chat_ttft_p50_ms: (c("chat").ttft.p50 * 1000), chat_ttft_p99_ms: (c("chat").ttft.p99 * 1000),
    document_ttft_p50_ms: (c("document").ttft.p50 * 1000),
    document_ttft_p99_ms: (c("document").ttft.p99 * 1000),
    goodput_rps: (c("all").goodput), slo_met_pct: (100 * c("all").slo_met / c("all").requests) }'
results='[]'
for f in "$tmp"/*-*.json; do
    base=$(basename "$f" .json)
    results=$(jq --arg setup "${base%-*}" --arg rate "${base##*-}" --argjson s "$(jq "$summary" "$f")" \
        '. + [{setup: $setup, rate: ($rate | tonumber)} + $s]' <<<"$results")
done
jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg workload "$WORKLOAD" \
    --arg short "$SHORT_QUEUE" --arg spill "$SPILL_QUEUE" --argjson results "$results" \
    '{duration: $duration, seed: ($seed | tonumber), workload: $workload, profile: "'"$PROFILE"'",
      short_queue_tokens: ($short | tonumber), spill_queue_tokens: ($spill | tonumber),
      results: ($results | sort_by(.rate, ({"p2c": 0, "2p2d": 1, "1p3d_pd": 2, "2p2d_pd": 3, "1p3d_pd_slo": 4, "2p2d_pd_slo": 5}[.setup] // 9)))}' >"$RESULTS"

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  "| rate (req/s) | set-up | chat ITL p50 / p99 / max (ms) | chat TPOT p99 (ms) | chat TTFT p50 / p99 (ms) | document TTFT p50 / p99 (ms) | SLOs met | goodput (req/s) |",
  "|---:|---|---:|---:|---:|---:|---:|---:|",
  (.results[] | "| \(.rate) | \(.setup) | \(.chat_itl_p50_ms | r) / \(.chat_itl_p99_ms | r) / \(.chat_itl_max_ms | r) | \(.chat_tpot_p99_ms | r) | \(.chat_ttft_p50_ms | r) / \(.chat_ttft_p99_ms | r) | \(.document_ttft_p50_ms | r) / \(.document_ttft_p99_ms | r) | \(.slo_met_pct | r) % | \(.goodput_rps | r) |")
' "$RESULTS")
echo "$table"
write_block "$BLOCK" "$table" docs/disaggregation.md
