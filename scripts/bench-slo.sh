#!/usr/bin/env bash
# Latency-predicting placement (`balance = "slo"`) against load-only, length and prefix routing, on
# a fleet of two speeds (docs/routing.md, "Latency-predicting placement (balance = \"slo\")").
#
# Four simulated Llama-3.1-8B/H100 replicas (`tokenmeter sim --profile llama-3.1-8b-h100
# --enable-prompt-tokens-details`: vLLM's default budget of 8192 tokens per step, prefix caching on
# as in vLLM, cached tokens reported): 8101 and 8102 at full speed, 8103 and 8104 at half speed
# (`--time-scale 2.0`). At each rate R of RATES, one mixed `tokenmeter bench` run (one process, so
# one report with a row per class): chats and documents arriving open loop (Poisson, WORKLOAD) at
# R per second, and multi-turn sessions arriving at R x SESSION_RATIO per second (the session
# share scales with the load, so every rate is the same mix): each session picks one of
# SYSTEM_PROMPTS shared system prompts and runs TURNS turns that resend the whole conversation.
# Sessions start for DURATION; the requests keep arriving until the last session has ended (so no
# turn runs in an emptying fleet: a run lasts DURATION plus the sessions' tail, 40-80 s at the
# default rates with p2c, more for a set-up that falls behind). Each
# set-up through tokenmeter (so proxy overhead is identical), same seed:
#   p2c:    one pool of the four, power of two choices on streams in flight (balance = "streams");
#   length: prompts of >= 2048 estimated tokens to a prefill pool (8101, balance = "prompt_tokens"),
#           the rest to a decode pool (8102-8104, streams), as bench-length.sh's 1p3d but with vLLM's
#           default budget on every replica (the fleet is the same in every set-up);
#   prefix: one pool of the four, affinity = "prefix" (config/examples/affinity.toml's bound);
#   slo:    one pool of the four, balance = "slo" with affinity = "prefix", [slo] ttft = "800ms",
#           tpot = "35ms": each request to the replica predicted to meet both targets;
#   slo-spread, gated-spread: slo and gated with prefill_heavy = "off" (no designation: every
#           replica takes every prompt, a long one where it stalls the fewest streams; the
#           policies before #39);
#   gated:  slo with a gateway queue ([pools.queue], on_deadline = "shed"): a request no replica
#           is predicted to serve in time waits for one, or is shed (429) once it cannot be;
#   shares: gated with equal_shares = true (a tenant past an equal part of the work in flight
#           goes only to a replica close to idle; for the flood experiment).
# Goodput counts requests with TTFT <= 800 ms and TPOT <= 35 ms (bench's --slo-ttft/--slo-tpot,
# vLLM's definition); "with the gap" counts only those whose largest gap between tokens is also
# within SLO_MAX_GAP (250 ms; bench's --slo-max-gap, the proxy's [slo] max_gap), the stall a mean
# TPOT hides (docs/metering.md).
# After each run the proxy's /metrics is kept (RUN.prom): route decisions, requests per replica,
# and for `slo` tokenmeter_slo_decisions_total and the median of
# tokenmeter_prediction_error_ratio{kind="ttft"} (predicted / measured, interpolated in the
# cumulative buckets as histogram_quantile does). Writes the `mixed` part of
# docs/slo-routing-results.json and the table between the slo-sim markers of docs/routing.md; with
# SEED=N other than 1, the `mixed_seedN` part and the slo-sim-seedN markers (SEED=N with --summarize
# too); so for the flood experiment (`flood_seedN`, slo-flood-seedN).
#
# EXPERIMENT=flood: tenant fairness on the same fleet. Four tenants (a, b, c, d; header x-tenant-id,
# [tenants] sources = ["header"]) at equal shares of FLOOD_RATE, each a class of its own with a
# long-tailed prompt (TENANT_PROMPT, TENANT_OUTPUT) and no sessions: a run without flood, then a run
# where tenant a sends 5x its share on top (FLOOD_FACTOR; the total rate is then
# FLOOD_RATE x (1 + 5/4), a's weight 6 to the others' 1). Reports every tenant's TTFT p50/p99 in
# both runs and the change of the p99. Set-ups: SETUPS (default `slo`; `p2c gated shares` as in
# docs/routing.md).
# Writes the `flood` part of docs/slo-routing-results.json and the slo-flood table.
#
# Usage: scripts/bench-slo.sh        (RATES, SESSION_RATIO (0: no sessions), DURATION, SEED, SETUPS, WORKLOAD, NAME, SIM_ARGS, ... override)
#        EXPERIMENT=flood scripts/bench-slo.sh        (FLOOD_RATE, FLOOD_FACTOR, SETUPS override)
#        [EXPERIMENT=flood] scripts/bench-slo.sh --summarize DIR   (rebuild the outputs from DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

EXPERIMENT=${EXPERIMENT:-mixed}
DURATION=${DURATION:-90s}
SEED=${SEED:-1}
# p2c's goodput on this fleet peaks at about 24-28 requests/s (+ 1.2-1.4 sessions/s; 20 s runs:
# 16 -> 16.6 req/s of goodput, 96 % of SLOs met; 24 -> 22.0, 87 %; 28 -> 21.2, 74 %; 32 -> 19.9,
# 61 %; 36 -> 14.1, 38 %; 44 -> 1.0, 2 %, its queues no longer drain). Take 28 as the capacity:
# the rates run from a little over half of it to just past it, the flood's base is 3/4 of it.
RATES=${RATES:-"16 24 32"}
SESSION_RATIO=${SESSION_RATIO:-0.05}
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
SYSTEM_PROMPTS=${SYSTEM_PROMPTS:-4}
SYSTEM_TOKENS=${SYSTEM_TOKENS:-uniform:1500-2500}
TURNS=${TURNS:-uniform:4-8}
USER_TOKENS=${USER_TOKENS:-uniform:200-500}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-uniform:100-200}
THINK_TIME=${THINK_TIME:-3s}
FLOOD_RATE=${FLOOD_RATE:-21}
FLOOD_FACTOR=${FLOOD_FACTOR:-5}
TENANT_PROMPT=${TENANT_PROMPT:-lognormal:400,1.2,10000}
TENANT_OUTPUT=${TENANT_OUTPUT:-uniform:64-256}
TENANTS=(a b c d)
# SIM_ARGS: more `tokenmeter sim` flags for every replica (e.g. --max-num-batched-tokens 2048).
SIM_ARGS=${SIM_ARGS:-}
SLO_TTFT=800ms SLO_TPOT=35ms SLO_MAX_GAP=${SLO_MAX_GAP:-250ms}
if [ "$EXPERIMENT" = flood ]; then
    SETUPS=${SETUPS:-"slo"}
    MARK=slo-flood
    PART=flood
    if [ "$SEED" != 1 ]; then
        MARK=slo-flood-seed$SEED
        PART=flood_seed$SEED
    fi
else
    SETUPS=${SETUPS:-"p2c length prefix slo gated"}
    MARK=slo-sim
    # Seed 1 is the part docs/routing.md discusses; another seed keeps a part and a table of its own.
    PART=mixed
    if [ "$SEED" != 1 ]; then
        MARK=slo-sim-seed$SEED
        PART=mixed_seed$SEED
    fi
fi
# NAME=x keeps a run apart: the `<PART>_x` part of the JSON and the `<MARK>-x` markers (a run of
# some set-ups that should not replace the table of all of them).
if [ -n "${NAME:-}" ]; then
    MARK=$MARK-$NAME
    PART=${PART}_$NAME
fi
OUT=docs/slo-routing-results.json
PROFILE=llama-3.1-8b-h100
PORTS=(8101 8102 8103 8104)
BIN=target/release/tokenmeter
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

# tenant_workload FLOOD: the flood experiment's classes, one per tenant carrying its header; with
# FLOOD = 1 tenant a's weight is 1 + FLOOD_FACTOR.
tenant_workload() {
    local t weight out=""
    for t in "${TENANTS[@]}"; do
        weight=1
        [ "$1" = 1 ] && [ "$t" = a ] && weight=$((1 + FLOOD_FACTOR))
        out="$out$t:$weight:prompt=$TENANT_PROMPT:output=$TENANT_OUTPUT:header=x-tenant-id=$t;"
    done
    echo "${out%;}"
}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
cargo build --release --quiet
tmp=$(mktemp -d)

# config SETUP: the proxy config of a set-up (the flood experiment adds the tenants).
config() {
    case $1 in
    p2c) printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "streams"\n' "$(urls "${PORTS[@]}")" ;;
    length)
        printf '[[pools]]\nname = "prefill"\nurls = %s\nbalance = "prompt_tokens"\n\n' "$(urls 8101)"
        printf '[[pools]]\nname = "decode"\nurls = %s\nbalance = "streams"\n\n' "$(urls 8102 8103 8104)"
        printf '[[rules]]\npool = "prefill"\nmin_prompt_tokens = 2048\nfallback = "decode"\n\n[[rules]]\npool = "decode"\n'
        ;;
    prefix)
        printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "streams"\naffinity = "prefix"\n' "$(urls "${PORTS[@]}")"
        printf 'affinity_load_factor = 1.5\naffinity_load_slack = 4\n'
        ;;
    slo | slo-spread)
        printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$SLO_TTFT" "$SLO_TPOT" "$SLO_MAX_GAP"
        printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "slo"\naffinity = "prefix"\n' "$(urls "${PORTS[@]}")"
        printf 'affinity_load_factor = 1.5\naffinity_load_slack = 4\n'
        [ "$1" = slo-spread ] && printf 'prefill_heavy = "off"\n'
        ;;
    gated | gated-spread)
        config "${1/gated/slo}"
        printf '\n[pools.queue]\ncapacity = 1024\non_deadline = "shed"\n'
        return
        ;;
    shares)
        config gated
        printf 'equal_shares = true\n'
        return
        ;;
    *) echo "unknown set-up $1 (p2c, length, prefix, slo, slo-spread, gated, gated-spread, shares)" >&2; exit 1 ;;
    esac
    if [ "$EXPERIMENT" = flood ]; then
        printf '\n[tenants]\nsources = ["header"]\nheader = "x-tenant-id"\ntracked = [%s]\n' \
            "$(printf '"%s", ' "${TENANTS[@]}" | sed 's/, $//')"
    fi
}

# run SETUP RUN [BENCH ARGS...]: the fleet, the proxy, one bench run written to RUN.json, the
# proxy's metrics to RUN.prom.
run() {
    local name=$1 id=$2 sims=()
    shift 2
    # shellcheck disable=SC2086 # SIM_ARGS splits into flags
    start_sims "$id" $SIM_ARGS
    config "$name" >"$tmp/$name.toml"
    "$BIN" serve --config "$tmp/$name.toml" >"$tmp/serve-$id.log" 2>&1 &
    local serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz"
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --duration "$DURATION" --seed "$SEED" \
        --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" --json "$tmp/$id.json" "$@" >&2
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$id.prom"
    grep -E '^tokenmeter_(route_decisions_total|slo_decisions_total)' "$tmp/$id.prom" >&2 || true
    kill "$serve" "${sims[@]}"
    wait "$serve" "${sims[@]}" 2>/dev/null || true
}

if [ "$EXPERIMENT" = flood ]; then
    for setup in $SETUPS; do
        for flood in 0 1; do
            rate=$FLOOD_RATE
            [ "$flood" = 1 ] && rate=$(awk -v r="$FLOOD_RATE" -v f="$FLOOD_FACTOR" 'BEGIN { print r * (1 + f / 4) }')
            echo "== $setup: tenants at $rate/s (flood $flood) for $DURATION" >&2
            run "$setup" "flood-$setup-$flood" --rate "$rate" --workload "$(tenant_workload "$flood")"
        done
    done
else
    for rate in $RATES; do
        session_rate=$(awk -v r="$rate" -v s="$SESSION_RATIO" 'BEGIN { print r * s }')
        # SESSION_RATIO=0: the other mix, chats and documents alone (bench takes no session flag
        # without a session rate).
        sessions=()
        if awk -v s="$session_rate" 'BEGIN { exit !(s > 0) }'; then
            sessions=(--session-rate "$session_rate" --system-prompts "$SYSTEM_PROMPTS"
                --system-tokens "$SYSTEM_TOKENS" --turns "$TURNS" --user-tokens "$USER_TOKENS"
                --output-tokens "$OUTPUT_TOKENS" --think-time "$THINK_TIME")
        fi
        for setup in $SETUPS; do
            echo "== $setup: $rate requests/s + $session_rate sessions/s for $DURATION" >&2
            run "$setup" "$setup-$rate" --rate "$rate" --workload "$WORKLOAD" "${sessions[@]}"
        done
    done
fi
echo "raw results in $tmp" >&2
fi

# prom_labelled FILE METRIC LABEL...: {"v1 v2": n} of the samples of METRIC, keyed by the values of
# the given labels (in that order), summed over the others.
prom_labelled() {
    local file=$1 metric=$2
    shift 2
    { grep "^$metric{" "$file" || true; } | awk -v labels="$*" '
        { n = split(labels, want, " "); key = ""
          for (i = 1; i <= n; i++) {
              v = ""
              if (match($0, "[{,]" want[i] "=\"[^\"]*\"")) {
                  v = substr($0, RSTART + length(want[i]) + 3, RLENGTH - length(want[i]) - 4)
              }
              key = key (i > 1 ? " " : "") v
          }
          sum[key] += $NF }
        END { printf "{"; sep = ""
              for (k in sum) { printf "%s\"%s\": %s", sep, k, sum[k]; sep = ", " }
              print "}" }' | jq -S .
}



# metrics_of RUN: what the proxy counted in a run, as JSON.
metrics_of() {
    local prom="$tmp/$1.prom" per_backend='[]' uncached='[]' port
    # sum_of METRIC FILTER: the sum of METRIC's samples on this port matching FILTER.
    sum_of() {
        { grep -E "^$1\\{.*backend=\"127.0.0.1:$port\"" "$prom" | grep -E "$2" || true; } \
            | awk '{ s += $NF } END { printf "%.0f", s + 0 }'
    }
    for port in "${PORTS[@]}"; do
        local n input hits
        n=$(sum_of tokenmeter_requests_total .)
        input=$(sum_of tokenmeter_tokens_total 'gen_ai_token_type="input"')
        hits=$(sum_of tokenmeter_prompt_cache_tokens_total 'result="hit"')
        per_backend=$(jq --argjson n "$n" '. + [$n]' <<<"$per_backend")
        # The mean prompt tokens each request made the replica compute (what its cache did not
        # hold): says which replicas took the documents.
        uncached=$(jq --argjson n "$n" --argjson i "$input" --argjson h "$hits" \
            '. + [if $n > 0 then (($i - $h) / $n | round) else null end]' <<<"$uncached")
    done
    jq -n --argjson route "$(prom_labelled "$prom" tokenmeter_route_decisions_total pool reason)" \
        --argjson slo "$(prom_labelled "$prom" tokenmeter_slo_decisions_total decision)" \
        --argjson queue "$(prom_labelled "$prom" tokenmeter_queue_exits_total exit)" \
        --argjson ttft "$(prom_median "$prom" tokenmeter_prediction_error_ratio 'kind="ttft"')" \
        --argjson tpot "$(prom_median "$prom" tokenmeter_prediction_error_ratio 'kind="tpot"')" \
        --argjson ttft_abs "$(prom_abs_error "$prom" tokenmeter_prediction_error_ratio 'kind="ttft"')" \
        --argjson tpot_abs "$(prom_abs_error "$prom" tokenmeter_prediction_error_ratio 'kind="tpot"')" \
        --argjson gap "$(prom_median "$prom" tokenmeter_prediction_error_ratio 'kind="gap"')" \
        --argjson gap_abs "$(prom_abs_error "$prom" tokenmeter_prediction_error_ratio 'kind="gap"')" \
        --argjson moves "$(prom_labelled "$prom" tokenmeter_prefill_heavy_moves_total move)" \
        --argjson per_backend "$per_backend" --argjson uncached "$uncached" \
        '{requests_per_backend: $per_backend, uncached_prompt_per_request: $uncached, route_decisions: $route, slo_decisions: $slo, queue_exits: $queue,
          prediction_error_ttft_p50: $ttft, prediction_error_tpot_p50: $tpot,
          prediction_abs_error_ttft_p50: $ttft_abs, prediction_abs_error_tpot_p50: $tpot_abs,
          prediction_error_gap_p50: $gap, prediction_abs_error_gap_p50: $gap_abs, prefill_heavy_moves: $moves}'
}

[ -f "$OUT" ] || echo '{}' >"$OUT"
if [ "$EXPERIMENT" = flood ]; then
    results='[]'
    for setup in $SETUPS; do
        for flood in 0 1; do
            f="$tmp/flood-$setup-$flood.json"
            [ -f "$f" ] || continue
            results=$(jq --arg setup "$setup" --argjson flood "$flood" --argjson m "$(metrics_of "flood-$setup-$flood")" \
                --slurpfile r "$f" '
                def ms: . * 1000;
                . + [{setup: $setup, flood: ($flood == 1), rate: $r[0].points[0].mode.rate,
                      workload: $r[0].workload} + $m + {tenants: [$r[0].points[0].classes[] |
                      {tenant: .class, requests, errors, ttft_p50_ms: (.ttft.p50 | ms),
                       ttft_p99_ms: (.ttft.p99 | ms), tpot_p99_ms: (.tpot.p99 | ms),
                       slo_met_pct: (if .requests > 0 then 100 * .slo_met / .requests else null end)}]}]' <<<"$results")
        done
    done
    part=$(jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg rate "$FLOOD_RATE" --arg factor "$FLOOD_FACTOR" \
        --argjson results "$results" \
        '{duration: $duration, seed: ($seed | tonumber), base_rate: ($rate | tonumber),
          flood_factor: ($factor | tonumber), profile: "'"$PROFILE"'",
          replicas: "8101, 8102 full speed; 8103, 8104 half speed", results: $results}')
    jq --arg key "$PART" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
    table=$(jq -r --arg key "$PART" '
      def r: (. * 10 | round) / 10;
      def change($a; $b): if $a > 0 then ((($b / $a - 1) * 100 | round | tostring) + " %") else "-" end;
      .[$key] as $f |
      "| set-up | tenant | requests: base / flood | TTFT p50 (ms): base / flood | TTFT p99 (ms): base / flood | TTFT p99 change | SLOs met: base / flood |",
      "|---|---|---:|---:|---:|---:|---:|",
      ($f.results | group_by(.setup)[] | (map(select(.flood | not))[0]) as $base | (map(select(.flood))[0]) as $flood |
        select($base != null and $flood != null) |
        ($base.tenants | map(select(.tenant != "all")))[] as $t |
        ($flood.tenants[] | select(.tenant == $t.tenant)) as $u |
        "| \($base.setup) | \($t.tenant)\(if $t.tenant == "a" then " (floods)" else "" end) | \($t.requests) / \($u.requests) | \($t.ttft_p50_ms | r) / \($u.ttft_p50_ms | r) | \($t.ttft_p99_ms | r) / \($u.ttft_p99_ms | r) | \(change($t.ttft_p99_ms; $u.ttft_p99_ms)) | \($t.slo_met_pct | r) % / \($u.slo_met_pct | r) % |")
    ' "$OUT")
else
    results='[]'
    for rate in $RATES; do
        for setup in $SETUPS; do
            f="$tmp/$setup-$rate.json"
            [ -f "$f" ] || continue
            # goodput_ttft_tpot is vLLM's goodput where bench judged a gap target (goodput then
            # counts the gap too); in a run without one, goodput is vLLM's.
            results=$(jq --arg setup "$setup" --argjson rate "$rate" --argjson m "$(metrics_of "$setup-$rate")" \
                --slurpfile r "$f" '
                def ms: . * 1000;
                def c($n): $r[0].points[0].classes[] | select(.class == $n);
                . + [{setup: $setup, rate: $rate, session_rate: ($r[0].points[0].mode.session_rate // 0),
                      requests: c("all").requests, errors: c("all").errors,
                      chat_itl_p50_ms: (c("chat").itl.p50 | ms), chat_itl_p99_ms: (c("chat").itl.p99 | ms),
                      chat_itl_max_ms: (c("chat").itl.max | ms),
                      chat_ttft_p50_ms: (c("chat").ttft.p50 | ms), chat_ttft_p99_ms: (c("chat").ttft.p99 | ms),
                      document_ttft_p50_ms: (c("document").ttft.p50 | ms),
                      document_ttft_p99_ms: (c("document").ttft.p99 | ms),
                      session_ttft_p50_ms: ([c("session").ttft.p50 | ms] | first),
                      session_ttft_p99_ms: ([c("session").ttft.p99 | ms] | first),
                      chat_max_gap_p99_ms: (c("chat").max_gap.p99 // null | if . == null then null else ms end),
                      slo_met_pct: (100 * (if c("all").goodput_ttft_tpot == null then c("all").slo_met
                                   else (c("all").goodput_ttft_tpot * $r[0].points[0].wall_time_s | round) end)
                                   / c("all").requests),
                      gap_slo_met_pct: (if c("all").goodput_ttft_tpot == null then null
                                        else 100 * c("all").slo_met / c("all").requests end),
                      goodput_rps: (c("all").goodput_ttft_tpot // c("all").goodput),
                      gap_goodput_rps: (if c("all").goodput_ttft_tpot == null then null else c("all").goodput end),
                      wall_time_s: $r[0].points[0].wall_time_s,
                      sessions: $r[0].sessions.started,
                      cached_ratio_client: $r[0].sessions.cached_ratio} + $m]' <<<"$results")
        done
    done
    part=$(jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg workload "$WORKLOAD" --arg ratio "$SESSION_RATIO" \
        --arg sessions "system_prompts=$SYSTEM_PROMPTS system_tokens=$SYSTEM_TOKENS turns=$TURNS user_tokens=$USER_TOKENS output_tokens=$OUTPUT_TOKENS think_time=$THINK_TIME" \
        --arg sim_args "$SIM_ARGS" --argjson results "$results" \
        '{duration: $duration, seed: ($seed | tonumber), workload: $workload,
          session_ratio: ($ratio | tonumber), sessions: $sessions, profile: "'"$PROFILE"'",
          sim_args: $sim_args,
          replicas: "8101, 8102 full speed; 8103, 8104 half speed", slo: {ttft: "'"$SLO_TTFT"'", tpot: "'"$SLO_TPOT"'", max_gap: "'"$SLO_MAX_GAP"'"},
          results: ($results | sort_by(.rate, ({"p2c": 0, "length": 1, "prefix": 2, "slo-spread": 3, "slo": 4, "gated-spread": 5, "gated": 6}[.setup] // 9)))}')
    jq --arg key "$PART" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
    table=$(jq -r --arg key "$PART" '
      def r: if . == null then "-" else (. * 10 | round) / 10 end;
      def spread: (add) as $t | if $t > 0 then map(. / $t * 100 | round | tostring + " %") | join(" / ") else "-" end;
      def counts: to_entries | map("\(.key) \(.value)") | join(", ") | if . == "" then "-" else . end;
      "| rate (req/s + sessions/s) | set-up | requests (errors) | chat ITL p50 / p99 / max (ms) | chat TTFT p50 / p99 (ms) | document TTFT p50 / p99 (ms) | session TTFT p99 (ms) | SLOs met | goodput (req/s) | SLOs met, gap counted | goodput, gap counted (req/s) | chat largest gap p99 (ms) | requests per replica (fast, fast, slow, slow) | prompt tokens computed per request, per replica | route decisions | slo decisions | queue exits | TTFT predicted / measured, p50 | TTFT prediction, median absolute error |",
      "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---:|---:|",
      (.[$key].results[] | "| \(.rate) + \(.session_rate) | \(.setup) | \(.requests) (\(.errors)) | \(.chat_itl_p50_ms | r) / \(.chat_itl_p99_ms | r) / \(.chat_itl_max_ms | r) | \(.chat_ttft_p50_ms | r) / \(.chat_ttft_p99_ms | r) | \(.document_ttft_p50_ms | r) / \(.document_ttft_p99_ms | r) | \(.session_ttft_p99_ms | r) | \(.slo_met_pct | r) % | \(.goodput_rps | r) | \(.gap_slo_met_pct | r)\(if .gap_slo_met_pct == null then "" else " %" end) | \(.gap_goodput_rps | r) | \(.chat_max_gap_p99_ms | r) | \(.requests_per_backend | spread) | \(.uncached_prompt_per_request // [] | map(if . == null then "-" else tostring end) | join(" / ")) | \(.route_decisions | counts) | \(.slo_decisions | counts) | \(.queue_exits | counts) | \(.prediction_error_ttft_p50 // "-") | \(.prediction_abs_error_ttft_p50 | if . == null then "-" else "\(. * 100 | round) %" end) |")
    ' "$OUT")
fi
echo "$table"
grep -q "<!-- $MARK:begin -->" docs/routing.md || echo "docs/routing.md has no $MARK markers: the table is not written there" >&2
write_block "$MARK" "$table"
