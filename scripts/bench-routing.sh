#!/usr/bin/env bash
# The benefit of prefill/decode routing, measured (docs/routing.md).
#
# Two simulated Llama-3.1-8B/H100 replicas, the same mixed open-loop workload at a fixed rate,
# two set-ups, each through tokenmeter (so proxy overhead is identical):
#   (a) round_robin: both replicas (vLLM default max_num_batched_tokens 8192) in one pool,
#       balanced round-robin;
#   (b) routed: config/examples/pools.toml as shipped: prompts of >= 2048 estimated tokens to a
#       prefill replica (max_num_batched_tokens 16384), the rest to a decode replica (2048).
# Writes docs/routing-results.json and the results table in docs/routing.md.
#
# Usage: scripts/bench-routing.sh            (RATE, DURATION, SEED override the defaults)
#        scripts/bench-routing.sh --summarize DIR   (only rebuild the outputs from DIR/*.json)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATE=${RATE:-6}
DURATION=${DURATION:-90s}
SEED=${SEED:-1}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
PROFILE=llama-3.1-8b-h100
BIN=target/release/tokenmeter
# The proxy's ports (the replicas must be on 8101 and 8102, as config/examples/pools.toml says).
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
cargo build --release --quiet
tmp=$(mktemp -d)

# run NAME CONFIG PREFILL_BUDGET DECODE_BUDGET
run() {
    local name=$1 config=$2
    "$BIN" sim --listen 127.0.0.1:8101 --profile "$PROFILE" --max-num-batched-tokens "$3" \
        >"$tmp/sim-8101-$name.log" 2>&1 &
    local sim1=$!
    "$BIN" sim --listen 127.0.0.1:8102 --profile "$PROFILE" --max-num-batched-tokens "$4" \
        >"$tmp/sim-8102-$name.log" 2>&1 &
    local sim2=$!
    pids+=("$sim1" "$sim2")
    wait_http http://127.0.0.1:8101/health
    wait_http http://127.0.0.1:8102/health
    "$BIN" serve --config "$config" >"$tmp/serve-$name.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz"
    echo "== $name: rate $RATE/s for $DURATION" >&2
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --rate "$RATE" --duration "$DURATION" \
        --seed "$SEED" --workload "$WORKLOAD" --json "$tmp/$name.json" >&2
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$name.prom"
    grep '^tokenmeter_route_decisions_total' "$tmp/$name.prom" >&2 || true
    kill "$serve" "$sim1" "$sim2"
    wait "$serve" "$sim1" "$sim2" 2>/dev/null || true
}

cat >"$tmp/round-robin.toml" <<'TOML'
[[pools]]
name = "replicas"
urls = ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
balance = "round_robin"
TOML

run round_robin "$tmp/round-robin.toml" 8192 8192
run routed config/examples/pools.toml 16384 2048
echo "raw results in $tmp" >&2
fi

summary='def c($n): .points[0].classes[] | select(.class == $n);
  { requests: (c("all").requests), errors: (c("all").errors),
    chat_itl_p50_ms: (c("chat").itl.p50 * 1000), chat_itl_p99_ms: (c("chat").itl.p99 * 1000),
    chat_itl_max_ms: (c("chat").itl.max * 1000), chat_tpot_p99_ms: (c("chat").tpot.p99 * 1000),
    chat_ttft_p50_ms: (c("chat").ttft.p50 * 1000), chat_ttft_p99_ms: (c("chat").ttft.p99 * 1000),
    document_ttft_p50_ms: (c("document").ttft.p50 * 1000),
    document_ttft_p99_ms: (c("document").ttft.p99 * 1000),
    chat_goodput: (c("chat").goodput) }'
jq -n --arg rate "$RATE" --arg duration "$DURATION" --arg seed "$SEED" --arg workload "$WORKLOAD" \
    --argjson rr "$(jq "$summary" "$tmp/round_robin.json")" \
    --argjson routed "$(jq "$summary" "$tmp/routed.json")" \
    '{rate: ($rate | tonumber), duration: $duration, seed: ($seed | tonumber), workload: $workload,
      profile: "'"$PROFILE"'", round_robin: $rr, routed: $routed}' >docs/routing-results.json

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  "| metric | (a) round-robin, 2 replicas | (b) routed: prefill + decode |",
  "|---|---:|---:|",
  (["chat ITL p50 (ms)", "chat_itl_p50_ms"], ["chat ITL p99 (ms)", "chat_itl_p99_ms"],
   ["chat ITL max (ms)", "chat_itl_max_ms"], ["chat TPOT p99 (ms)", "chat_tpot_p99_ms"],
   ["chat TTFT p50 (ms)", "chat_ttft_p50_ms"], ["chat TTFT p99 (ms)", "chat_ttft_p99_ms"],
   ["document TTFT p50 (ms)", "document_ttft_p50_ms"], ["document TTFT p99 (ms)", "document_ttft_p99_ms"],
   ["requests (errors)", null]) as [$name, $key] |
  if $key == null then "| \($name) | \(.round_robin.requests) (\(.round_robin.errors)) | \(.routed.requests) (\(.routed.errors)) |"
  else "| \($name) | \(.round_robin[$key] | r) | \(.routed[$key] | r) |" end
' docs/routing-results.json)
echo "$table"
write_block results "$table"
