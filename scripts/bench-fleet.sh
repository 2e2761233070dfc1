#!/usr/bin/env bash
# Gateway replicas as one fleet (#40, docs/deploying.md "Several gateway replicas"): the mixed
# workload of scripts/bench-slo.sh on its fleet of four simulated Llama-3.1-8B/H100 replicas (8101,
# 8102 full speed; 8103, 8104 half speed), through 1, 2 or 4 tokenmeter gateways (GATEWAYS).
#
# The clients are always CLIENTS `tokenmeter bench` processes (default 4), each at RATE / CLIENTS
# with its own seed (SEED * 100 + i), client i sending to gateway i mod N as a Service spreading
# connections would: so every gateway count sees the same arrivals (a run lasts until the last
# session has ended, so the totals differ by that tail).
# Set-ups (SETUPS): `slo` (balance = "slo", prefix affinity, [slo] 800 ms / 35 ms / gap 250 ms) and
# `gated` (the same with [pools.queue], on_deadline = "shed"), as bench-slo.sh's. FLEET says
# whether the gateways share their load through a Redis (`on`: [fleet] store, its interval INTERVAL,
# default 250ms; NEWS=off: without news between rounds) or each routes on its own (`off`); one
# gateway runs `off` only.
#
# Per run: requests, SLOs met and goodput summed over the clients (with and without the gap
# target), the worst client's chat TTFT p99 and chat ITL p99, and each gateway's TTFT prediction
# (predicted / measured, median); with the fleet on, what its syncs cost the store per gateway and
# second (script calls, Redis time per call, bytes in and out; news published and Redis time per
# news). Writes the `fleet` part of
# docs/fleet-results.json (NAME=x: the `fleet_x` part and `fleet-bench-x` markers) and the table
# between the fleet-bench markers of docs/deploying.md.
#
# RUNS=k repeats every cell k times, interleaved, repeat r with seed SEED + r for every gateway
# count alike (paired): one run's spread is as large as the 1.15x the fleet is judged by, so the
# table ends with each cell's SLO misses summed over its runs and their ratio to one gateway's.
#
# Usage: scripts/bench-fleet.sh        (RATES, SETUPS, GATEWAYS, FLEET, CLIENTS, DURATION, SEED,
#                                        RUNS, SESSION_RATIO, WORKLOAD, INTERVAL, NEWS, NAME override)
#        scripts/bench-fleet.sh --summarize DIR   (rebuild the outputs from DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATES=${RATES:-24}
SETUPS=${SETUPS:-"gated slo"}
GATEWAYS=${GATEWAYS:-"1 4"}
FLEET=${FLEET:-"off on"}
CLIENTS=${CLIENTS:-4}
DURATION=${DURATION:-45s}
SEED=${SEED:-1}
RUNS=${RUNS:-1}
INTERVAL=${INTERVAL:-}
NEWS=${NEWS:-on}
SESSION_RATIO=${SESSION_RATIO:-0.05}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
SLO_TTFT=800ms SLO_TPOT=35ms SLO_MAX_GAP=250ms
PROFILE=llama-3.1-8b-h100
PORTS=(8101 8102 8103 8104)
BIN=target/release/tokenmeter
OUT=docs/fleet-results.json
PART=fleet
MARK=fleet-bench
if [ -n "${NAME:-}" ]; then
    PART=${PART}_$NAME
    MARK=$MARK-$NAME
fi
# Gateway g listens on 18100 + g (traffic) and 19100 + g (admin); Redis on 16390.
REDIS_PORT=16390

# config SETUP FLEET GATEWAY: the config of gateway GATEWAY.
config() {
    printf '[server]\nlisten = "127.0.0.1:%d"\nadmin_listen = "127.0.0.1:%d"\n\n' $((18100 + $3)) $((19100 + $3))
    printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$SLO_TTFT" "$SLO_TPOT" "$SLO_MAX_GAP"
    if [ "$2" = on ]; then
        printf '[fleet]\nstore = "redis://127.0.0.1:%d"\nreplica = "gw-%d"\n' "$REDIS_PORT" "$3"
        if [ -n "$INTERVAL" ]; then printf 'interval = "%s"\n' "$INTERVAL"; fi
        if [ "$NEWS" = off ]; then printf 'news = false\n'; fi
        printf '\n'
    fi
    printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "slo"\naffinity = "prefix"\n' "$(urls "${PORTS[@]}")"
    printf 'affinity_load_factor = 1.5\naffinity_load_slack = 4\n'
    case $1 in
    slo) ;;
    gated) printf '\n[pools.queue]\ncapacity = 1024\non_deadline = "shed"\n' ;;
    *) echo "unknown set-up $1 (slo, gated)" >&2; exit 1 ;;
    esac
}

# cell_id SETUP FLEET N RATE R: a run's name (repeat 0 without a suffix, as before RUNS).
cell_id() {
    if [ "$5" = 0 ]; then echo "$1-$2-$3-$4"; else echo "$1-$2-$3-$4-r$5"; fi
}

# run SETUP FLEET N RATE R: the fleet, Redis (FLEET=on), N gateways, CLIENTS bench processes
# (repeat R: seed SEED + R); each client's report in RUN-c<i>.json, each gateway's metrics in
# RUN-g<g>.prom.
run() {
    local setup=$1 fleet=$2 n=$3 rate=$4 seed=$((SEED + $5)) id sims=() gateways=() clients=() g i
    id=$(cell_id "$@")
    start_sims "$id"
    if [ "$fleet" = on ]; then
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
            >"$tmp/redis-$id.log" 2>&1 &
        sims+=("$!")
        pids+=("$!")
    fi
    for g in $(seq 0 $((n - 1))); do
        config "$setup" "$fleet" "$g" >"$tmp/$id-g$g.toml"
        "$BIN" serve --config "$tmp/$id-g$g.toml" >"$tmp/serve-$id-g$g.log" 2>&1 &
        gateways+=("$!")
        pids+=("$!")
    done
    for g in $(seq 0 $((n - 1))); do wait_http "http://127.0.0.1:$((19100 + g))/readyz"; done
    local each session_each
    each=$(awk -v r="$rate" -v c="$CLIENTS" 'BEGIN { print r / c }')
    session_each=$(awk -v r="$rate" -v s="$SESSION_RATIO" -v c="$CLIENTS" 'BEGIN { print r * s / c }')
    local sessions=()
    if awk -v s="$session_each" 'BEGIN { exit !(s > 0) }'; then
        sessions=(--session-rate "$session_each" --system-prompts 4 --system-tokens uniform:1500-2500
            --turns uniform:4-8 --user-tokens uniform:200-500 --output-tokens uniform:100-200 --think-time 3s)
    fi
    for i in $(seq 0 $((CLIENTS - 1))); do
        g=$((i % n))
        "$BIN" bench --url "http://127.0.0.1:$((18100 + g))" --duration "$DURATION" --seed $((seed * 100 + i)) \
            --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" \
            --rate "$each" --workload "$WORKLOAD" "${sessions[@]}" --json "$tmp/$id-c$i.json" \
            >"$tmp/bench-$id-c$i.log" 2>&1 &
        clients+=("$!")
    done
    for pid in "${clients[@]}"; do wait "$pid"; done
    for g in $(seq 0 $((n - 1))); do
        curl -s "http://127.0.0.1:$((19100 + g))/metrics" >"$tmp/$id-g$g.prom"
    done
    if [ "$fleet" = on ]; then
        # What the fleet's syncs cost the store over the run: its script calls, their time, and
        # the bytes in and out (a run's seconds from Redis's own uptime).
        redis-cli -p "$REDIS_PORT" info all >"$tmp/$id-redis.txt"
    fi
    kill "${gateways[@]}" "${sims[@]}"
    wait "${gateways[@]}" "${sims[@]}" 2>/dev/null || true
}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
    cargo build --release --quiet
    tmp=$(mktemp -d)
    for r in $(seq 0 $((RUNS - 1))); do
        for rate in $RATES; do
            for setup in $SETUPS; do
                for n in $GATEWAYS; do
                    for fleet in $FLEET; do
                        [ "$n" = 1 ] && [ "$fleet" = on ] && continue
                        echo "== $setup, $n gateway(s), fleet $fleet: $rate requests/s for $DURATION (run $r, seed $((SEED + r)))" >&2
                        run "$setup" "$fleet" "$n" "$rate" "$r"
                    done
                done
            done
        done
    done
    echo "raw results in $tmp" >&2
fi

[ -f "$OUT" ] || echo '{}' >"$OUT"
results='[]'
for r in $(seq 0 $((RUNS - 1))); do
for rate in $RATES; do
    for setup in $SETUPS; do
        for n in $GATEWAYS; do
            for fleet in $FLEET; do
                id=$(cell_id "$setup" "$fleet" "$n" "$rate" "$r")
                [ -f "$tmp/$id-c0.json" ] || continue
                errors='[]'
                for prom in "$tmp/$id"-g*.prom; do
                    errors=$(jq --argjson e "$(prom_median "$prom" tokenmeter_prediction_error_ratio 'kind="ttft"')" \
                        '. + [$e]' <<<"$errors")
                done
                # Summed over the clients: requests, errors, those within TTFT and TPOT (goodput
                # times wall time, as bench-slo.sh counts them) and within the gap too (slo_met).
                # The store's cost per gateway and second (fleet on): script calls, microseconds
                # of Redis time, bytes in and out.
                store=null
                if [ -f "$tmp/$id-redis.txt" ]; then
                    store=$(awk -F'[:=,\r]' -v n="$n" '
                        /^uptime_in_seconds:/ { up = $2 }
                        /^cmdstat_evalsha:/ { calls = $3; usec = $5 }
                        /^cmdstat_publish:/ { news = $3; news_usec = $5 }
                        /^total_net_input_bytes:/ { rx = $2 }
                        /^total_net_output_bytes:/ { tx = $2 }
                        END { printf "{\"syncs_per_s\": %.2f, \"redis_us_per_sync\": %.1f, \"bytes_in_per_s\": %d, \"bytes_out_per_s\": %d, \"redis_cpu_share\": %.5f, \"news_per_s\": %.2f, \"redis_us_per_news\": %.1f}\n",
                              calls / n / up, usec / calls, rx / n / up, tx / n / up, (usec + news_usec) / 1e6 / up,
                              news / n / up, (news > 0 ? news_usec / news : 0) }' "$tmp/$id-redis.txt")
                fi
                results=$(jq -s --arg setup "$setup" --arg fleet "$fleet" --argjson n "$n" --argjson rate "$rate" \
                    --argjson errors "$errors" --argjson store "$store" --argjson run "$r" --argjson seed "$((SEED + r))" '
                    def ms: . * 1000;
                    def c($p; $n): $p.points[0].classes[] | select(.class == $n);
                    def r: (. * 10 | round) / 10;
                    (map(c(.; "all").requests) | add) as $requests
                    | (map((c(.; "all").goodput_ttft_tpot * .points[0].wall_time_s) | round) | add) as $met
                    | (map(c(.; "all").slo_met) | add) as $gap_met
                    | {setup: $setup, fleet: $fleet, gateways: $n, rate: $rate, run: $run, seed: $seed,
                       requests: $requests, misses: ($requests - $met), gap_misses: ($requests - $gap_met),
                       errors: (map(c(.; "all").errors) | add),
                       slo_met_pct: (100 * $met / $requests), gap_slo_met_pct: (100 * $gap_met / $requests),
                       goodput_rps: (map(c(.; "all").goodput_ttft_tpot) | add),
                       gap_goodput_rps: (map(c(.; "all").goodput) | add),
                       worst_chat_ttft_p99_ms: (map(c(.; "chat").ttft.p99 | ms) | max),
                       worst_chat_itl_p99_ms: (map(c(.; "chat").itl.p99 | ms) | max),
                       prediction_error_ttft_p50: $errors, store: $store}' "$tmp/$id"-c*.json | jq -s --argjson acc "$results" '$acc + .')
            done
        done
    done
done
done
part=$(jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg workload "$WORKLOAD" \
    --arg ratio "$SESSION_RATIO" --argjson clients "$CLIENTS" --argjson results "$results" \
    --argjson runs "$RUNS" \
    '{duration: $duration, seed: ($seed | tonumber), runs: $runs, workload: $workload, session_ratio: ($ratio | tonumber),
      clients: $clients, profile: "'"$PROFILE"'", replicas: "8101, 8102 full speed; 8103, 8104 half speed",
      slo: {ttft: "'"$SLO_TTFT"'", tpot: "'"$SLO_TPOT"'", max_gap: "'"$SLO_MAX_GAP"'"}, results: $results}')
jq --arg key "$PART" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
table=$(jq -r --arg key "$PART" '
  def r: (. * 10 | round) / 10;
  "| rate | set-up | gateways | fleet | requests (errors) | SLOs met | goodput (req/s) | SLOs met, gap counted | goodput, gap counted | worst client: chat TTFT p99 / ITL p99 (ms) | TTFT predicted / measured, p50, per gateway | store, per gateway: syncs/s, Redis µs each, bytes/s in / out (news/s, µs each) |",
  "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
  (.[$key].results[] | "| \(.rate) | \(.setup) | \(.gateways) | \(.fleet)\(if (.run // 0) > 0 then " (run \(.run), seed \(.seed))" else "" end) | \(.requests) (\(.errors)) | \(.slo_met_pct | r) % | \(.goodput_rps | r) | \(.gap_slo_met_pct | r) % | \(.gap_goodput_rps | r) | \(.worst_chat_ttft_p99_ms | r) / \(.worst_chat_itl_p99_ms | r) | \(.prediction_error_ttft_p50 | map(if . == null then "-" else tostring end) | join(", ")) | \(if .store then "\(.store.syncs_per_s), \(.store.redis_us_per_sync), \(.store.bytes_in_per_s) / \(.store.bytes_out_per_s)\(if (.store.news_per_s // 0) > 0 then " (\(.store.news_per_s), \(.store.redis_us_per_news))" else "" end)" else "-" end) |")' "$OUT")
# Each cell's misses summed over its runs, against one gateway's at the same rate and set-up.
judged=$(jq -r --arg key "$PART" '
  def r: (. * 100 | round) / 100;
  .[$key].results as $all
  | ($all | group_by([.rate, .setup, .gateways, .fleet])
     | map({rate: .[0].rate, setup: .[0].setup, gateways: .[0].gateways, fleet: .[0].fleet, runs: length,
            misses: (map(.misses // 0) | add), gap_misses: (map(.gap_misses // 0) | add),
            requests: (map(.requests) | add)})) as $cells
  | if ($all | map(.run // 0) | max) == 0 then empty else
    "",
    "| rate | set-up | gateways | fleet | runs | requests | SLO misses (ratio to one gateway) | misses, gap counted (ratio) |",
    "|---:|---|---:|---|---:|---:|---:|---:|",
    ($cells[] as $c
     | ($cells | map(select(.rate == $c.rate and .setup == $c.setup and .gateways == 1)) | first) as $one
     | "| \($c.rate) | \($c.setup) | \($c.gateways) | \($c.fleet) | \($c.runs) | \($c.requests) | \($c.misses) (\(if $one and $one.misses > 0 then ($c.misses / $one.misses | r | tostring) + "x" else "-" end)) | \($c.gap_misses) (\(if $one and $one.gap_misses > 0 then ($c.gap_misses / $one.gap_misses | r | tostring) + "x" else "-" end)) |")
    end' "$OUT")
table="$table$judged"
echo "$table"
if grep -q "<!-- $MARK:begin -->" docs/deploying.md; then
    write_block "$MARK" "$table" docs/deploying.md
else
    echo "docs/deploying.md has no $MARK markers: the table is not written there" >&2
fi
