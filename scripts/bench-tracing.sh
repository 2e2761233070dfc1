#!/usr/bin/env bash
# What tracing costs the proxy (docs/performance.md, "Tracing (#25)"): count-per-chunk.sh
# (instructions per chunk and per request, callgrind) and bench-overhead.sh (tokenmeter against
# direct: CPU per chunk, added latency) with tracing off, on at 1 % and on at 100 % sampling,
# exporting over OTLP/HTTP to a sink that decodes nothing (scripts/lib/otlp-sink.py).
#
#   scripts/bench-tracing.sh             # ~25 min on 2 cores; target/bench-tracing/summary.md
#   QUICK=1 scripts/bench-tracing.sh     # instruction counts only (~5 min)
#
# The settings come from the standard OpenTelemetry variables, as a deployment would set them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

out=target/bench-tracing
rm -rf "$out" && mkdir -p "$out"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 scripts/lib/otlp-sink.py "$port" > "$out/sink.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$out/sink.out" 2>/dev/null && break; sleep 0.05; done

{
    echo "# What tracing costs ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD))"
    echo
    echo "tokenmeter metering a chat completion, exporting over OTLP/HTTP to a sink on loopback."
    echo
} > "$out/summary.md"
for mode in off 1pct 100pct; do
    case "$mode" in
        off) settings=() ;;
        1pct) settings=(OTEL_TRACES_SAMPLER_ARG=0.01) ;;
        100pct) settings=(OTEL_TRACES_SAMPLER_ARG=1) ;;
    esac
    if [ "$mode" != off ]; then
        settings+=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$port"
                   OTEL_TRACES_SAMPLER=parentbased_traceidratio)
    fi
    echo "bench-tracing: $mode" >&2
    env "${settings[@]}" PROXIES=tokenmeter scripts/count-per-chunk.sh >/dev/null
    { echo "## tracing $mode: instructions and syscalls"; echo
      grep '^|' target/count-per-chunk/summary.md; echo; } >> "$out/summary.md"
    if [ "${QUICK:-0}" != 1 ]; then
        env "${settings[@]}" scripts/bench-overhead.sh -- --paths tokenmeter "$@" >/dev/null
        { echo "## tracing $mode: bench-overhead (tokenmeter against direct)"; echo
          cat target/bench-overhead/summary.md; echo; } >> "$out/summary.md"
    fi
done
echo "sink received: $(curl -s "http://127.0.0.1:$port/")" >> "$out/summary.md"
cat "$out/summary.md"
