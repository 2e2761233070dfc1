#!/usr/bin/env bash
# Prefill-heavy replicas under a moving load (docs/routing.md, "Prefill-heavy replicas chosen by
# the load"): does the designation follow a burst of documents and a failed replica, and what does
# the load see meanwhile?
#
# The fleet of scripts/bench-slo.sh (four simulated Llama-3.1-8B/H100 replicas, 8101 and 8102 at
# full speed, 8103 and 8104 at half), behind one tokenmeter per set-up (SETUPS, default
# "gated-spread gated": the gateway-queued `balance = "slo"` pool with prefill_heavy = "off" and
# "auto"). Three phases of the mixed load (chats and documents, WORKLOAD, at RATE requests/s; no
# sessions, so each phase is one `tokenmeter bench` run that ends when its requests have):
#   A, BEFORE (15 s): the load alone;
#   B, BURST (20 s): the load, and a second bench sending documents alone at twice the load's
#      document rate (documents x3 for 20 s);
#   C, AFTER (25 s): the load alone; KILL_AFTER (10 s) into it a replica is killed: one that is
#      prefill-heavy then (the first /metrics lists; with no designation, 8101).
#      The pool checks its replicas' health every HEALTH_CHECK (500ms; "0s": off, the replica is
#      then ejected only once requests to it fail).
# Reported per set-up and phase: requests, errors, goodput (800 ms / 35 ms, vLLM's) and with the
# gap target counted (SLO_MAX_GAP, 250 ms); and from the proxy's log, every designation move with
# its time after the burst's start or the kill. Writes the `moving_seedN` part of
# docs/slo-routing-results.json and the table between the slo-moving markers of docs/routing.md.
#
# Usage: scripts/bench-designation.sh     (RATE, SEED, SETUPS, WORKLOAD, KILL_AFTER, HEALTH_CHECK
#                                          override)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

RATE=${RATE:-16}
SEED=${SEED:-1}
SETUPS=${SETUPS:-"gated-spread gated"}
DOC_SHARE=0.1
WORKLOAD=${WORKLOAD:-"chat:0.9:prompt=uniform:200-600:output=uniform:64-256,document:0.1:prompt=uniform:6000-10000:output=fixed:128"}
BURST_WORKLOAD="document:1:prompt=uniform:6000-10000:output=fixed:128"
KILL_AFTER=${KILL_AFTER:-10}
HEALTH_CHECK=${HEALTH_CHECK:-500ms}
SLO_TTFT=800ms SLO_TPOT=35ms SLO_MAX_GAP=${SLO_MAX_GAP:-250ms}
PROFILE=llama-3.1-8b-h100
PORTS=(8101 8102 8103 8104)
BIN=target/release/tokenmeter
OUT=docs/slo-routing-results.json
export TOKENMETER_LISTEN=127.0.0.1:${PROXY_PORT:-18000}
export TOKENMETER_ADMIN_LISTEN=127.0.0.1:${ADMIN_PORT:-19464}

cargo build --release --quiet
tmp=$(mktemp -d)

config() {
    printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$SLO_TTFT" "$SLO_TPOT" "$SLO_MAX_GAP"
    printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "slo"\naffinity = "prefix"\n' "$(urls "${PORTS[@]}")"
    printf 'health_check = "%s"\n' "$HEALTH_CHECK"
    [ "$1" = gated-spread ] && printf 'prefill_heavy = "off"\n'
    printf '\n[pools.queue]\ncapacity = 1024\non_deadline = "shed"\n'
}

# bench ID DURATION RATE WORKLOAD: one bench run written to ID.json.
bench() {
    "$BIN" bench --url "http://$TOKENMETER_LISTEN" --duration "$2" --seed "$SEED" --rate "$3" \
        --workload "$4" --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" \
        --json "$tmp/$1.json" >"$tmp/$1.txt" 2>&1
}

# The backend designated now (the first with tokenmeter_backend_prefill_heavy 1), else 8101.
designated() {
    local port
    port=$(curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" \
        | grep -E '^tokenmeter_backend_prefill_heavy\{.*\} 1$' | head -1 \
        | sed -E 's/.*backend="127\.0\.0\.1:([0-9]+)".*/\1/')
    echo "${port:-8101}"
}

for setup in $SETUPS; do
    declare -A sim=()
    for port in "${PORTS[@]}"; do
        scale=1.0
        [ "$port" -ge 8103 ] && scale=2.0
        "$BIN" sim --listen "127.0.0.1:$port" --profile "$PROFILE" --time-scale "$scale" \
            --enable-prompt-tokens-details >"$tmp/sim-$port-$setup.log" 2>&1 &
        sim[$port]=$!
        pids+=("$!")
    done
    for port in "${PORTS[@]}"; do wait_http "http://127.0.0.1:$port/health"; done
    config "$setup" >"$tmp/$setup.toml"
    "$BIN" serve --config "$tmp/$setup.toml" >"$tmp/serve-$setup.log" 2>&1 &
    serve=$!
    pids+=("$serve")
    wait_http "http://$TOKENMETER_ADMIN_LISTEN/readyz"
    burst_rate=$(awk -v r="$RATE" -v s="$DOC_SHARE" 'BEGIN { print 2 * r * s }')
    echo "== $setup: $RATE requests/s; documents x3 for 20 s; a replica killed $KILL_AFTER s after" >&2
    bench "$setup-before" 15s "$RATE" "$WORKLOAD"
    date -u +%s.%N >"$tmp/$setup-burst.at"
    bench "$setup-burst-extra" 20s "$burst_rate" "$BURST_WORKLOAD" &
    extra=$!
    bench "$setup-burst" 20s "$RATE" "$WORKLOAD"
    wait "$extra"
    # The victim is chosen at the kill: one designated when the burst ended may have been let go.
    (
        sleep "$KILL_AFTER"
        victim=$(designated)
        kill "${sim[$victim]}"
        date -u +%s.%N >"$tmp/$setup-kill.at"
        echo "$victim" >"$tmp/$setup-kill.port"
    ) &
    killer=$!
    bench "$setup-after" 25s "$RATE" "$WORKLOAD"
    wait "$killer"
    curl -s "http://$TOKENMETER_ADMIN_LISTEN/metrics" >"$tmp/$setup.prom"
    kill "$serve" "${sim[@]}" 2>/dev/null || true
    wait "$serve" "${sim[@]}" 2>/dev/null || true
    unset sim
done
echo "raw results in $tmp" >&2

part=$(python3 - "$tmp" "$SETUPS" "$RATE" "$SEED" "$KILL_AFTER" "$HEALTH_CHECK" <<'PY'
import json, re, sys, datetime
tmp, setups, rate, seed, kill_after, health_check = sys.argv[1:7]
def at(path):
    return float(open(path).read())
def stamp(line):
    t = re.match(r"(\S+Z)", line).group(1)
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
results = []
for setup in setups.split():
    burst, kill = at(f"{tmp}/{setup}-burst.at"), at(f"{tmp}/{setup}-kill.at")
    killed = open(f"{tmp}/{setup}-kill.port").read().strip()
    phases = []
    for phase in ["before", "burst", "burst-extra", "after"]:
        r = json.load(open(f"{tmp}/{setup}-{phase}.json"))
        a = next(c for c in r["points"][0]["classes"] if c["class"] == "all")
        phases.append({"phase": phase, "requests": a["requests"], "errors": a["errors"],
                       "goodput_rps": a.get("goodput_ttft_tpot") or a["goodput"],
                       "gap_goodput_rps": a["goodput"] if a.get("goodput_ttft_tpot") is not None else None,
                       "wall_time_s": r["points"][0]["wall_time_s"]})
    moves = []
    for line in open(f"{tmp}/serve-{setup}.log"):
        if "prefill-heavy replicas changed" not in line:
            continue
        t = stamp(line)
        backend = re.search(r'backend="([^"]+)"', line).group(1)
        heavy = "prefill_heavy=true" in line
        moves.append({"backend": backend, "heavy": heavy,
                      "after_burst_s": round(t - burst, 2), "after_kill_s": round(t - kill, 2)})
    results.append({"setup": setup, "killed": f"127.0.0.1:{killed}", "phases": phases, "moves": moves})
print(json.dumps({"rate": float(rate), "seed": int(seed), "kill_after_s": int(kill_after),
                  "health_check": health_check, "results": results}))
PY
)
key=moving
[ "$SEED" != 1 ] && key=moving_seed$SEED
[ -f "$OUT" ] || echo '{}' >"$OUT"
jq --arg key "$key" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
table=$(jq -r --arg key "$key" '
  def r: if . == null then "-" else (. * 10 | round) / 10 end;
  "| set-up | phase | requests (errors) | goodput (req/s) | goodput, gap counted (req/s) |",
  "|---|---|---:|---:|---:|",
  (.[$key].results[] | .setup as $s | .phases[] |
    "| \($s) | \(.phase) | \(.requests) (\(.errors)) | \(.goodput_rps | r) | \(.gap_goodput_rps | r) |"),
  "",
  "| set-up | replica killed | designation moves (backend in/out, seconds after the burst began; after the kill) |",
  "|---|---|---|",
  (.[$key].results[] | "| \(.setup) | \(.killed) | \(if (.moves | length) == 0 then "-" else (.moves | map("\(.backend) \(if .heavy then "in" else "out" end) \(.after_burst_s) s; \(.after_kill_s) s") | join("<br>")) end) |")
' "$OUT")
echo "$table"
grep -q "<!-- slo-moving:begin -->" docs/routing.md || echo "docs/routing.md has no slo-moving markers: the table is not written there" >&2
write_block slo-moving "$table"
