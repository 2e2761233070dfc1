# Shared pieces of the benchmark scripts (scripts/bench-*.sh), sourced from the repository root.

# Every child a script starts goes into `pids`; they are killed when the script exits.
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# wait_http URL [TRIES]: polls URL every 0.1 s until it answers 2xx (default 100 tries), else exits.
wait_http() {
    for _ in $(seq "${2:-100}"); do
        curl -sf "$1" >/dev/null && return 0
        sleep 0.1
    done
    echo "no answer from $1" >&2
    exit 1
}

# urls PORT...: a TOML array of the loopback URLs of PORT... (a pool's `urls`).
urls() {
    local out="" port
    for port in "$@"; do out="$out\"http://127.0.0.1:$port\", "; done
    echo "[${out%, }]"
}

# write_block MARK TEXT [FILE]: replaces what stands between `<!-- MARK:begin -->` and
# `<!-- MARK:end -->` in FILE (default docs/routing.md) with TEXT.
write_block() {
    python3 - "$1" "$2" "${3:-docs/routing.md}" <<'PY'
import re, sys
mark, body, path = sys.argv[1:4]
text = open(path).read()
block = f"<!-- {mark}:begin -->\n{body}\n<!-- {mark}:end -->"
text = re.sub(rf"<!-- {re.escape(mark)}:begin -->.*?<!-- {re.escape(mark)}:end -->",
              lambda _: block, text, flags=re.S)
open(path, "w").write(text)
PY
}
