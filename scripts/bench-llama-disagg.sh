#!/usr/bin/env bash
# Prefill/decode disaggregation on a real engine: two llama.cpp servers (scripts/llama/build.sh),
# each pinned to its own core with one thread, 4 slots, sharing a slot directory
# (docs/disaggregation.md, "Measured on llama-server"). Set-ups, each through tokenmeter:
#   one_pool: both servers in one pool, power of two choices on streams;
#   split:    length routing: prompts of >= 1000 estimated tokens to the first server, the rest to
#             the second (each request prefills and decodes on one server);
#   disagg:   every request decodes on the second server; its prompt prefills on the first
#             (`--batch-size PREFILL_BATCH`), which saves the slot, and the proxy restores it into
#             a slot of the second: documents (>= 1000 uncached tokens) always, shorter prompts
#             while the first server has fewer than SHORT_QUEUE prompt tokens queued (default:
#             always); short prompts take the prefill server's first slots, documents its last, so
#             a chat's prefill is in the server's next batch rather than after a document's.
#   disagg_idle: the same, but a short prompt is handed off only while the prefill server has fewer
#             than IDLE_QUEUE prompt tokens queued (default 1: only while it is idle), else it
#             prefills where it decodes; documents are always handed off.
# Two workloads (WORKLOADS): `mix`, the workload of scripts/bench-llama-routing.sh (12 % documents
# of 1 500-2 500 tokens among chats of 100-300), and `sessions`, multi-turn conversations (the
# llama workload of scripts/bench-affinity.sh). RUNS repetitions of each, interleaved. Writes
# docs/llama-disagg-results.json and the tables between the llama-disagg markers of
# docs/disaggregation.md.
#
# Usage: scripts/bench-llama-disagg.sh   (RATE, SESSION_RATE, DURATION, RUNS, SETUPS, WORKLOADS,
#                                          PREFILL_BATCH, SHORT_QUEUE, IDLE_QUEUE override; OUT=DIR
#                                          keeps the raw results in DIR, adding to what is there)
#        scripts/bench-llama-disagg.sh --summarize DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATE=${RATE:-1.2}
SESSION_RATE=${SESSION_RATE:-0.4}
DURATION=${DURATION:-90s}
RUNS=${RUNS:-2}
SEED=${SEED:-1}
SETUPS=${SETUPS:-"one_pool split disagg"}
WORKLOADS=${WORKLOADS:-"mix sessions"}
PREFILL_BATCH=${PREFILL_BATCH:-256}
SHORT_QUEUE=${SHORT_QUEUE:-1000000}
IDLE_QUEUE=${IDLE_QUEUE:-1}
MIX="chat:0.88:prompt=uniform:100-300:output=uniform:48-96,document:0.12:prompt=uniform:1500-2500:output=fixed:32"
LLAMA=${TOKENMETER_LLAMA_DIR:-target/llama}
BIN=target/release/tokenmeter
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
scripts/llama/build.sh
cargo build --release --quiet
tmp=${OUT:-$(mktemp -d)}
mkdir -p "$tmp"
slots="$tmp/slots"
mkdir -p "$slots"

# config SETUP: the proxy's config.
config() {
    case $1 in
    one_pool) printf '[[pools]]\nname = "both"\nurls = ["http://127.0.0.1:8201", "http://127.0.0.1:8202"]\nbalance = "streams"\n' ;;
    split)
        printf '[[pools]]\nname = "prefill"\nurls = ["http://127.0.0.1:8201"]\nbalance = "prompt_tokens"\n\n'
        printf '[[pools]]\nname = "decode"\nurls = ["http://127.0.0.1:8202"]\n\n'
        printf '[[rules]]\npool = "prefill"\nmin_prompt_tokens = 1000\nfallback = "decode"\n\n[[rules]]\npool = "decode"\n'
        ;;
    disagg | disagg_idle)
        local short=$SHORT_QUEUE
        [ "$1" = disagg_idle ] && short=$IDLE_QUEUE
        printf '[[pools]]\nname = "prefill"\nurls = ["http://127.0.0.1:8201"]\nbalance = "prompt_tokens"\n\n'
        printf '[[pools]]\nname = "decode"\nurls = ["http://127.0.0.1:8202"]\naffinity = "prefix"\n'
        printf '[pools.handoff]\nprefill_pool = "prefill"\nprotocol = "llamacpp"\nmin_prompt_tokens = 1000\n'
        printf 'short_queue_tokens = %s\nprefill_timeout = "60s"\nslot_dir = "%s"\nslot_wait = "5s"\n\n' "$short" "$slots"
        printf '[[rules]]\npool = "decode"\n'
        ;;
    esac
}

# run SETUP WORKLOAD RUN
run() {
    local name=$1 workload=$2 n=$3 prefill_batch=2048
    [ "${name#disagg}" != "$name" ] && prefill_batch=$PREFILL_BATCH
    local a b tag="$name-$workload-$n"
    a=$(llama_server 0 8201 "$prefill_batch" "$tmp/llama-8201-$tag.log" "$slots")
    pids+=("$a")
    b=$(llama_server 1 8202 2048 "$tmp/llama-8202-$tag.log" "$slots")
    pids+=("$b")
    wait_http http://127.0.0.1:8201/health 600
    wait_http http://127.0.0.1:8202/health 600
    config "$name" >"$tmp/$name.toml"
    "$BIN" serve --config "$tmp/$name.toml" >"$tmp/serve-$tag.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz" 600
    echo "== $name, $workload, run $n for $DURATION" >&2
    if [ "$workload" = mix ]; then
        "$BIN" bench --url "http://$TOKENMETER_LISTEN" --rate "$RATE" --duration "$DURATION" \
            --seed "$((SEED + n))" --workload "$MIX" --json "$tmp/$tag.json" --raw >&2
    else
        "$BIN" bench --url "http://$TOKENMETER_LISTEN" --session-rate "$SESSION_RATE" --duration "$DURATION" \
            --seed "$((SEED + n))" --system-prompts 4 --system-tokens uniform:300-600 --turns uniform:3-6 \
            --user-tokens uniform:50-150 --output-tokens uniform:24-48 --think-time 3s \
            --json "$tmp/$tag.json" --raw >&2
    fi
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$tag.prom"
    curl -s http://127.0.0.1:8202/metrics >"$tmp/$tag.decode.prom"
    grep -E '^tokenmeter_disaggregated_requests_total' "$tmp/$tag.prom" >&2 || true
    kill "$serve" "$a" "$b"
    wait "$serve" "$a" "$b" 2>/dev/null || true
    echo "files left in the slot directory: $(ls "$slots" | wc -l)" >&2
}

for n in $(seq "$RUNS"); do
    for workload in $WORKLOADS; do
        for setup in $SETUPS; do run "$setup" "$workload" "$n"; done
    done
done
echo "raw results in $tmp" >&2
fi

# The class of a workload whose figures the table shows: chats of the mix, every turn of sessions.
summary='def c($n): .points[0].classes[] | select(.class == $n);
  [.points[0].requests[] | select(($k == "all" or .class == $k) and .outcome == "ok") | .itl_s[]] as $gaps |
  { requests: (c("all").requests), errors: (c("all").errors),
    ttft_p50_ms: (c($k).ttft.p50 * 1000), ttft_p99_ms: (c($k).ttft.p99 * 1000),
    itl_p50_ms: (c($k).itl.p50 * 1000), itl_p99_ms: (c($k).itl.p99 * 1000),
    itl_max_ms: (c($k).itl.max * 1000),
    gaps: ($gaps | length), gaps_100ms: ([$gaps[] | select(. >= 0.1)] | length),
    document_ttft_p99_ms: ((c("document").ttft.p99 // null) | if . == null then null else . * 1000 end),
    goodput_rps: (c("all").goodput), slo_met_pct: (100 * c("all").slo_met / c("all").requests) }'
results='[]'
for f in "$tmp"/*-[0-9].json; do
    base=$(basename "$f" .json)
    n=${base##*-}
    rest=${base%-*}
    workload=${rest##*-}
    setup=${rest%-*}
    class=chat
    [ "$workload" = sessions ] && class=all
    decode_prompt=$(awk '/^llamacpp:prompt_tokens_total/ {print $2}' "$tmp/$base.decode.prom")
    handoffs=$({ grep -E '^tokenmeter_disaggregated_requests_total' "$tmp/$base.prom" || true; } \
        | sed -E 's/.*result="([a-z_]+)".* ([0-9.e+]+)$/\1 \2/' \
        | jq -R -s 'split("\n") | map(select(length > 0) | split(" ") | {(.[0]): (.[1] | tonumber)}) | add // {}')
    # The mean of each phase of the remote prefills, in ms: {"prefill": .., "transfer": .., ...}.
    phases=$(awk '/^tokenmeter_disaggregation_phase_seconds_(sum|count)/ {
            match($1, /phase="[a-z_]+"/); k = substr($1, RSTART + 7, RLENGTH - 8)
            if ($1 ~ /_sum/) s[k] = $2; else c[k] = $2 }
        END { for (k in s) if (c[k] > 0) printf "%s %.1f\n", k, 1000 * s[k] / c[k] }' "$tmp/$base.prom" \
        | jq -R -s 'split("\n") | map(select(length > 0) | split(" ") | {(.[0]): (.[1] | tonumber)}) | add // {}')
    results=$(jq --arg setup "$setup" --arg workload "$workload" --arg run "$n" \
        --argjson s "$(jq --arg k "$class" "$summary" "$f")" --argjson handoffs "$handoffs" \
        --arg decode "${decode_prompt:-0}" --argjson phases "$phases" \
        '. + [{setup: $setup, workload: $workload, run: ($run | tonumber)} + $s
              + {decode_prompt_tokens: ($decode | tonumber), handoffs: $handoffs,
                 phase_mean_ms: $phases}]' <<<"$results")
done
jq -n --arg rate "$RATE" --arg session_rate "$SESSION_RATE" --arg duration "$DURATION" --arg mix "$MIX" \
    --arg batch "$PREFILL_BATCH" --arg short "$SHORT_QUEUE" --arg idle "$IDLE_QUEUE" --argjson results "$results" \
    '{rate: ($rate | tonumber), session_rate: ($session_rate | tonumber), duration: $duration, mix: $mix,
      sessions: "system_prompts=4 system_tokens=uniform:300-600 turns=uniform:3-6 user_tokens=uniform:50-150 output_tokens=uniform:24-48 think_time=3s",
      prefill_batch: ($batch | tonumber), short_queue_tokens: ($short | tonumber),
      idle_queue_tokens: ($idle | tonumber),
      engine: "llama-server (llama-cpp-python 0.3.36 sdist), 1 thread per server, taskset one core each, 4 slots",
      results: ($results | sort_by(.workload, ({"one_pool": 0, "split": 1, "disagg": 2, "disagg_idle": 3}[.setup] // 9), .run))}' \
    >docs/llama-disagg-results.json

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  def opt: if . == null then "-" else (. | r | tostring) end;
  "| workload | set-up | run | TTFT p50 / p99 (ms) | ITL p50 / p99 / max (ms) | gaps >= 100 ms | document TTFT p99 (ms) | SLOs met | goodput (req/s) | prompt tokens the decode server computed | handed off |",
  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  (.results[] | "| \(.workload) | \(.setup) | \(.run) | \(.ttft_p50_ms | r) / \(.ttft_p99_ms | r) | \(.itl_p50_ms | r) / \(.itl_p99_ms | r) / \(.itl_max_ms | r) | \(.gaps_100ms) of \(.gaps) | \(.document_ttft_p99_ms | opt) | \(.slo_met_pct | r) % | \(.goodput_rps * 100 | round / 100) | \(.decode_prompt_tokens) | \(.handoffs.remote // 0) of \(.requests) |")
' docs/llama-disagg-results.json)
echo "$table"
write_block llama-disagg "$table" docs/disaggregation.md
