#!/usr/bin/env bash
# The SLO headroom signal against what users felt (#41, docs/autoscaling.md): the mixed workload of
# scripts/bench-fleet.sh on its fleet of four simulated Llama-3.1-8B/H100 replicas (8101, 8102 full
# speed; 8103, 8104 half speed) through one gateway (`balance = "slo"`, prefix affinity, [slo]
# 800 ms / 35 ms / gap 250 ms), one steady rate per run (RATES). While each run lasts, the gateway's
# /metrics is read every 2 s; the table gives, over the run's second half, the median of what the
# signal said (offered load, capacity, its calibration, headroom, and the replicas that keep 1.25x
# the load at that capacity a replica: the desired count itself holds its highest for
# scale_down_after, longer than a run) beside the share of SLOs the run's requests met (TTFT and
# TPOT; and with the gap counted).
#
# What it shows: the rate where the headroom crosses 1 against the rate where SLO attainment
# falls below the objective. Writes the `sweep` part of docs/autoscaling-results.json (NAME=x: the
# `sweep_x` part) and the table between the headroom-sweep markers of docs/autoscaling.md.
#
# Usage: scripts/bench-headroom.sh        (RATES, DURATION, SEED, RUNS, SESSION_RATIO, WORKLOAD,
#                                           NAME override)
#        scripts/bench-headroom.sh --summarize DIR   (rebuild the outputs from DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATES=${RATES:-"8 16 24 32 40"}
DURATION=${DURATION:-60s}
SEED=${SEED:-1}
RUNS=${RUNS:-1}
SESSION_RATIO=${SESSION_RATIO:-0.05}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
SLO_TTFT=800ms SLO_TPOT=35ms SLO_MAX_GAP=250ms
PROFILE=llama-3.1-8b-h100
PORTS=(8101 8102 8103 8104)
BIN=target/release/tokenmeter
OUT=docs/autoscaling-results.json
PART=sweep
MARK=headroom-sweep
if [ -n "${NAME:-}" ]; then
    PART=${PART}_$NAME
    MARK=$MARK-$NAME
fi
TRAFFIC=18100
ADMIN=19100

config() {
    printf '[server]\nlisten = "127.0.0.1:%d"\nadmin_listen = "127.0.0.1:%d"\n\n' "$TRAFFIC" "$ADMIN"
    printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$SLO_TTFT" "$SLO_TPOT" "$SLO_MAX_GAP"
    printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "slo"\naffinity = "prefix"\n' "$(urls "${PORTS[@]}")"
    printf 'affinity_load_factor = 1.5\naffinity_load_slack = 4\n'
}

# run RATE R: the fleet, the gateway, one load generator at RATE (seed SEED + R); its report in
# RATE-rR.json, the gateway's signal every 2 s in RATE-rR.signal (seconds since start, offered,
# capacity, headroom, desired, ready).
run() {
    local rate=$1 seed=$((SEED + $2)) id="$1-r$2" sims=() gateway client sessions=() start
    start_sims "$id"
    config >"$tmp/$id.toml"
    "$BIN" serve --config "$tmp/$id.toml" >"$tmp/serve-$id.log" 2>&1 &
    gateway=$!
    pids+=("$gateway")
    wait_http "http://127.0.0.1:$ADMIN/readyz"
    local session_rate
    session_rate=$(awk -v r="$rate" -v s="$SESSION_RATIO" 'BEGIN { print r * s }')
    if awk -v s="$session_rate" 'BEGIN { exit !(s > 0) }'; then
        sessions=(--session-rate "$session_rate" --system-prompts 4 --system-tokens uniform:1500-2500
            --turns uniform:4-8 --user-tokens uniform:200-500 --output-tokens uniform:100-200 --think-time 3s)
    fi
    "$BIN" bench --url "http://127.0.0.1:$TRAFFIC" --duration "$DURATION" --seed "$seed" \
        --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" \
        --rate "$rate" --workload "$WORKLOAD" "${sessions[@]}" --json "$tmp/$id.json" \
        >"$tmp/bench-$id.log" 2>&1 &
    client=$!
    start=$(date +%s.%N)
    : >"$tmp/$id.signal"
    while kill -0 "$client" 2>/dev/null; do
        curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v t="$(date +%s.%N)" -v s="$start" '
            /^tokenmeter_pool_offered_requests_per_second\{/ { o = $2 }
            /^tokenmeter_pool_capacity_requests_per_second\{/ { c = $2 }
            /^tokenmeter_pool_slo_headroom_ratio\{/ { h = $2 }
            /^tokenmeter_pool_desired_replicas\{/ { d = $2 }
            /^tokenmeter_pool_ready_replicas\{/ { r = $2 }
            /^tokenmeter_pool_capacity_calibration_ratio\{/ { k = $2 }
            END { if (o != "") printf "%.1f %s %s %s %s %s %s\n", t - s, o, c, h, d, r, (k == "" ? "NaN" : k) }' >>"$tmp/$id.signal"
        sleep 2
    done
    wait "$client" || true
    kill "$gateway" "${sims[@]}"
    wait "$gateway" "${sims[@]}" 2>/dev/null || true
}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
    cargo build --release --quiet
    tmp=$(mktemp -d)
    for r in $(seq 0 $((RUNS - 1))); do
        for rate in $RATES; do
            echo "== $rate requests/s for $DURATION (run $r, seed $((SEED + r)))" >&2
            run "$rate" "$r"
        done
    done
    echo "raw results in $tmp" >&2
fi

[ -f "$OUT" ] || echo '{}' >"$OUT"
seconds=${DURATION%s}
results='[]'
for r in $(seq 0 $((RUNS - 1))); do
    for rate in $RATES; do
        id="$rate-r$r"
        [ -f "$tmp/$id.json" ] || continue
        # The signal's medians over the run's second half (NaN, before the models know, as null).
        signal=$(awk -v half="$((seconds / 2))" -v end="$seconds" '$1 >= half && $1 <= end' "$tmp/$id.signal" \
            | jq -R -s '
                def median: if length == 0 then null else sort | .[(length - 1) / 2 | floor] end;
                def num: if . == "NaN" then null else tonumber end;
                [split("\n")[] | select(length > 0) | split(" ")] as $rows
                | {samples: ($rows | length),
                   offered: ($rows | map(.[1] | num) | map(select(. != null)) | median),
                   capacity: ($rows | map(.[2] | num) | map(select(. != null)) | median),
                   headroom: ($rows | map(.[3] | num) | map(select(. != null)) | median),
                   desired: ($rows | map(.[4] | num) | map(select(. != null)) | median),
                   ready: ($rows | map(.[5] | num) | map(select(. != null)) | median),
                   calibration: ($rows | map(.[6] // "NaN" | num) | map(select(. != null)) | median)}')
        results=$(jq --argjson rate "$rate" --argjson run "$r" --argjson seed "$((SEED + r))" \
            --argjson signal "$signal" --argjson acc "$results" '
            def c($n): .points[0].classes[] | select(.class == $n);
            c("all") as $all
            | (($all.goodput_ttft_tpot * .points[0].wall_time_s) | round) as $met
            | $acc + [{rate: $rate, run: $run, seed: $seed, requests: $all.requests, errors: $all.errors,
                       slo_met_pct: (100 * $met / $all.requests),
                       gap_slo_met_pct: (100 * $all.slo_met / $all.requests),
                       signal: $signal}]' "$tmp/$id.json")
    done
done
part=$(jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg workload "$WORKLOAD" \
    --arg ratio "$SESSION_RATIO" --argjson runs "$RUNS" --argjson results "$results" \
    '{duration: $duration, seed: ($seed | tonumber), runs: $runs, workload: $workload,
      session_ratio: ($ratio | tonumber), profile: "'"$PROFILE"'",
      replicas: "8101, 8102 full speed; 8103, 8104 half speed",
      slo: {ttft: "'"$SLO_TTFT"'", tpot: "'"$SLO_TPOT"'", max_gap: "'"$SLO_MAX_GAP"'"}, results: $results}')
jq --arg key "$PART" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
table=$(jq -r --arg key "$PART" '
  def r: if . == null then "-" else ((. * 10 | round) / 10 | tostring) end;
  def rr: if . == null then "-" else ((. * 100 | round) / 100 | tostring) end;
  def needed: if .signal.capacity == null or .signal.capacity == 0 then "-"
    else ((.signal.offered * 1.25 / (.signal.capacity / .signal.ready)) | ceil | tostring) end;
  "| rate | run (seed) | requests (errors) | offered (signal) | capacity | calibration | headroom | replicas for 1.25x (4 running) | SLOs met | SLOs met, gap counted |",
  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  (.[$key].results[] | "| \(.rate) | \(.run) (\(.seed)) | \(.requests) (\(.errors)) | \(.signal.offered | r) | \(.signal.capacity | r) | \(.signal.calibration | rr) | \(.signal.headroom | rr) | \(needed) | \(.slo_met_pct | r) % | \(.gap_slo_met_pct | r) % |")' "$OUT")
echo "$table"
if grep -q "<!-- $MARK:begin -->" docs/autoscaling.md 2>/dev/null; then
    write_block "$MARK" "$table" docs/autoscaling.md
else
    echo "docs/autoscaling.md has no $MARK markers: the table is not written there" >&2
fi
