#!/usr/bin/env bash
# Tenants' shares across gateway replicas (#40 item 3, docs/deploying.md "Several gateway
# replicas"): the flood experiment of scripts/bench-slo.sh (four tenants a, b, c, d, header
# x-tenant-id, each at FLOOD_RATE / 4, tenant a at FLOOD_FACTOR + 1 times that) on its simulated
# fleet (8101, 8102 full speed; 8103, 8104 half speed), through gated placement with equal shares,
# where the quiet tenants reach one gateway and the flood reaches every one (a tenant's clients
# behind one egress, a flood spread over connections). Variants (VARIANTS):
#   one:   one gateway, every client to it;
#   apart: two gateways, no fleet: the flood's half through gateway 1, everything else through 0;
#   fleet: the same two sharing a fleet (Redis): load, designation, tenants' shares and service.
# One bench process per tenant and gateway (the flood's split in two, each at half its rate).
# Per client: requests, errors (429s of the queue among them), TTFT p50 / p99, SLOs met. Writes the part PART (default `tenants`;
# NAME=x: `tenants_x`) of docs/fleet-results.json and the table between the fleet-tenants
# markers (fleet-tenants-x) of docs/deploying.md. BIN=path runs another build (e.g. an earlier
# commit's, to compare).
#
# Usage: scripts/bench-fleet-tenants.sh   (VARIANTS, FLOOD_RATE, FLOOD_FACTOR, DURATION, SEED,
#                                          NAME, BIN override)
#        scripts/bench-fleet-tenants.sh --summarize DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

VARIANTS=${VARIANTS:-"one apart fleet"}
FLOOD_RATE=${FLOOD_RATE:-21}
FLOOD_FACTOR=${FLOOD_FACTOR:-5}
DURATION=${DURATION:-45s}
SEED=${SEED:-1}
TENANT_PROMPT=lognormal:400,1.2,10000
TENANT_OUTPUT=uniform:64-256
SLO_TTFT=800ms SLO_TPOT=35ms SLO_MAX_GAP=250ms
PROFILE=llama-3.1-8b-h100
PORTS=(8101 8102 8103 8104)
BIN=${BIN:-target/release/tokenmeter}
OUT=docs/fleet-results.json
PART=tenants
MARK=fleet-tenants
if [ -n "${NAME:-}" ]; then
    PART=${PART}_$NAME
    MARK=$MARK-$NAME
fi
REDIS_PORT=16390

# config VARIANT GATEWAY: gateway GATEWAY's config (traffic on 18100 + g, admin on 19100 + g).
config() {
    printf '[server]\nlisten = "127.0.0.1:%d"\nadmin_listen = "127.0.0.1:%d"\n\n' $((18100 + $2)) $((19100 + $2))
    printf '[slo]\nttft = "%s"\ntpot = "%s"\nmax_gap = "%s"\n\n' "$SLO_TTFT" "$SLO_TPOT" "$SLO_MAX_GAP"
    if [ "$1" = fleet ]; then
        printf '[fleet]\nstore = "redis://127.0.0.1:%d"\nreplica = "gw-%d"\n\n' "$REDIS_PORT" "$2"
    fi
    printf '[tenants]\nsources = ["header"]\nheader = "x-tenant-id"\ntracked = ["a", "b", "c", "d"]\n\n'
    printf '[[pools]]\nname = "replicas"\nurls = %s\nbalance = "slo"\naffinity = "prefix"\n' "$(urls "${PORTS[@]}")"
    printf 'affinity_load_factor = 1.5\naffinity_load_slack = 4\n'
    printf '\n[pools.queue]\ncapacity = 1024\non_deadline = "shed"\nequal_shares = true\n'
}

# client NAME TENANT GATEWAY RATE SEED: one bench process, its report in $tmp/$id-NAME.json.
client() {
    "$BIN" bench --url "http://127.0.0.1:$((18100 + $3))" --duration "$DURATION" --seed "$5" \
        --slo-ttft "$SLO_TTFT" --slo-tpot "$SLO_TPOT" --slo-max-gap "$SLO_MAX_GAP" --rate "$4" \
        --workload "$2:1:prompt=$TENANT_PROMPT:output=$TENANT_OUTPUT:header=x-tenant-id=$2" \
        --json "$tmp/$id-$1.json" >"$tmp/bench-$id-$1.log" 2>&1 &
    clients+=("$!")
}

# run VARIANT
run() {
    local variant=$1 id=$1 n=2 sims=() gateways=() clients=() g quiet flood
    [ "$variant" = one ] && n=1
    start_sims "$id"
    if [ "$variant" = fleet ]; then
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
            >"$tmp/redis-$id.log" 2>&1 &
        sims+=("$!")
        pids+=("$!")
    fi
    for g in $(seq 0 $((n - 1))); do
        config "$variant" "$g" >"$tmp/$id-g$g.toml"
        "$BIN" serve --config "$tmp/$id-g$g.toml" >"$tmp/serve-$id-g$g.log" 2>&1 &
        gateways+=("$!")
        pids+=("$!")
    done
    for g in $(seq 0 $((n - 1))); do wait_http "http://127.0.0.1:$((19100 + g))/readyz"; done
    quiet=$(awk -v r="$FLOOD_RATE" 'BEGIN { print r / 4 }')
    flood=$(awk -v r="$FLOOD_RATE" -v f="$FLOOD_FACTOR" 'BEGIN { print r / 4 * (1 + f) / 2 }')
    echo "== $variant: $n gateway(s); b, c, d at $quiet/s each through gateway 0, a at 2 x $flood/s, for $DURATION" >&2
    client a0 a 0 "$flood" $((SEED * 100))
    client a1 a $((n - 1)) "$flood" $((SEED * 100 + 1))
    client b b 0 "$quiet" $((SEED * 100 + 2))
    client c c 0 "$quiet" $((SEED * 100 + 3))
    client d d 0 "$quiet" $((SEED * 100 + 4))
    for pid in "${clients[@]}"; do wait "$pid"; done
    kill "${gateways[@]}" "${sims[@]}"
    wait "${gateways[@]}" "${sims[@]}" 2>/dev/null || true
}

if [ "${1:-}" = "--summarize" ]; then
    tmp=$2
else
    [ "$BIN" != target/release/tokenmeter ] || cargo build --release --quiet
    tmp=$(mktemp -d)
    for variant in $VARIANTS; do run "$variant"; done
    echo "raw results in $tmp" >&2
fi

[ -f "$OUT" ] || echo '{}' >"$OUT"
results='[]'
for variant in one apart fleet; do
    [ -f "$tmp/$variant-b.json" ] || continue
    for who in a0 a1 b c d; do
        results=$(jq --arg variant "$variant" --arg who "$who" '
            def c: .points[0].classes[] | select(.class == "all");
            def ms: . * 1000 | round;
            {variant: $variant, client: $who, requests: (c.requests), errors: (c.errors),
             ttft_p50_ms: (c.ttft.p50 | ms), ttft_p99_ms: (c.ttft.p99 | ms),
             slo_met_pct: (100 * c.slo_met / c.requests)}' "$tmp/$variant-$who.json" \
            | jq -s --argjson acc "$results" '$acc + .')
    done
done
part=$(jq -n --arg duration "$DURATION" --arg seed "$SEED" --arg rate "$FLOOD_RATE" --arg factor "$FLOOD_FACTOR" \
    --argjson results "$results" \
    '{duration: $duration, seed: ($seed | tonumber), flood_rate: ($rate | tonumber), flood_factor: ($factor | tonumber),
      profile: "'"$PROFILE"'", replicas: "8101, 8102 full speed; 8103, 8104 half speed",
      set_up: "balance = slo, prefix affinity, [pools.queue] on_deadline = shed, equal_shares = true",
      clients: "a0, a1: tenant a (the flood) through gateway 0 and the last gateway, each at half its rate; b, c, d through gateway 0",
      results: $results}')
jq --arg key "$PART" --argjson part "$part" '.[$key] = $part' "$OUT" >"$OUT.new" && mv "$OUT.new" "$OUT"
table=$(jq -r --arg key "$PART" '
  def r: (. * 10 | round) / 10;
  "| gateways | client | requests (errors) | TTFT p50 / p99 (ms) | SLOs met |",
  "|---|---|---:|---:|---:|",
  (.[$key].results[] | "| \(.variant) | \(.client) | \(.requests) (\(.errors)) | \(.ttft_p50_ms) / \(.ttft_p99_ms) | \(.slo_met_pct | r) % |")' "$OUT")
echo "$table"
if grep -q "<!-- $MARK:begin -->" docs/deploying.md; then
    write_block "$MARK" "$table" docs/deploying.md
else
    echo "docs/deploying.md has no $MARK markers: the table is not written there" >&2
fi
