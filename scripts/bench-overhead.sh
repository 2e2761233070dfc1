#!/usr/bin/env bash
# The end-to-end overhead benchmark: direct vs tokenmeter vs nginx vs haproxy on loopback, interleaved,
# plus tokenmeter forwarding an unmetered path and a bare proxy on hyper (where the cost goes), and
# tokenmeter and nginx with TLS on the client side and on the upstream side (docs/performance.md, "TLS").
# Opt-in: tokenmeter with tenants and with a budget in memory or in Redis (docs/performance.md,
# "Budgets (#26)"). Results: target/bench-overhead/{summary.md,results.jsonl,machine.txt}; method:
# docs/performance.md.
#
#   scripts/bench-overhead.sh            # the full run, all 11 paths (release build; ~27 min on
#                                        # 2 cores by the sum of its runs, the 6 plain ones ~15)
#   scripts/bench-overhead.sh --tls-only # the 4 TLS paths and direct-tls, shorter runs (~8 min
#                                        # on 2 cores); results in target/bench-overhead-tls/
#   scripts/bench-overhead.sh --budgets  # tokenmeter against itself with tenants, a budget in
#                                        # memory, a budget in Redis (+ direct), plus 1-chunk
#                                        # requests for the CPU per request, no idle streams
#                                        # (~10 min on 2 cores); target/bench-overhead-budgets/
#   scripts/bench-overhead.sh --slo      # the same runs with tokenmeter against itself placing by
#                                        # predicted latency over 16 backends (balance = "slo",
#                                        # a gateway queue; #27); target/bench-overhead-slo/
#   scripts/bench-overhead.sh --smoke    # a few seconds per path, debug build: that it runs (CI;
#                                        # every path, the tenant ones included)
#   scripts/bench-overhead.sh -- --reps 5 --concurrency 1,64   # extra flags for `overhead run`
#   scripts/bench-overhead.sh -- --paths tokenmeter,nginx      # some paths (and their baseline)
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
tls_only=0
budgets=0
slo=0
extra=()
for arg in "$@"; do
    case "$arg" in
        --smoke) smoke=1 ;;
        --tls-only) tls_only=1 ;;
        --budgets) budgets=1 ;;
        --slo) budgets=1; slo=1 ;;
        --) ;;
        *) extra+=("$arg") ;;
    esac
done

# install_service NAME BINARY: Debian's package NAME when BINARY is missing and we may, then its
# system service stopped (nginx on :80, redis on :6379): it is not ours to measure.
install_service() {
    if ! [ -x "$2" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get install -y -q "$1" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "$1" >/dev/null; } || true
    fi
    if [ -x "$2" ]; then
        systemctl stop "$1" >/dev/null 2>&1 || true
    fi
}
# nginx and haproxy are the C baselines (not run by --budgets).
baselines=(nginx haproxy)
if [ "$budgets" = 0 ] || [ "$smoke" = 1 ]; then
    for baseline in "${baselines[@]}"; do
        install_service "$baseline" "/usr/sbin/$baseline"
    done
fi
# The Redis a budget path keeps its budget in (the harness starts its own on a loopback port);
# without it that path is skipped.
redis=/usr/bin/redis-server
if [ "$tls_only" = 0 ] && [ "$slo" = 0 ] && { [ "$budgets" = 1 ] || [ "$smoke" = 1 ]; }; then
    install_service redis-server "$redis"
fi

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
tenant_paths=(tokenmeter-tenants tokenmeter-budget-memory tokenmeter-budget-redis)
# --slo runs as --budgets does, its own path in place of the tenant ones.
[ "$slo" = 1 ] && tenant_paths=(tokenmeter-slo)
if [ "$budgets" = 1 ]; then
    out="$out-$([ "$slo" = 1 ] && echo slo || echo budgets)"
    # Five paths, 3 repetitions of 1, 64 and 1024 paced streams x 8 s (the first 2 s not
    # measured), saturation x 6 s and 64 streams of 1-chunk requests x 8 s: ~10 min. No idle
    # streams (~2 min per proxy): a budget keeps a small hold per request, not a buffer.
    if [ "$smoke" = 1 ]; then
        run_args+=(--request-secs 1)
    else
        run_args=(--secs 8 --warmup 2 --saturation-secs 6 --request-secs 8 --idle-streams 0)
    fi
    # tokenmeter and direct come along as the reference and the baseline.
    run_args+=(--paths "$(IFS=,; echo "${tenant_paths[*]}")")
elif [ "$tls_only" = 1 ]; then
    out="$out-tls"
    run_args+=(--paths "$(IFS=,; echo "${tls_paths[*]}")")
    # Five paths, 3 repetitions of 1, 64 and 1024 streams x 5 s (the first 1.5 s not measured)
    # and of saturation x 4 s: ~5 min of load, plus the idle streams of four proxies.
    [ "$smoke" = 1 ] || run_args+=(--secs 5 --warmup 1.5 --saturation-secs 4)
elif [ "$smoke" = 1 ]; then
    # The smoke run also checks the opt-in tenant paths, and the request runs.
    run_args+=(--paths "default,$(IFS=,; echo "${tenant_paths[*]}"),tokenmeter-slo" --request-secs 1)
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
    echo "redis: $( { "$redis" --version 2>/dev/null || echo none; } | head -1)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "uptime: $(uptime)"
} > "$out/machine.txt"
cat "$out/machine.txt"

"$bin" run --tokenmeter "target/$mode_dir/tokenmeter" --redis-server "$redis" --out "$out" \
    "${run_args[@]}" "${extra[@]}"

if [ "$smoke" = 1 ]; then
    # The smoke run passes when every path produced chunks (not how fast they were), every
    # TLS path negotiated the one suite both TLS ends of the harness offer, and no budget refused
    # a request or missed its store.
    expected=()
    if [ "$budgets" = 0 ]; then
        expected+=(direct-tls tokenmeter-tls-client tokenmeter-tls-upstream)
        [ -x /usr/sbin/nginx ] && expected+=(nginx-tls-client nginx-tls-upstream)
    fi
    if [ "$tls_only" = 0 ]; then
        expected+=(direct tokenmeter tokenmeter-tenants tokenmeter-budget-memory tokenmeter-slo)
        if [ -x "$redis" ]; then
            expected+=(tokenmeter-budget-redis)
        else
            echo "bench-overhead smoke: no $redis, the tokenmeter-budget-redis path was skipped" >&2
        fi
    fi
    if [ "$tls_only" = 0 ] && [ "$budgets" = 0 ]; then
        expected+=(tokenmeter-unmetered hyper-bare)
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
    for path in "${expected[@]}"; do
        case "$path" in
            tokenmeter-tenants|tokenmeter-budget-*|tokenmeter-slo)
                if grep -E "\"path\":\"$path\".*\"errors\":[1-9]" "$out/results.jsonl" >/dev/null; then
                    echo "bench-overhead smoke: a request on $path failed; the runs, why, and its log:" >&2
                    grep -E "\"path\":\"$path\".*\"errors\":[1-9]" "$out/results.jsonl" \
                        | grep -oE '"kind":"[a-z]*"|"streams":[0-9]*,"interval_us":[0-9]*|"error_kinds":\{[^}]*\}' >&2 || true
                    tail -n 20 "$out/$path.log" >&2 || true
                    exit 1
                fi ;;
        esac
        case "$path" in
            tokenmeter-budget-*)
                # The decisions table: requests, then refused, store errors, fallbacks and
                # settlements dropped, all 0.
                grep -q "^| $path | [0-9]* | 0 | 0 | 0 | 0 |$" "$out/summary.md" \
                    || { echo "bench-overhead smoke: $path refused a request or missed its store" >&2; exit 1; } ;;
        esac
    done
    echo "bench-overhead smoke: ok (every path streamed)"
fi
