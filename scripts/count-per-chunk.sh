#!/usr/bin/env bash
# What one forwarded chunk and one request cost a proxy, counted rather than timed:
# - user-space instructions (valgrind's callgrind: the proxy runs under it, one stream, counted
#   from after its first request until it exits);
# - syscalls (strace -c -f on the running proxy), per chunk at 1 and 64 streams.
# For tokenmeter metering a chat completion, tokenmeter forwarding an unmetered POST, and nginx
# (one worker, the harness's proxy settings). docs/performance.md quotes its output.
# On request, tokenmeter with tenants (#26: the header source, no header sent, so `anonymous`),
# and with a default budget no request reaches, in memory or in a Redis started here.
#
#   scripts/count-per-chunk.sh        # ~4 min; target/count-per-chunk/summary.md
#   PROXIES="tokenmeter tokenmeter-tenants tokenmeter-budget-memory tokenmeter-budget-redis" \
#       scripts/count-per-chunk.sh    # ~1 min per proxy
#
# Needs valgrind and strace (installed from Debian when missing and root), nginx optional.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench.sh

for tool in valgrind strace; do
    if ! command -v "$tool" >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get install -y -q "$tool" >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null && apt-get install -y -q "$tool" >/dev/null; }
    fi
    command -v "$tool" >/dev/null || { echo "count-per-chunk: $tool is needed" >&2; exit 1; }
done
NGINX=/usr/sbin/nginx

cargo build -q --release --bin tokenmeter
bin=$(cargo build --release --bench overhead --message-format=json 2>/dev/null \
    | grep '"name":"overhead"' | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
[ -x "$bin" ] || { echo "count-per-chunk: could not build the overhead harness" >&2; exit 1; }
TM=target/release/tokenmeter
out=target/count-per-chunk
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 400); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "count-per-chunk: nothing listens on port $1" >&2
    exit 1
}
# json_field JSON NAME: a number from the load client's one-line JSON.
json_field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }

"$bin" backend --listen 127.0.0.1:0 > "$out/backend.out" 2>"$out/backend.log" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$out/backend.out" 2>/dev/null && break; sleep 0.05; done
backend=$(awk '/listening/ {print $2}' "$out/backend.out")

nginx_conf() { # nginx_conf PORT: one worker in the foreground (valgrind and strace follow it)
    mkdir -p "$out/nginx"
    cat > "$out/nginx/nginx.conf" <<EOF
worker_processes 1;
master_process off;
daemon off;
pid $out/nginx/nginx.pid;
error_log $out/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $out/nginx/client_body;
    proxy_temp_path $out/nginx/proxy;
    fastcgi_temp_path $out/nginx/fastcgi;
    uwsgi_temp_path $out/nginx/uwsgi;
    scgi_temp_path $out/nginx/scgi;
    keepalive_requests 1000000;
    upstream backend { server $backend; keepalive 256; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:$1 backlog=4096;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
    echo "$out/nginx/nginx.conf"
}

# tenant_config PROXY: the config file of a tenant proxy (none for the others): the header source
# and, for a budget, every limit set out of reach (as benches/overhead/budgets.rs). Under callgrind
# a Redis round trip takes milliseconds, hence the long store_timeout: every admission is checked.
tenant_config() {
    local file="$out/$1.toml" store
    case "$1" in
        tokenmeter-tenants) store= ;;
        tokenmeter-budget-memory) store=memory ;;
        tokenmeter-budget-redis) store="redis://127.0.0.1:$redis_port/0" ;;
        *) return 0 ;;
    esac
    printf '[tenants]\nsources = ["header"]\n' > "$file"
    [ -n "$store" ] && cat >> "$file" <<EOF

[tenants.budgets]
store = "$store"
store_timeout = "5s"

[tenants.budgets.default]
counts = "total"
tokens_per_minute = 1000000000000
tokens_per_day = 1000000000000000
requests_per_minute = 1000000000
concurrent_streams = 1000000
EOF
    echo "$file"
}

# start PROXY PORT [WRAPPER...]: starts the proxy (under WRAPPER), prints its pid.
start() {
    local proxy=$1 port=$2 config
    shift 2
    case "$proxy" in
        tokenmeter*)
            config=$(tenant_config "$proxy")
            TOKENMETER_LISTEN=127.0.0.1:$port TOKENMETER_ADMIN_LISTEN=127.0.0.1:$(free_port) \
                TOKENMETER_UPSTREAM=http://$backend RUST_LOG=warn \
                "$@" "$TM" serve ${config:+--config "$config"} >/dev/null 2>>"$out/proxy.log" &
            ;;
        nginx) "$@" "$NGINX" -c "$(nginx_conf "$port")" >/dev/null 2>>"$out/proxy.log" & ;;
    esac
    echo $!
}
# stop PID: SIGTERM every second until it is gone (valgrind writes its counts on the way out; nginx
# under valgrind sometimes misses the first one). The proxy is not this shell's child (start runs
# in a command substitution), so `wait` cannot.
stop() {
    for _ in $(seq 30); do
        kill -TERM "$1" 2>/dev/null || return 0
        for _ in $(seq 20); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
    done
    kill -KILL "$1" 2>/dev/null || true
}
path_of() { [ "$1" = tokenmeter-unmetered ] && echo /v1/embeddings || echo /v1/chat/completions; }

proxies=(tokenmeter tokenmeter-unmetered)  # PROXIES="a b" to count fewer, or the tenant ones
[ -x "$NGINX" ] && proxies+=(nginx)
[ -n "${PROXIES:-}" ] && read -r -a proxies <<<"$PROXIES"

# The Redis of tokenmeter-budget-redis: on a free loopback port, nothing persisted.
redis_port=
if [[ " ${proxies[*]} " == *" tokenmeter-budget-redis "* ]]; then
    command -v redis-server >/dev/null || { echo "count-per-chunk: redis-server is needed" >&2; exit 1; }
    redis_port=$(free_port)
    mkdir -p "$out/redis"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$out/redis" >"$out/redis.log" 2>&1 &
    pids+=($!)
    wait_port "$redis_port"
fi

# per PROXY UNIT LOAD-ARGS...: user-space instructions per UNIT (chunks_total or requests) of a
# 6 s load. The proxy starts under callgrind with instrumentation off (start-up, the clock
# calibration of the metrics exporter, the first request's lazy set-up are not counted), serves one
# warm-up request, and is counted from `callgrind_control -i on` until it exits.
per() {
    local proxy=$1 unit=$2
    shift 2
    local port file pid json irefs
    port=$(free_port)
    file="$out/callgrind.$proxy.$unit"
    pid=$(start "$proxy" "$port" valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$file" -q)
    wait_port "$port"
    "$bin" load --addr "127.0.0.1:$port" --path "$(path_of "$proxy")" --streams 1 --chunks 2 \
        --interval-us 1000 --secs 0.3 --warmup 0 >/dev/null
    callgrind_control -i on "$pid" >/dev/null
    json=$("$bin" load --addr "127.0.0.1:$port" --path "$(path_of "$proxy")" --streams 1 \
        --secs 6 --warmup 0 "$@")
    stop "$pid"
    irefs=$(awk '/^(summary|totals):/ {print $2; exit}' "$file")
    awk -v i="${irefs:-0}" -v n="$(json_field "$json" "$unit")" \
        'BEGIN { if (i > 0 && n > 0) printf "%.0f", i / n; else print "–" }'
}

# syscalls PROXY STREAMS: "name calls/chunk" per syscall from strace -c over a 5 s paced run.
syscalls() {
    local proxy=$1 streams=$2 port pid json
    port=$(free_port)
    pid=$(start "$proxy" "$port")
    wait_port "$port"
    "$bin" load --addr "127.0.0.1:$port" --path "$(path_of "$proxy")" --streams "$streams" \
        --interval-us 20000 --secs 1 --warmup 0 >/dev/null
    local file="$out/strace.$proxy.$streams"
    strace -c -f -p "$pid" -o "$file" 2>/dev/null &
    local tracer=$!
    sleep 0.5
    json=$("$bin" load --addr "127.0.0.1:$port" --path "$(path_of "$proxy")" \
        --streams "$streams" --interval-us 20000 --secs 5 --warmup 0)
    kill -INT "$tracer"
    wait "$tracer" 2>/dev/null || true
    stop "$pid"
    local chunks
    chunks=$(json_field "$json" chunks_total)
    # strace -c rows: % time, seconds, usecs/call, calls, [errors], syscall.
    awk -v chunks="$chunks" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
            printf "%s %.2f\n", $NF, $4 / chunks }' "$file" \
        | sort -k2 -nr | awk '$2 >= 0.01 { printf "%s%s %s", sep, $1, $2; sep = ", " }'
}

{
    echo "# Instructions and syscalls per chunk ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
    echo
    echo "User-space instructions from callgrind (one stream for 6 s: 64 chunks 2 ms apart per request,"
    echo "so a chunk's figure carries 1/64 of a request's; 1-chunk requests for the request figure),"
    echo "syscalls from \`strace -c -f\` over 5 s of streams with a chunk every 20 ms each."
    echo "tokenmeter-unmetered is tokenmeter forwarding a POST it does not meter (/v1/embeddings);"
    echo "nginx runs one worker (under strace at 64 streams it falls behind and reads several chunks"
    echo "per read)."
    echo
    echo "Per further chunk = (64 x per chunk - per 1-chunk request) / 63: a chunk's own, without its"
    echo "share of the request."
    echo
    echo "| proxy | instructions per chunk | instructions per 1-chunk request | instructions per further chunk | syscalls per chunk, 1 stream | syscalls per chunk, 64 streams |"
    echo "|---|---|---|---|---|---|"
} > "$out/summary.md"
for proxy in "${proxies[@]}"; do
    echo "count-per-chunk: $proxy" >&2
    per_chunk=$(per "$proxy" chunks_total --chunks 64 --interval-us 2000)
    per_request=$(per "$proxy" requests --chunks 1 --interval-us 1000)
    further=$(awk -v c="$per_chunk" -v r="$per_request" \
        'BEGIN { if (c + 0 > 0 && r + 0 > 0) printf "%.0f", (64 * c - r) / 63; else print "–" }')
    one=$(syscalls "$proxy" 1)
    many=$(syscalls "$proxy" 64)
    echo "| $proxy | $per_chunk | $per_request | $further | $one | $many |" >> "$out/summary.md"
done
cat "$out/summary.md"
