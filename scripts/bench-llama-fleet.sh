#!/usr/bin/env bash
# One llama.cpp handoff pool through one or two tokenmeter gateways sharing a fleet (docs/deploying.md,
# "Several gateway replicas"): two llama.cpp servers (scripts/llama/build.sh), each pinned to its
# own core with one thread, 4 slots, sharing a slot directory; every request decodes on the second
# and its prompt prefills on the first (the `disagg` set-up of scripts/bench-llama-disagg.sh). With
# two gateways they share a Redis (`[fleet]`) and split each server's slots; two bench clients, each
# at half the rate, client i to gateway i mod N. Set-ups (SETUPS):
#   one:  one gateway;
#   two:  two gateways;
#   kill: two gateways, the second killed KILL_AFTER into the run (its clients' requests fail from
#         then on; the first's must not).
# A request waits up to 60 s for a slot (`slot_wait`) rather than prefilling where it decodes, so
# every request is handed off. What it reads: whether any slot was given twice (the decode
# server's own count of prompt tokens it computed against the requests handed off: one each
# without a collision), the clients' errors, SLOs and goodput. Writes docs/llama-fleet-results.json and the table between the
# llama-fleet markers of docs/deploying.md.
#
# Usage: scripts/bench-llama-fleet.sh   (RATE, DURATION, SEED, SETUPS, KILL_AFTER override)
#        scripts/bench-llama-fleet.sh --summarize DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATE=${RATE:-1.2}
DURATION=${DURATION:-90s}
SEED=${SEED:-1}
SETUPS=${SETUPS:-"one two kill"}
KILL_AFTER=${KILL_AFTER:-45}
MIX="chat:0.88:prompt=uniform:100-300:output=uniform:48-96,document:0.12:prompt=uniform:1500-2500:output=fixed:32"
LLAMA=${TOKENMETER_LLAMA_DIR:-target/llama}
BIN=target/release/tokenmeter
REDIS_PORT=${REDIS_PORT:-16390}
OUT=docs/llama-fleet-results.json

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
scripts/llama/build.sh
cargo build --release --quiet
tmp=$(mktemp -d)
slots="$tmp/slots"
mkdir -p "$slots"

# config G N: gateway G's config, of N gateways (a fleet with more than one).
config() {
    printf '[[pools]]\nname = "prefill"\nurls = ["http://127.0.0.1:8201"]\nbalance = "prompt_tokens"\n\n'
    printf '[[pools]]\nname = "decode"\nurls = ["http://127.0.0.1:8202"]\naffinity = "prefix"\n'
    printf '[pools.handoff]\nprefill_pool = "prefill"\nprotocol = "llamacpp"\nmin_prompt_tokens = 1000\n'
    printf 'short_queue_tokens = 1000000\nprefill_timeout = "120s"\nslot_dir = "%s"\nslot_wait = "60s"\n\n' "$slots"
    printf '[[rules]]\npool = "decode"\n'
    if [ "$2" -gt 1 ]; then
        printf '\n[fleet]\nstore = "redis://127.0.0.1:%s"\nreplica = "gw-%s"\n' "$REDIS_PORT" "$1"
    fi
}

# run SETUP
run() {
    local setup=$1 n=2 g i a b redis gateways=() clients=()
    [ "$setup" = one ] && n=1
    a=$(llama_server 0 8201 256 "$tmp/llama-8201-$setup.log" "$slots")
    pids+=("$a")
    b=$(llama_server 1 8202 2048 "$tmp/llama-8202-$setup.log" "$slots")
    pids+=("$b")
    wait_http http://127.0.0.1:8201/health 600
    wait_http http://127.0.0.1:8202/health 600
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis-$setup.log" 2>&1 &
    redis=$!
    pids+=("$redis")
    for g in $(seq 0 $((n - 1))); do
        config "$g" "$n" >"$tmp/$setup-g$g.toml"
        TOKENMETER_LISTEN="127.0.0.1:$((18000 + g))" TOKENMETER_ADMIN_LISTEN="127.0.0.1:$((19464 + g))" \
            "$BIN" serve --config "$tmp/$setup-g$g.toml" >"$tmp/serve-$setup-g$g.log" 2>&1 &
        gateways+=("$!")
        pids+=("$!")
    done
    for g in $(seq 0 $((n - 1))); do wait_http "http://127.0.0.1:$((19464 + g))/readyz" 600; done
    echo "== $setup: $n gateway(s), $RATE requests/s for $DURATION" >&2
    local each
    each=$(awk -v r="$RATE" 'BEGIN { print r / 2 }')
    for i in 0 1; do
        g=$((i % n))
        "$BIN" bench --url "http://127.0.0.1:$((18000 + g))" --rate "$each" --duration "$DURATION" \
            --seed "$((SEED * 100 + i))" --workload "$MIX" --json "$tmp/$setup-c$i.json" \
            >"$tmp/bench-$setup-c$i.log" 2>&1 &
        clients+=("$!")
    done
    if [ "$setup" = kill ]; then
        sleep "$KILL_AFTER"
        curl -s "http://127.0.0.1:19465/metrics" >"$tmp/$setup-g1.prom"
        kill -9 "${gateways[1]}"
        echo "   gateway 1 killed after ${KILL_AFTER}s" >&2
    fi
    for pid in "${clients[@]}"; do wait "$pid" || true; done
    for g in $(seq 0 $((n - 1))); do
        [ "$setup" = kill ] && [ "$g" = 1 ] && continue
        curl -s "http://127.0.0.1:$((19464 + g))/metrics" >"$tmp/$setup-g$g.prom"
    done
    curl -s http://127.0.0.1:8202/metrics >"$tmp/$setup.decode.prom"
    kill "${gateways[@]}" "$a" "$b" "$redis" 2>/dev/null || true
    wait "${gateways[@]}" "$a" "$b" "$redis" 2>/dev/null || true
    ls "$slots" | wc -l >"$tmp/$setup.files"
}

for setup in $SETUPS; do run "$setup"; done
echo "raw results in $tmp" >&2
fi

results='[]'
for setup in one two kill; do
    [ -f "$tmp/$setup-c0.json" ] || continue
    decode_prompt=$(awk '/^llamacpp:prompt_tokens_total/ {print $2}' "$tmp/$setup.decode.prom")
    # Handoffs by result, summed over the gateways (a killed one's as of just before its death).
    handoffs=$(cat "$tmp/$setup"-g*.prom | { grep -E '^tokenmeter_disaggregated_requests_total' || true; } \
        | sed -E 's/.*result="([a-z_]+)".* ([0-9.e+]+)$/\1 \2/' \
        | jq -R -s 'split("\n") | map(select(length > 0) | split(" ") | {(.[0]): (.[1] | tonumber)})
                    | reduce .[] as $o ({}; reduce ($o | to_entries[]) as $e (.; .[$e.key] += $e.value))')
    results=$(jq -s --arg setup "$setup" --argjson handoffs "$handoffs" --arg decode "${decode_prompt:-0}" \
        --arg files "$(cat "$tmp/$setup.files" 2>/dev/null || echo 0)" '
        def c($p; $n): $p.points[0].classes[] | select(.class == $n);
        {setup: $setup,
         clients: map({requests: c(.; "all").requests, errors: c(.; "all").errors,
                       slo_met_pct: (100 * c(.; "all").slo_met / c(.; "all").requests),
                       goodput_rps: c(.; "all").goodput,
                       chat_ttft_p99_ms: (c(.; "chat").ttft.p99 * 1000)}),
         requests: (map(c(.; "all").requests) | add), errors: (map(c(.; "all").errors) | add),
         slo_met_pct: (100 * (map(c(.; "all").slo_met) | add) / (map(c(.; "all").requests) | add)),
         goodput_rps: (map(c(.; "all").goodput) | add),
         handoffs: $handoffs, decode_prompt_tokens: ($decode | tonumber),
         files_left: ($files | tonumber)}' "$tmp/$setup"-c*.json | jq -s --argjson acc "$results" '$acc + .')
done
jq -n --arg rate "$RATE" --arg duration "$DURATION" --arg mix "$MIX" --arg kill "$KILL_AFTER" \
    --argjson results "$results" \
    '{rate: ($rate | tonumber), duration: $duration, mix: $mix, kill_after_s: ($kill | tonumber),
      engine: "llama-server (llama-cpp-python 0.3.36 sdist), 1 thread per server, taskset one core each, 4 slots; every prompt prefills on 8201 and decodes on 8202",
      results: $results}' >"$OUT"
table=$(jq -r '
  def r: (. * 10 | round) / 10;
  "| set-up | requests (errors) per client | handed off / slots busy / other | prompt tokens the decode server computed, per handoff | SLOs met | goodput (req/s) | files left |",
  "|---|---:|---:|---:|---:|---:|---:|",
  (.results[] | "| \(.setup) | \(.clients | map("\(.requests) (\(.errors))") | join(", ")) | \(.handoffs.remote // 0) / \(.handoffs.slots_busy // 0) / \((.handoffs | to_entries | map(select(.key != "remote" and .key != "slots_busy") | .value) | add) // 0) | \(.decode_prompt_tokens) (\(if (.handoffs.remote // 0) > 0 then (.decode_prompt_tokens / .handoffs.remote * 100 | round / 100) else "-" end)) | \(.slo_met_pct | r) % | \(.goodput_rps * 100 | round / 100) | \(.files_left) |")
' "$OUT")
echo "$table"
write_block llama-fleet "$table" docs/deploying.md
