#!/usr/bin/env bash
# Prefix affinity against the best load-only balancing, on four simulated replicas with vLLM's
# prefix cache (docs/routing.md, "Prefix affinity, measured").
#
# Four simulated Llama-3.1-70B replicas on 4xH100 each (prefix caching on, as vLLM's default, reporting
# cached tokens), a multi-turn session workload (sessions arrive Poisson, each one of a few shared
# system prompts, turns that resend the whole conversation, think time between turns), through
# tokenmeter (so proxy overhead is identical), two set-ups:
#   p2c:    one pool, power of two choices on streams in flight;
#   prefix: the same pool with affinity = "prefix" (config/examples/affinity.toml's bound).
# Writes docs/affinity-results.json and the tables between the affinity-sim markers of
# docs/routing.md.
#
# ENGINE=llama runs the same comparison on a real engine: two llama.cpp servers
# (scripts/llama/build.sh), one thread each, pinned to their own core, 4 slots each, round-robin
# (`round_robin`) against `prefix`, with a smaller session workload; it writes
# docs/affinity-llama-results.json and the affinity-llama tables.
#
# Usage: scripts/bench-affinity.sh        (SESSION_RATES, DURATION, SEED, SETUPS, TURNS, ... override)
#        ENGINE=llama scripts/bench-affinity.sh
#        scripts/bench-affinity.sh --summarize DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

ENGINE=${ENGINE:-sim}
if [ "$ENGINE" = llama ]; then
    SESSION_RATES=${SESSION_RATES:-"0.4"}
    SETUPS=${SETUPS:-"round_robin prefix"}
    SYSTEM_TOKENS=${SYSTEM_TOKENS:-uniform:300-600}
    TURNS=${TURNS:-uniform:3-6}
    USER_TOKENS=${USER_TOKENS:-uniform:50-150}
    OUTPUT_TOKENS=${OUTPUT_TOKENS:-uniform:24-48}
    PORTS="8201 8202"
    OUT=docs/affinity-llama-results.json MARK=affinity-llama
    PROFILE="llama-server (llama-cpp-python 0.3.36 sdist), random 27M-parameter model, 1 thread per server"
else
    SESSION_RATES=${SESSION_RATES:-"2 4 6"}
    SETUPS=${SETUPS:-"p2c prefix"}
    SYSTEM_TOKENS=${SYSTEM_TOKENS:-uniform:1500-2500}
    TURNS=${TURNS:-uniform:4-8}
    USER_TOKENS=${USER_TOKENS:-uniform:200-500}
    OUTPUT_TOKENS=${OUTPUT_TOKENS:-uniform:100-200}
    PORTS="8101 8102 8103 8104"
    OUT=docs/affinity-results.json MARK=affinity-sim
    PROFILE=${PROFILE:-llama-3.1-70b-4xh100}
fi
DURATION=${DURATION:-90s}
SEED=${SEED:-1}
SYSTEM_PROMPTS=${SYSTEM_PROMPTS:-4}
THINK_TIME=${THINK_TIME:-3s}
LLAMA=${TOKENMETER_LLAMA_DIR:-target/llama}
BIN=target/release/tokenmeter
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
[ "$ENGINE" = llama ] && scripts/llama/build.sh
cargo build --release --quiet
tmp=$(mktemp -d)

# run SETUP RATE
run() {
    local name=$1 rate=$2 port sims=() core=0
    for port in $PORTS; do
        if [ "$ENGINE" = llama ]; then
            taskset -c "$core" "$LLAMA/bin/llama-server" --model "$LLAMA/model.gguf" --host 127.0.0.1 \
                --port "$port" --threads 1 --threads-batch 1 --parallel 4 --ctx-size 16384 --metrics \
                >"$tmp/llama-$port-$name-$rate.log" 2>&1 &
            core=$((core + 1))
        else
            "$BIN" sim --listen "127.0.0.1:$port" --profile "$PROFILE" --enable-prompt-tokens-details \
                >"$tmp/sim-$port-$name-$rate.log" 2>&1 &
        fi
        sims+=("$!")
        pids+=("$!")
    done
    for port in $PORTS; do wait_http "http://127.0.0.1:$port/health" 600; done
    local affinity=none balance=streams urls=""
    [ "$name" = prefix ] && affinity=prefix
    [ "$name" = round_robin ] && balance=round_robin
    for port in $PORTS; do urls="$urls\"http://127.0.0.1:$port\", "; done
    printf '[[pools]]\nname = "chat"\nurls = [%s]\nbalance = "%s"\naffinity = "%s"\n' \
        "${urls%, }" "$balance" "$affinity" >"$tmp/$name.toml"
    "$BIN" serve --config "$tmp/$name.toml" >"$tmp/serve-$name.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz" 600
    echo "== $name: $rate sessions/s for $DURATION" >&2
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --session-rate "$rate" --duration "$DURATION" \
        --seed "$SEED" --system-prompts "$SYSTEM_PROMPTS" --system-tokens "$SYSTEM_TOKENS" \
        --turns "$TURNS" --user-tokens "$USER_TOKENS" --output-tokens "$OUTPUT_TOKENS" \
        --think-time "$THINK_TIME" --json "$tmp/$name-$rate.json" >&2
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$name-$rate.prom"
    for port in $PORTS; do curl -s "http://127.0.0.1:$port/metrics" >"$tmp/$name-$rate-sim-$port.prom"; done
    grep '^tokenmeter_affinity_decisions_total' "$tmp/$name-$rate.prom" >&2 || true
    kill "$serve" "${sims[@]}"
    wait "$serve" "${sims[@]}" 2>/dev/null || true
}

for rate in $SESSION_RATES; do
    for setup in $SETUPS; do run "$setup" "$rate"; done
done
echo "raw results in $tmp" >&2
fi

# prom_sum FILE REGEX: the sum of the samples whose line matches.
prom_sum() {
    { grep -E "$2" "$1" || true; } | awk '{ s += $NF } END { printf "%.0f", s + 0 }'
}

results='[]'
for rate in $SESSION_RATES; do
for setup in $SETUPS; do
    f="$tmp/$setup-$rate.json"
    [ -f "$f" ] || continue
    sim_hits=0 sim_queries=0 per_backend='[]'
    for port in $PORTS; do
        sim_hits=$((sim_hits + $(prom_sum "$tmp/$setup-$rate-sim-$port.prom" '^vllm:prefix_cache_hits_total')))
        sim_queries=$((sim_queries + $(prom_sum "$tmp/$setup-$rate-sim-$port.prom" '^vllm:prefix_cache_queries_total')))
        per_backend=$(jq --argjson n "$(prom_sum "$tmp/$setup-$rate.prom" "^tokenmeter_requests_total\\{.*backend=\"127.0.0.1:$port\"")" '. + [$n]' <<<"$per_backend")
    done
    proxy_hit=$(prom_sum "$tmp/$setup-$rate.prom" '^tokenmeter_prompt_cache_tokens_total\{.*result="hit"')
    proxy_miss=$(prom_sum "$tmp/$setup-$rate.prom" '^tokenmeter_prompt_cache_tokens_total\{.*result="miss"')
    decisions=$({ grep '^tokenmeter_affinity_decisions_total' "$tmp/$setup-$rate.prom" || true; } \
        | sed -E 's/.*result="([a-z]+)"\} ([0-9.e+]+)/{"\1": \2}/' | jq -s 'add // {}')
    results=$(jq --arg setup "$setup" --argjson rate "$rate" --argjson sim_hits "$sim_hits" --argjson sim_queries "$sim_queries" \
        --argjson proxy_hit "$proxy_hit" --argjson proxy_miss "$proxy_miss" \
        --argjson per_backend "$per_backend" --argjson decisions "$decisions" --slurpfile r "$f" '
        def ms: . * 1000;
        ($r[0].points[0].classes[] | select(.class == "all")) as $all |
        . + [{setup: $setup, session_rate: $rate, requests: $all.requests, errors: $all.errors,
              ttft_p50_ms: ($all.ttft.p50 | ms), ttft_p99_ms: ($all.ttft.p99 | ms),
              tpot_p99_ms: ($all.tpot.p99 | ms), itl_p99_ms: ($all.itl.p99 | ms),
              slo_met_pct: (100 * $all.slo_met / $all.requests), goodput_rps: $all.goodput,
              sessions: $r[0].sessions.started, cached_ratio_client: $r[0].sessions.cached_ratio,
              cached_ratio_replicas: (if $sim_queries > 0 then $sim_hits / $sim_queries else null end),
              cached_ratio_tokenmeter: ($proxy_hit / ($proxy_hit + $proxy_miss)),
              requests_per_backend: $per_backend, affinity_decisions: $decisions,
              by_turn: [$r[0].sessions.by_turn[] | {turn, and_later, requests,
                  ttft_p50_ms: (.ttft.p50 | ms), ttft_p99_ms: (.ttft.p99 | ms),
                  prompt_tokens: .prompt_tokens.mean, cached_ratio}]}]' <<<"$results")
done
done
jq -n --arg duration "$DURATION" --arg seed "$SEED" \
    --arg workload "system_prompts=$SYSTEM_PROMPTS system_tokens=$SYSTEM_TOKENS turns=$TURNS user_tokens=$USER_TOKENS output_tokens=$OUTPUT_TOKENS think_time=$THINK_TIME" \
    --argjson results "$results" \
    '{duration: $duration, seed: ($seed | tonumber), workload: $workload,
      engine: "'"$PROFILE"'", replicas: '"$(wc -w <<<"$PORTS")"', results: $results}' >"$OUT"

table=$(jq -r '
  def r: (. * 10 | round) / 10;
  def pct: if . == null then "-" else (. * 1000 | round / 10 | tostring) + " %" end;
  def spread: (add) as $t | map(. / $t * 100 | round | tostring + " %") | join(" / ");
  "| sessions/s | set-up | TTFT p50 / p99 (ms) | TPOT p99 (ms) | SLOs met | goodput (req/s) | cached: replicas / tokenmeter / client | requests per replica | affinity hit / miss / overloaded |",
  "|---:|---|---:|---:|---:|---:|---:|---|---|",
  (.results[] | "| \(.session_rate) | \(.setup) | \(.ttft_p50_ms | r) / \(.ttft_p99_ms | r) | \(.tpot_p99_ms | r) | \(.slo_met_pct | r) % | \(.goodput_rps | r) | \(.cached_ratio_replicas | pct) / \(.cached_ratio_tokenmeter | pct) / \(.cached_ratio_client | pct) | \(.requests_per_backend | spread) | \(.affinity_decisions.hit // "-") / \(.affinity_decisions.miss // "-") / \(.affinity_decisions.overloaded // "-") |"),
  "",
  "| turn | " + ([.results[] | "\(.setup) at \(.session_rate)/s: TTFT p50 / p99 (ms), cached"] | join(" | ")) + " |",
  "|---:|" + ([.results[] | "---:"] | join("|")) + "|",
  ([.results[].by_turn] | transpose[] | map(select(. != null)) |
    "| \(.[0].turn)\(if .[0].and_later then "+" else "" end) | " +
    (map("\(.ttft_p50_ms | r) / \(.ttft_p99_ms | r), \(.cached_ratio | pct)") | join(" | ")) + " |")
' "$OUT")
echo "$table"
write_block "$MARK" "$table"
