#!/usr/bin/env bash
# Length routing on a real engine: two llama.cpp servers (scripts/llama/build.sh), each pinned to
# its own core with one thread, long documents among short chats (docs/routing.md, "Length routing
# on llama-server"). Set-ups, each through tokenmeter:
#   one_pool:      both servers in one pool, power of two choices on streams;
#   split:         documents (>= 1000 estimated tokens) to the first server, chats to the second;
#   split_chunked: as split, with the decode server's batch (-b / -ub) at CHUNK tokens, so a chat's
#                  own prefill runs in chunks between decode steps instead of one long step;
#   split_spill:   as split, and a chat spills to the prefill server while the decode server still
#                  has a prompt in prefill (spill_queue_tokens = 1), sharing chat prefills.
# RUNS repetitions of each, interleaved. Writes docs/llama-routing-results.json and the table
# between the llama-length markers of docs/routing.md.
#
# Usage: scripts/bench-llama-routing.sh   (RATE, DURATION, RUNS, CHUNK, SETUPS, WORKLOAD override)
#        scripts/bench-llama-routing.sh --summarize DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATE=${RATE:-1.2}
DURATION=${DURATION:-90s}
RUNS=${RUNS:-2}
CHUNK=${CHUNK:-64}
SEED=${SEED:-1}
SETUPS=${SETUPS:-"one_pool split split_chunked split_spill"}
WORKLOAD=${WORKLOAD:-"chat:0.88:prompt=uniform:100-300:output=uniform:48-96,document:0.12:prompt=uniform:1500-2500:output=fixed:32"}
LLAMA=${TOKENMETER_LLAMA_DIR:-target/llama}
BIN=target/release/tokenmeter
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
scripts/llama/build.sh
cargo build --release --quiet
tmp=$(mktemp -d)

# server CORE PORT BATCH LOG
server() {
    taskset -c "$1" "$LLAMA/bin/llama-server" --model "$LLAMA/model.gguf" --host 127.0.0.1 --port "$2" \
        --threads 1 --threads-batch 1 --parallel 4 --ctx-size 16384 \
        --batch-size "$3" --ubatch-size "$3" --metrics >"$4" 2>&1 &
    pids+=("$!")
    echo "$!"
}

# run SETUP RUN
run() {
    local name=$1 n=$2 decode_batch=2048
    [ "$name" = split_chunked ] && decode_batch=$CHUNK
    local a b
    a=$(server 0 8201 2048 "$tmp/llama-8201-$name-$n.log")
    b=$(server 1 8202 "$decode_batch" "$tmp/llama-8202-$name-$n.log")
    wait_http http://127.0.0.1:8201/health 600
    wait_http http://127.0.0.1:8202/health 600
    if [ "$name" = one_pool ]; then
        printf '[[pools]]\nname = "both"\nurls = ["http://127.0.0.1:8201", "http://127.0.0.1:8202"]\nbalance = "streams"\n' >"$tmp/$name.toml"
    else
        printf '[[pools]]\nname = "prefill"\nurls = ["http://127.0.0.1:8201"]\nbalance = "prompt_tokens"\n\n' >"$tmp/$name.toml"
        printf '[[pools]]\nname = "decode"\nurls = ["http://127.0.0.1:8202"]\n\n' >>"$tmp/$name.toml"
        printf '[[rules]]\npool = "prefill"\nmin_prompt_tokens = 1000\nfallback = "decode"\n\n[[rules]]\npool = "decode"\n' >>"$tmp/$name.toml"
        if [ "$name" = split_spill ]; then
            printf 'fallback = "prefill"\nspill_queue_tokens = 1\n' >>"$tmp/$name.toml"
        fi
    fi
    "$BIN" serve --config "$tmp/$name.toml" >"$tmp/serve-$name-$n.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz" 600
    echo "== $name run $n: rate $RATE/s for $DURATION" >&2
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --rate "$RATE" --duration "$DURATION" \
        --seed "$((SEED + n))" --workload "$WORKLOAD" --json "$tmp/$name-$n.json" --raw >&2
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$name-$n.prom"
    kill "$serve" "$a" "$b"
    wait "$serve" "$a" "$b" 2>/dev/null || true
}

for n in $(seq "$RUNS"); do
    for setup in $SETUPS; do run "$setup" "$n"; done
done
echo "raw results in $tmp" >&2
fi

summary='def c($n): .points[0].classes[] | select(.class == $n);
  [.points[0].requests[] | select(.class == "chat" and .outcome == "ok") | .itl_s[]] as $gaps |
  { requests: (c("all").requests), errors: (c("all").errors),
    chat_itl_p50_ms: (c("chat").itl.p50 * 1000), chat_itl_p99_ms: (c("chat").itl.p99 * 1000),
    chat_itl_max_ms: (c("chat").itl.max * 1000),
    chat_gaps: ($gaps | length), chat_gaps_100ms: ([$gaps[] | select(. >= 0.1)] | length),
    chat_ttft_p50_ms: (c("chat").ttft.p50 * 1000), chat_ttft_p99_ms: (c("chat").ttft.p99 * 1000),
    document_ttft_p50_ms: (c("document").ttft.p50 * 1000),
    document_ttft_p99_ms: (c("document").ttft.p99 * 1000),
    goodput_rps: (c("all").goodput), slo_met_pct: (100 * c("all").slo_met / c("all").requests) }'
results='[]'
for f in "$tmp"/*-[0-9].json; do
    base=$(basename "$f" .json)
    results=$(jq --arg setup "${base%-*}" --arg run "${base##*-}" --argjson s "$(jq "$summary" "$f")" \
        '. + [{setup: $setup, run: ($run | tonumber)} + $s]' <<<"$results")
done
jq -n --arg rate "$RATE" --arg duration "$DURATION" --arg workload "$WORKLOAD" --arg chunk "$CHUNK" \
    --argjson results "$results" \
    '{rate: ($rate | tonumber), duration: $duration, workload: $workload, decode_chunk: ($chunk | tonumber),
      engine: "llama-server (llama-cpp-python 0.3.36 sdist), 1 thread per server, taskset one core each",
      results: ($results | sort_by(.setup, .run))}' >docs/llama-routing-results.json

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  "| set-up | run | chat TTFT p50 / p99 (ms) | chat ITL p50 / p99 / max (ms) | chat gaps >= 100 ms | document TTFT p50 / p99 (ms) | SLOs met | goodput (req/s) |",
  "|---|---:|---:|---:|---:|---:|---:|---:|",
  (.results[] | "| \(.setup) | \(.run) | \(.chat_ttft_p50_ms | r) / \(.chat_ttft_p99_ms | r) | \(.chat_itl_p50_ms | r) / \(.chat_itl_p99_ms | r) / \(.chat_itl_max_ms | r) | \(.chat_gaps_100ms) of \(.chat_gaps) | \(.document_ttft_p50_ms | r) / \(.document_ttft_p99_ms | r) | \(.slo_met_pct | r) % | \(.goodput_rps * 100 | round / 100) |")
' docs/llama-routing-results.json)
echo "$table"
write_block llama-length "$table"
