#!/usr/bin/env bash
# The autoscaling loop closed on the testbed (#41, docs/autoscaling.md "The loop closed"): a load
# that ramps 3x, holds and ramps down, served by a pool of simulated Llama-3.1-8B/H100 replicas
# behind one gateway (`balance = "slo"`, prefix affinity, [slo] 800 ms / 35 ms / gap 250 ms) whose
# size an autoscaler loop in this script sets, by one of these MODES:
#
#   headroom   tokenmeter's own signal: tokenmeter_pool_desired_replicas of the gateway's /metrics
#              ([pools.autoscale] headroom 1.25, cold_start COLD, scale_down_after COOLDOWN;
#              headroom:H: headroom H);
#   queue:N    queue depth, as vLLM's production stack scales through KEDA: the replicas' summed
#              vllm:num_requests_waiting / N, rounded up (an HPA's AverageValue), scale-down held
#              to the highest asked over COOLDOWN (an HPA's stabilization window);
#   peak:N     a fleet of N replicas throughout, sized for the peak.
#
# Every POLL seconds the loop reads the signal; a replica it adds joins the gateway's pool COLD
# seconds later (its cold start: the GPU is held, and counted, from the decision), by a rewrite
# of the gateway's config and a SIGHUP (a live reload: no restart, streams in flight stay where
# they are); a replica it removes leaves the pool at once and its streams finish there. Replicas
# are `tokenmeter sim` processes started up front on PORTS (MAX of them); one outside the pool is
# not counted. The load: BASE requests/s for LEAD seconds, up to 3 x BASE over RAMP seconds,
# held HOLD seconds, down to BASE over RAMP, then TAIL seconds at BASE, in STEP-second steps (one
# `tokenmeter bench` each, started on schedule whatever the last one does), chats and documents
# (WORKLOAD); beside them multi-turn sessions at SESSION_RATIO x BASE a second throughout.
#
# What it writes: the `loop` part of docs/autoscaling-results.json (NAME=x: `loop_x`) and the table
# between the autoscale-loop markers of docs/autoscaling.md: per mode, the share of SLOs met (TTFT
# and TPOT; and with the gap counted), the replica-seconds against the peak-sized fleet's, when the
# count first rose after the ramp began, and how often it changed while the load held.
#
# Usage: scripts/bench-autoscale.sh          (MODES, BASE, LEAD, RAMP, HOLD, TAIL, STEP, COLD, POLL,
#                                              COOLDOWN, MAX, SEED, NAME override)
#        scripts/bench-autoscale.sh --summarize DIR   (rebuild the outputs from DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

MODES=${MODES:-"headroom queue:5 peak:3 peak:4"}
BASE=${BASE:-6}
LEAD=${LEAD:-60}
RAMP=${RAMP:-120}
HOLD=${HOLD:-120}
TAIL=${TAIL:-60}
STEP=${STEP:-10}
COLD=${COLD:-20}
POLL=${POLL:-5}
COOLDOWN=${COOLDOWN:-60}
MAX=${MAX:-6}
SEED=${SEED:-1}
SESSION_RATIO=${SESSION_RATIO:-0.05}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
SLO_TTFT=800ms SLO_TPOT=35ms SLO_MAX_GAP=250ms
PROFILE=llama-3.1-8b-h100
BIN=target/release/tokenmeter
OUT=docs/autoscaling-results.json
PART=loop
MARK=autoscale-loop
if [ -n "${NAME:-}" ]; then
    PART=${PART}_$NAME
    MARK=$MARK-$NAME
fi
TRAFFIC=18200
ADMIN=19200
PORTS=()
for k in $(seq 1 "$MAX"); do PORTS+=($((8200 + k))); done

# config FILE PORT...: the gateway's config with PORT... in its pool.
config() {
    local file=$1
    shift
    {
        printf '[server]\nlisten = "127.0.0.1:%d"\nadmin_listen = "127.0.0.1:%d"\n\n' "$TRAFFIC" "$ADMIN"
        printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$SLO_TTFT" "$SLO_TPOT" "$SLO_MAX_GAP"
        printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "slo"\naffinity = "prefix"\n' "$(urls "$@")"
        printf 'affinity_load_factor = 1.5\naffinity_load_slack = 4\n\n'
        printf '[pools.autoscale]\nmax_replicas = %d\nscale_down_after = "%ds"\n' "$MAX" "$COOLDOWN"
        printf 'headroom = %s\ncold_start = "%ds"\n' "$FACTOR" "$COLD"
    } >"$file.new"
    mv "$file.new" "$file"
}

# The load's rate at second T of the profile.
rate_at() {
    awk -v t="$1" -v b="$BASE" -v lead="$LEAD" -v ramp="$RAMP" -v hold="$HOLD" 'BEGIN {
        p = 3 * b
        if (t < lead) r = b
        else if (t < lead + ramp) r = b + (p - b) * (t - lead) / ramp
        else if (t < lead + ramp + hold) r = p
        else if (t < lead + 2 * ramp + hold) r = p - (p - b) * (t - lead - ramp - hold) / ramp
        else r = b
        printf "%.2f\n", r }'
}

# load ID: the profile, one bench a STEP (each at the rate of its middle second), reports in
# $tmp/ID-step-K.json; and beside them one bench of multi-turn sessions for the whole profile at
# SESSION_RATIO x BASE sessions a second (not ramped: a mixed bench keeps its requests arriving
# until its last session ends, so the steps carry no sessions), its report $tmp/ID-sessions.json.
load() {
    local id=$1 total=$((LEAD + 2 * RAMP + HOLD + TAIL)) k=0 t rate session_rate clients=()
    local start
    start=$(date +%s.%N)
    session_rate=$(awk -v r="$BASE" -v s="$SESSION_RATIO" 'BEGIN { print r * s }')
    if awk -v s="$session_rate" 'BEGIN { exit !(s > 0) }'; then
        "$BIN" bench --url "http://127.0.0.1:$TRAFFIC" --duration "${total}s" --seed $((SEED * 1000 + 999)) \
            --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" \
            --session-rate "$session_rate" --system-prompts 4 --system-tokens uniform:1500-2500 \
            --turns uniform:4-8 --user-tokens uniform:200-500 --output-tokens uniform:100-200 --think-time 3s \
            --json "$tmp/$id-sessions.json" >"$tmp/bench-$id-sessions.log" 2>&1 &
        clients+=("$!")
    fi
    for ((t = 0; t < total; t += STEP)); do
        rate=$(rate_at $((t + STEP / 2)))
        "$BIN" bench --url "http://127.0.0.1:$TRAFFIC" --duration "${STEP}s" --seed $((SEED * 1000 + k)) \
            --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" \
            --rate "$rate" --workload "$WORKLOAD" --json "$tmp/$id-step-$k.json" \
            >"$tmp/bench-$id-$k.log" 2>&1 &
        clients+=("$!")
        k=$((k + 1))
        sleep "$(awk -v s="$start" -v next_t=$((t + STEP)) -v now="$(date +%s.%N)" \
            'BEGIN { d = s + next_t - now; print (d > 0 ? d : 0) }')"
    done
    wait "${clients[@]}" || true
}

# signal MODE: the replica count MODE asks for now; empty when it cannot say (hold).
signal() {
    case $1 in
    headroom | headroom:*)
        curl -s "http://127.0.0.1:$ADMIN/metrics" |
            awk '/^tokenmeter_pool_desired_replicas\{/ { print $2 }'
        ;;
    queue:*)
        local per=${1#queue:} port waiting=0 w
        for port in "${pool[@]}"; do
            w=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^vllm:num_requests_waiting/ { print $2 }')
            waiting=$(awk -v a="$waiting" -v b="${w:-0}" 'BEGIN { print a + b }')
        done
        awk -v w="$waiting" -v per="$per" 'BEGIN { n = w / per; c = int(n); if (c < n) c++; print c }'
        ;;
    peak:*) echo "${1#peak:}" ;;
    esac
}

# scaler MODE ID: the autoscaler loop, until $tmp/ID.done exists. Logs a line a tick to
# $tmp/ID.scale: seconds since start, replicas asked, in the pool, starting.
scaler() {
    local mode=$1 id=$2 start now asked want held t port changed
    local -a history=() starting=() ready_at=()
    start=$(date +%s.%N)
    : >"$tmp/$id.scale"
    while [ ! -f "$tmp/$id.done" ]; do
        now=$(date +%s.%N)
        t=$(awk -v n="$now" -v s="$start" 'BEGIN { printf "%.1f", n - s }')
        asked=$(signal "$mode" | head -1)
        if [[ "$asked" =~ ^[0-9.]+$ ]]; then
            want=$(awk -v a="$asked" -v m="$MAX" 'BEGIN { a = int(a + 0.5); if (a < 1) a = 1; if (a > m) a = m; print a }')
            if [[ $mode == queue:* ]]; then
                # An HPA's scale-down stabilization: the highest asked over COOLDOWN holds.
                history+=("$t $want")
                held=$(printf '%s\n' "${history[@]}" | awk -v t="$t" -v w="$COOLDOWN" '$1 >= t - w && $2 > m { m = $2 } END { print m }')
                want=$held
            fi
        else
            want=$((${#pool[@]} + ${#starting[@]}))
        fi
        changed=no
        # Up: replicas not yet allocated start now and join after COLD.
        while [ $((${#pool[@]} + ${#starting[@]})) -lt "$want" ]; do
            for port in "${PORTS[@]}"; do
                if [[ " ${pool[*]} ${starting[*]} " != *" $port "* ]]; then
                    starting+=("$port")
                    ready_at+=("$(awk -v n="$now" -v c="$COLD" 'BEGIN { printf "%.3f\n", n + c }')")
                    break
                fi
            done
        done
        # Down: the starting ones first, then the pool's newest.
        while [ $((${#pool[@]} + ${#starting[@]})) -gt "$want" ]; do
            if [ ${#starting[@]} -gt 0 ]; then
                unset 'starting[-1]' 'ready_at[-1]'
                starting=("${starting[@]}") ready_at=("${ready_at[@]}")
            else
                unset 'pool[-1]'
                pool=("${pool[@]}")
                changed=yes
            fi
        done
        # Cold starts done: into the pool.
        local -a still=() still_at=()
        for k in "${!starting[@]}"; do
            if awk -v n="$now" -v r="${ready_at[$k]}" 'BEGIN { exit !(n >= r) }'; then
                pool+=("${starting[$k]}")
                changed=yes
            else
                still+=("${starting[$k]}")
                still_at+=("${ready_at[$k]}")
            fi
        done
        starting=("${still[@]}") ready_at=("${still_at[@]}")
        if [ "$changed" = yes ]; then
            config "$tmp/$id.toml" "${pool[@]}"
            kill -HUP "$gateway"
        fi
        echo "$t ${asked:-NaN} ${#pool[@]} ${#starting[@]}" >>"$tmp/$id.scale"
        # The gateway's whole signal beside it (the headroom's offered load, forecast, capacity,
        # calibration): what docs/autoscaling.md reads a run's decisions from.
        curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v t="$t" '
            /^tokenmeter_pool_[a-z_]+\{/ { sub(/\{.*/, "", $1); sub(/^tokenmeter_pool_/, "", $1); line = line " " $1 "=" $2 }
            END { print t line }' >>"$tmp/$id.signal"
        sleep "$POLL"
    done
}

# run MODE: the fleet, the gateway with one replica (peak: all N), the scaler and the load.
run() {
    local mode=$1 id=${1/:/-} port sims=() scaler_pid
    pool=("${PORTS[0]}")
    FACTOR=1.25
    if [[ $mode == headroom:* ]]; then FACTOR=${mode#headroom:}; fi
    if [[ $mode == peak:* ]]; then pool=("${PORTS[@]:0:${mode#peak:}}"); fi
    for port in "${PORTS[@]}"; do
        "$BIN" sim --listen "127.0.0.1:$port" --profile "$PROFILE" --enable-prompt-tokens-details \
            >"$tmp/sim-$port-$id.log" 2>&1 &
        sims+=("$!")
        pids+=("$!")
    done
    for port in "${PORTS[@]}"; do wait_http "http://127.0.0.1:$port/health"; done
    config "$tmp/$id.toml" "${pool[@]}"
    "$BIN" serve --config "$tmp/$id.toml" >"$tmp/serve-$id.log" 2>&1 &
    gateway=$!
    pids+=("$gateway")
    wait_http "http://127.0.0.1:$ADMIN/readyz"
    rm -f "$tmp/$id.done"
    scaler "$mode" "$id" &
    scaler_pid=$!
    pids+=("$scaler_pid")
    load "$id"
    touch "$tmp/$id.done"
    wait "$scaler_pid" || true
    kill "$gateway" "${sims[@]}"
    wait "$gateway" "${sims[@]}" 2>/dev/null || true
}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
    cargo build --release --quiet
    tmp=$(mktemp -d)
    for mode in $MODES; do
        echo "== $mode: $BASE -> $((3 * BASE)) requests/s (lead ${LEAD}s, ramps ${RAMP}s, hold ${HOLD}s, tail ${TAIL}s), cold start ${COLD}s" >&2
        run "$mode"
    done
    echo "raw results in $tmp" >&2
fi

[ -f "$OUT" ] || echo '{}' >"$OUT"
results='[]'
for mode in $MODES; do
    id=${mode/:/-}
    [ -f "$tmp/$id.scale" ] || continue
    # Replica-seconds: the replicas held (in the pool or starting) over each tick's interval.
    # Scale-up: the first tick after the ramp began that holds more than the lead did. Changes
    # while the load held: ticks in the hold whose held count differs from the tick before.
    scale=$(awk -v lead="$LEAD" -v ramp="$RAMP" -v hold="$HOLD" '
        { t[NR] = $1; n[NR] = $3 + $4 }
        END {
            for (i = 1; i < NR; i++) rs += n[i] * (t[i + 1] - t[i])
            for (i = 1; i <= NR; i++) if (t[i] < lead) base = n[i]
            up = "null"
            for (i = 1; i <= NR; i++) if (t[i] >= lead && n[i] > base) { up = t[i] - lead; break }
            for (i = 2; i <= NR; i++) if (t[i] >= lead + ramp && t[i] < lead + ramp + hold && n[i] != n[i - 1]) moves++
            most = 0; for (i = 1; i <= NR; i++) if (n[i] > most) most = n[i]
            printf "{\"replica_seconds\": %.0f, \"scale_up_after_s\": %s, \"changes_in_hold\": %d, \"most\": %d, \"seconds\": %.0f}\n",
                rs, up, moves, most, t[NR] }' "$tmp/$id.scale")
    met=0 requests=0 gap_met=0 errors=0
    for f in "$tmp/$id"-step-*.json "$tmp/$id-sessions.json"; do
        [ -f "$f" ] || continue
        read -r r m g e < <(jq -r '.points[0] as $p | (([$p.classes[] | select(.class == "all")] | first) // $p.classes[0]) as $a
            | "\($a.requests) \(($a.goodput_ttft_tpot * $p.wall_time_s) | round) \($a.slo_met) \($a.errors)"' "$f")
        requests=$((requests + r)) met=$((met + m)) gap_met=$((gap_met + g)) errors=$((errors + e))
    done
    # The SLOs met per minute of the profile, from its STEP-second steps (sessions aside).
    per_minute=$(for f in "$tmp/$id"-step-*.json; do
        k=${f##*-step-} k=${k%.json}
        jq -r --arg k "$k" '.points[0] as $p | (([$p.classes[] | select(.class == "all")] | first) // $p.classes[0]) as $a
            | "\($k) \($a.requests) \(($a.goodput_ttft_tpot * $p.wall_time_s) | round)"' "$f"
    done | awk -v step="$STEP" '{ m = int($1 * step / 60); r[m] += $2; g[m] += $3; if (m > last) last = m }
        END { printf "["; for (i = 0; i <= last; i++) printf "%s%.1f", (i ? "," : ""), (r[i] ? 100 * g[i] / r[i] : 0); print "]" }')
    echo "$mode: SLOs met per minute $per_minute" >&2
    results=$(jq --arg mode "$mode" --argjson scale "$scale" --argjson requests "$requests" \
        --argjson met "$met" --argjson gap "$gap_met" --argjson errors "$errors" --argjson acc "$results" \
        --argjson minutes "$per_minute" -n '
        $acc + [{mode: $mode, requests: $requests, errors: $errors,
                 slo_met_pct: (100 * $met / $requests), gap_slo_met_pct: (100 * $gap / $requests),
                 slo_met_pct_per_minute: $minutes} + $scale]')
done
part=$(jq -n --arg workload "$WORKLOAD" --argjson results "$results" \
    '{base: '"$BASE"', peak: '"$((3 * BASE))"', lead_s: '"$LEAD"', ramp_s: '"$RAMP"', hold_s: '"$HOLD"',
      tail_s: '"$TAIL"', step_s: '"$STEP"', cold_start_s: '"$COLD"', poll_s: '"$POLL"',
      cooldown_s: '"$COOLDOWN"', max_replicas: '"$MAX"', seed: '"$SEED"', workload: $workload,
      session_ratio: '"$SESSION_RATIO"', profile: "'"$PROFILE"'",
      slo: {ttft: "'"$SLO_TTFT"'", tpot: "'"$SLO_TPOT"'", max_gap: "'"$SLO_MAX_GAP"'"}, results: $results}')
jq --arg key "$PART" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
table=$(jq -r --arg key "$PART" '
  def r: if . == null then "-" else ((. * 10 | round) / 10 | tostring) end;
  .[$key] as $p
  | ([$p.results[] | select(.mode | startswith("peak")) | .replica_seconds] | first) as $peak
  | "| scaler | requests (errors) | SLOs met | SLOs met, gap counted | replica-seconds | of the peak-sized fleet'"'"'s | most replicas | scale-up after the ramp began | count changes while the load held |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ($p.results[] | "| \(.mode) | \(.requests) (\(.errors)) | \(.slo_met_pct | r) % | \(.gap_slo_met_pct | r) % | \(.replica_seconds) | \(if $peak then (100 * .replica_seconds / $peak | r) + " %" else "-" end) | \(.most) | \(if .scale_up_after_s == null then "-" else (.scale_up_after_s | r) + " s" end) | \(.changes_in_hold) |")' "$OUT")
echo "$table"
if grep -q "<!-- $MARK:begin -->" docs/autoscaling.md 2>/dev/null; then
    write_block "$MARK" "$table" docs/autoscaling.md
else
    echo "docs/autoscaling.md has no $MARK markers: the table is not written there" >&2
fi
