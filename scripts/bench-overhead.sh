#!/usr/bin/env bash
# The end-to-end overhead benchmark: direct vs tokenmeter vs nginx vs haproxy on loopback, interleaved,
# plus tokenmeter forwarding an unmetered path and a bare proxy on hyper (where the cost goes), and
# tokenmeter and nginx with TLS on the client side and on the upstream side (docs/performance.md, "TLS").
# Results: target/bench-overhead/{summary.md,results.jsonl,machine.txt}; method: docs/performance.md.
#
#   scripts/bench-overhead.sh            # the full run, all 11 paths (release build; ~27 min on
#                                        # 2 cores by the sum of its runs, the 6 plain ones ~15)
#   scripts/bench-overhead.sh --tls-only # the 4 TLS paths and direct-tls, shorter runs (~8 min
#                                        # on 2 cores); results in target/bench-overhead-tls/
#   scripts/bench-overhead.sh --smoke    # a few seconds per path, debug build: that it runs (CI)
#   scripts/bench-overhead.sh -- --reps 5 --concurrency 1,64   # extra flags for `overhead run`
#   scripts/bench-overhead.sh -- --paths tokenmeter,nginx      # some paths (and their baseline)
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
tls_only=0
extra=()
for arg in "$@"; do
    case "$arg" in
        --smoke) smoke=1 ;;
        --tls-only) tls_only=1 ;;
        --) ;;
        *) extra+=("$arg") ;;
    esac
done

# nginx and haproxy are the C baselines; install Debian's packages when missing and we may.
baselines=(nginx haproxy)
for baseline in "${baselines[@]}"; do
    if ! [ -x "/usr/sbin/$baseline" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get install -y -q "$baseline" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "$baseline" >/dev/null; } || true
    fi
    if [ -x "/usr/sbin/$baseline" ]; then
        # The package starts a system service (nginx on :80); it is not ours to measure.
        systemctl stop "$baseline" >/dev/null 2>&1 || true
    fi
done

# 10 000 idle streams = 20 000 sockets in the proxy, 10 000 in the client and the backend each.
# haproxy sizes its own descriptor limit from its maxconn, which the harness derives from this one.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

if [ "$smoke" = 1 ]; then
    profile_args=()
    out=target/bench-overhead-smoke
    run_args=(--concurrency 1,8 --reps 1 --secs 2 --warmup 0.5 --saturation-secs 1
              --saturation-streams 8 --idle-streams 50)
else
    profile_args=(--release)
    out=target/bench-overhead
    # A proxy holds two sockets per stream; stay under the hard limit (a container may cap it).
    idle=$(( ($(ulimit -n) - 1000) / 2 ))
    [ "$idle" -gt 10000 ] && idle=10000
    run_args=(--idle-streams "$idle")
fi
mode_dir=$([ "$smoke" = 1 ] && echo debug || echo release)
tls_paths=(direct-tls tokenmeter-tls-client nginx-tls-client tokenmeter-tls-upstream nginx-tls-upstream)
if [ "$tls_only" = 1 ]; then
    out="$out-tls"
    run_args+=(--paths "$(IFS=,; echo "${tls_paths[*]}")")
    # Five paths, 3 repetitions of 1, 64 and 1024 streams x 5 s (the first 1.5 s not measured)
    # and of saturation x 4 s: ~5 min of load, plus the idle streams of four proxies.
    [ "$smoke" = 1 ] || run_args+=(--secs 5 --warmup 1.5 --saturation-secs 4)
fi

cargo build -q "${profile_args[@]}" --bin tokenmeter
bin=$(cargo build "${profile_args[@]}" --bench overhead --message-format=json 2>/dev/null \
    | grep '"name":"overhead"' | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
[ -x "$bin" ] || { echo "bench-overhead: could not build the overhead harness" >&2; exit 1; }

mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
    echo "memory: $(grep MemTotal /proc/meminfo | awk '{print $2/1024/1024 " GiB"}')"
    echo "kernel: $(uname -r)"
    echo "rustc: $(rustc -V)"
    echo "nginx: $(/usr/sbin/nginx -v 2>&1 || echo none)"
    echo "haproxy: $( { /usr/sbin/haproxy -v 2>/dev/null || echo none; } | head -1)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "uptime: $(uptime)"
} > "$out/machine.txt"
cat "$out/machine.txt"

"$bin" run --tokenmeter "target/$mode_dir/tokenmeter" --out "$out" "${run_args[@]}" "${extra[@]}"

if [ "$smoke" = 1 ]; then
    # The smoke run passes when every path produced chunks (not how fast they were), and every
    # TLS path negotiated the one suite both TLS ends of the harness offer.
    expected=(direct-tls tokenmeter-tls-client tokenmeter-tls-upstream)
    [ -x /usr/sbin/nginx ] && expected+=(nginx-tls-client nginx-tls-upstream)
    if [ "$tls_only" = 0 ]; then
        expected+=(direct tokenmeter tokenmeter-unmetered hyper-bare)
        for baseline in "${baselines[@]}"; do
            [ -x "/usr/sbin/$baseline" ] && expected+=("$baseline")
        done
    fi
    for path in "${expected[@]}"; do
        grep -q "| $path |" "$out/summary.md" || { echo "bench-overhead smoke: no $path row" >&2; exit 1; }
    done
    for path in "${expected[@]}"; do
        case "$path" in
            *tls*)
                grep -q "^| $path | .*TLS13_AES_256_GCM_SHA384" "$out/summary.md" \
                    || { echo "bench-overhead smoke: $path did not negotiate TLS13_AES_256_GCM_SHA384" >&2; exit 1; } ;;
        esac
    done
    if grep -q '"chunks_total":0' "$out/results.jsonl"; then
        echo "bench-overhead smoke: a run received no chunks" >&2; exit 1
    fi
    echo "bench-overhead smoke: ok (every path streamed)"
fi
