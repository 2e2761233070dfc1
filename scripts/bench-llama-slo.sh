#!/usr/bin/env bash
# Latency-predicting placement on a real engine (docs/routing.md, "Latency-predicting placement on
# llama-server"): two llama.cpp servers (scripts/llama/build.sh) of different speed, each pinned to
# its own core with one thread and 4 slots: 8201 serves the test model (8 layers), 8202 the same
# architecture with 16 layers (about half as fast; written once to target/llama/model-16.gguf).
# Long documents among short chats, as scripts/bench-llama-routing.sh. Set-ups, each through
# tokenmeter:
#   one_pool: both servers in one pool, power of two choices on streams (balance = "streams");
#   defaults: both servers in one pool with nothing set (balance = "auto", which is "slo" in a pool
#             of two, with [slo]'s default targets and no gap target);
#   split:    documents (>= 1000 estimated tokens) to the fast server, chats to the slow one;
#   slo:      both in one pool, balance = "slo" with [slo] ttft = TTFT, tpot = TPOT (the targets
#             bench's goodput counts against) and max_gap = MAX_GAP (250ms, as scripts/bench-slo.sh):
#             prefill-heavy replicas designated from the load (#39's default);
#   gated:    slo with a gateway queue ([pools.queue], on_deadline = "shed").
# RUNS repetitions of each, interleaved. Reports chat stalls (gaps of 100 ms or more), chat TTFT
# p99, goodput, and for `slo` the median of predicted / measured TTFT and its median absolute error
# (from tokenmeter_prediction_error_ratio, as scripts/bench-slo.sh). Writes
# docs/llama-slo-results.json and the table between the llama-slo markers of docs/routing.md.
#
# Usage: scripts/bench-llama-slo.sh   (RATE, DURATION, RUNS, SETUPS, WORKLOAD, TTFT, TPOT, MAX_GAP
#                                     override)
#        scripts/bench-llama-slo.sh --summarize DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATE=${RATE:-1.0}
DURATION=${DURATION:-90s}
RUNS=${RUNS:-2}
SEED=${SEED:-1}
TTFT=${TTFT:-800ms}
TPOT=${TPOT:-35ms}
MAX_GAP=${MAX_GAP:-250ms}
SETUPS=${SETUPS:-"one_pool split slo gated"}
WORKLOAD=${WORKLOAD:-"chat:0.88:prompt=uniform:100-300:output=uniform:48-96,document:0.12:prompt=uniform:1500-2500:output=fixed:32"}
LLAMA=${TOKENMETER_LLAMA_DIR:-target/llama}
SLOW_MODEL=$LLAMA/model-16.gguf
BIN=target/release/tokenmeter
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
scripts/llama/build.sh
cargo build --release --quiet
if [ ! -f "$SLOW_MODEL" ]; then
    "$LLAMA/venv/bin/python" scripts/llama/make_gguf.py "$SLOW_MODEL.part" --layers 16 && mv "$SLOW_MODEL.part" "$SLOW_MODEL"
fi
tmp=$(mktemp -d)

# server CORE PORT MODEL LOG
server() {
    taskset -c "$1" "$LLAMA/bin/llama-server" --model "$3" --host 127.0.0.1 --port "$2" \
        --threads 1 --threads-batch 1 --parallel 4 --ctx-size 16384 \
        --batch-size 2048 --ubatch-size 2048 --metrics >"$4" 2>&1 &
    pids+=("$!")
    echo "$!"
}

# run SETUP RUN
run() {
    local name=$1 n=$2 a b
    a=$(server 0 8201 "$LLAMA/model.gguf" "$tmp/llama-8201-$name-$n.log")
    b=$(server 1 8202 "$SLOW_MODEL" "$tmp/llama-8202-$name-$n.log")
    wait_http http://127.0.0.1:8201/health 600
    wait_http http://127.0.0.1:8202/health 600
    case $name in
    one_pool)
        printf '[[pools]]\nname = "both"\nurls = %s\nbalance = "streams"\n' "$(urls 8201 8202)" >"$tmp/$name.toml" ;;
    defaults)
        printf '[[pools]]\nname = "both"\nurls = %s\n' "$(urls 8201 8202)" >"$tmp/$name.toml" ;;
    split)
        printf '[[pools]]\nname = "prefill"\nurls = %s\nbalance = "prompt_tokens"\n\n' "$(urls 8201)" >"$tmp/$name.toml"
        printf '[[pools]]\nname = "decode"\nurls = %s\n\n' "$(urls 8202)" >>"$tmp/$name.toml"
        printf '[[rules]]\npool = "prefill"\nmin_prompt_tokens = 1000\nfallback = "decode"\n\n[[rules]]\npool = "decode"\n' >>"$tmp/$name.toml" ;;
    slo | gated)
        printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$TTFT" "$TPOT" "$MAX_GAP" >"$tmp/$name.toml"
        printf '[[pools]]\nname = "both"\nurls = %s\nbalance = "slo"\n' "$(urls 8201 8202)" >>"$tmp/$name.toml"
        if [ "$name" = gated ]; then
            printf '\n[pools.queue]\ncapacity = 1024\non_deadline = "shed"\n' >>"$tmp/$name.toml"
        fi ;;
    *) echo "unknown set-up $name (one_pool, defaults, split, slo, gated)" >&2; exit 1 ;;
    esac
    "$BIN" serve --config "$tmp/$name.toml" >"$tmp/serve-$name-$n.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz" 600
    echo "== $name run $n: rate $RATE/s for $DURATION" >&2
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --rate "$RATE" --duration "$DURATION" \
        --seed "$((SEED + n))" --workload "$WORKLOAD" --slo-ttft "$TTFT" --slo-tpot "$TPOT" \
        --json "$tmp/$name-$n.json" --raw >&2
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
    prom="$tmp/$base.prom"
    results=$(jq --arg setup "${base%-*}" --arg run "${base##*-}" --argjson s "$(jq "$summary" "$f")" \
        --argjson ratio "$(prom_median "$prom" tokenmeter_prediction_error_ratio 'kind="ttft"')" \
        --argjson abs "$(prom_abs_error "$prom" tokenmeter_prediction_error_ratio 'kind="ttft"')" \
        '. + [{setup: $setup, run: ($run | tonumber)} + $s
              + {prediction_error_ttft_p50: $ratio, prediction_abs_error_ttft_p50: $abs}]' <<<"$results")
done
jq -n --arg rate "$RATE" --arg duration "$DURATION" --arg workload "$WORKLOAD" \
    --arg ttft "$TTFT" --arg tpot "$TPOT" --argjson results "$results" \
    '{rate: ($rate | tonumber), duration: $duration, workload: $workload, slo: {ttft: $ttft, tpot: $tpot},
      engine: "llama-server (llama-cpp-python 0.3.36 sdist), 1 thread per server, taskset one core each; 8201 the 8-layer test model, 8202 a 16-layer one",
      results: ($results | sort_by(.setup, .run))}' >docs/llama-slo-results.json

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  def pct: if . == null then "-" else "\(. * 100 | round) %" end;
  "| set-up | run | chat TTFT p50 / p99 (ms) | chat ITL p50 / p99 / max (ms) | chat gaps >= 100 ms | document TTFT p50 / p99 (ms) | SLOs met | goodput (req/s) | TTFT predicted / measured, p50 | its median absolute error |",
  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  (.results[] | "| \(.setup) | \(.run) | \(.chat_ttft_p50_ms | r) / \(.chat_ttft_p99_ms | r) | \(.chat_itl_p50_ms | r) / \(.chat_itl_p99_ms | r) / \(.chat_itl_max_ms | r) | \(.chat_gaps_100ms) of \(.chat_gaps) | \(.document_ttft_p50_ms | r) / \(.document_ttft_p99_ms | r) | \(.slo_met_pct | r) % | \(.goodput_rps * 100 | round / 100) | \(.prediction_error_ttft_p50 // "-") | \(.prediction_abs_error_ttft_p50 | pct) |")
' docs/llama-slo-results.json)
echo "$table"
grep -q "<!-- llama-slo:begin -->" docs/routing.md || echo "docs/routing.md has no llama-slo markers: the table is not written there" >&2
write_block llama-slo "$table"
