#!/usr/bin/env bash
# RSS per idle open stream of one tokenmeter binary, alone (no other path, no load): the overhead
# harness's backend on a loopback port, the binary in front of it, then N streams opened and held
# after their first chunk (`overhead idle`). For comparing two builds quickly, as
# docs/performance.md ("Outcomes and the loop guard") did with 3 000 streams; the full figure is
# scripts/bench-overhead.sh's.
#
#   scripts/bench-idle.sh target/release/tokenmeter 3000
#
# Prints the harness's JSON line (streams_open, rss_before_kib, rss_after_kib, kib_per_stream).
set -euo pipefail
cd "$(dirname "$0")/.."
tokenmeter=${1:?usage: scripts/bench-idle.sh TOKENMETER_BINARY [STREAMS]}
streams=${2:-3000}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

harness=$(cargo build --release --bench overhead --message-format=json 2>/dev/null \
    | grep '"name":"overhead"' | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
[ -x "$harness" ] || { echo "bench-idle: could not build the overhead harness" >&2; exit 1; }

# Three ports below the ephemeral range, free when probed.
ports=()
for port in $(seq 29100 29199); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
    ports+=("$port")
    [ "${#ports[@]}" = 3 ] && break
done
[ "${#ports[@]}" = 3 ] || { echo "bench-idle: no three free ports in 29100-29199" >&2; exit 1; }
backend=${ports[0]} listen=${ports[1]} admin=${ports[2]}

work=$(mktemp -d)
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
pids=()
trap cleanup EXIT
"$harness" backend --listen "127.0.0.1:$backend" > "$work/backend.log" 2>&1 &
pids+=($!)
printf '[server]\nmax_streams = 100000\nmax_connections = 100000\n' > "$work/tokenmeter.toml"
TOKENMETER_UPSTREAM="http://127.0.0.1:$backend" TOKENMETER_LISTEN="127.0.0.1:$listen" \
    TOKENMETER_ADMIN_LISTEN="127.0.0.1:$admin" \
    "$tokenmeter" serve --config "$work/tokenmeter.toml" > "$work/tokenmeter.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$admin/metrics" && break
    sleep 0.1
done
"$harness" idle --addr "127.0.0.1:$listen" --streams "$streams" --pids "${pids[1]}"
