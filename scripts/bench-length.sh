#!/usr/bin/env bash
# Length routing against the best load-only balancing, on four simulated replicas (docs/routing.md,
# "Length routing on four replicas").
#
# Four simulated Llama-3.1-8B/H100 replicas, the same open-loop Poisson mix of chats and documents,
# each set-up through tokenmeter (so proxy overhead is identical), at each rate of RATES:
#   p2c:   one pool of the four (vLLM's default max_num_batched_tokens 8192), power of two choices
#          on streams in flight: the best a user has without length routing;
#   1p3d:  prompts of >= 2048 estimated tokens to one prefill replica (16384), the rest to three
#          decode replicas (2048), each pool balanced by power of two choices;
#   2p2d:  two prefill replicas and two decode replicas;
#   1p3d_b512: as 1p3d with the decode replicas' budget at 512 tokens, so a chat's own prefill is
#          chunked into short steps between the decode tokens of the others.
# Writes docs/length-routing-results.json and the table between the length4 markers of
# docs/routing.md.
#
# Usage: scripts/bench-length.sh        (RATES, DURATION, SEED, WORKLOAD, SETUPS override)
#        scripts/bench-length.sh --summarize DIR   (rebuild the outputs from DIR/*.json)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATES=${RATES:-"12 24"}
DURATION=${DURATION:-90s}
SEED=${SEED:-1}
SETUPS=${SETUPS:-"p2c 1p3d 2p2d 1p3d_b512"}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
PROFILE=llama-3.1-8b-h100
BIN=target/release/tokenmeter
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
cargo build --release --quiet
tmp=$(mktemp -d)

# config SETUP: the proxy config of a set-up; budgets SETUP: each replica's token budget.
config() {
    case $1 in
    p2c) printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "streams"\n' "$(urls 8101 8102 8103 8104)" ;;
    1p3d | 2p2d | 1p3d_b512)
        local prefill decode
        if [ "$1" != 2p2d ]; then prefill=(8101) decode=(8102 8103 8104); else prefill=(8101 8102) decode=(8103 8104); fi
        printf '[[pools]]\nname = "prefill"\nurls = %s\nbalance = "prompt_tokens"\n\n' "$(urls "${prefill[@]}")"
        printf '[[pools]]\nname = "decode"\nurls = %s\nbalance = "streams"\n\n' "$(urls "${decode[@]}")"
        printf '[[rules]]\npool = "prefill"\nmin_prompt_tokens = 2048\nfallback = "decode"\n\n[[rules]]\npool = "decode"\n'
        ;;
    esac
}
budgets() {
    case $1 in
    p2c) echo "8192 8192 8192 8192" ;;
    1p3d) echo "16384 2048 2048 2048" ;;
    2p2d) echo "16384 16384 2048 2048" ;;
    1p3d_b512) echo "16384 512 512 512" ;;
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
    grep '^tokenmeter_route_decisions_total' "$tmp/$name-$rate.prom" >&2 || true
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
jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg workload "$WORKLOAD" --argjson results "$results" \
    '{duration: $duration, seed: ($seed | tonumber), workload: $workload, profile: "'"$PROFILE"'",
      results: ($results | sort_by(.rate, ({"p2c": 0, "1p3d": 1, "2p2d": 2, "1p3d_b512": 3}[.setup] // 9)))}' >docs/length-routing-results.json

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  "| rate (req/s) | set-up | chat ITL p50 / p99 / max (ms) | chat TPOT p99 (ms) | chat TTFT p50 / p99 (ms) | document TTFT p50 / p99 (ms) | SLOs met | goodput (req/s) |",
  "|---:|---|---:|---:|---:|---:|---:|---:|",
  (.results[] | "| \(.rate) | \(.setup) | \(.chat_itl_p50_ms | r) / \(.chat_itl_p99_ms | r) / \(.chat_itl_max_ms | r) | \(.chat_tpot_p99_ms | r) | \(.chat_ttft_p50_ms | r) / \(.chat_ttft_p99_ms | r) | \(.document_ttft_p50_ms | r) / \(.document_ttft_p99_ms | r) | \(.slo_met_pct | r) % | \(.goodput_rps | r) |")
' docs/length-routing-results.json)
echo "$table"
write_block length4 "$table"
