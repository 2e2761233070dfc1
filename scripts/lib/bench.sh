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

# start_sims ID [FLAG...]: the simulated fleet of bench-slo.sh and bench-fleet.sh, one `tokenmeter
# sim` per port of PORTS at PROFILE (8103 and up at half speed) with the FLAGs, logs in
# $tmp/sim-PORT-ID.log; appends their pids to the caller's `sims` and to `pids`, then waits until
# each answers.
start_sims() {
    local id=$1 port scale
    shift
    for port in "${PORTS[@]}"; do
        scale=1.0
        [ "$port" -ge 8103 ] && scale=2.0
        "$BIN" sim --listen "127.0.0.1:$port" --profile "$PROFILE" --time-scale "$scale" \
            --enable-prompt-tokens-details "$@" >"$tmp/sim-$port-$id.log" 2>&1 &
        sims+=("$!")
        pids+=("$!")
    done
    for port in "${PORTS[@]}"; do wait_http "http://127.0.0.1:$port/health"; done
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

# prom_median FILE METRIC SELECTOR: the median of a histogram's samples whose labels contain
# SELECTOR (e.g. kind="ttft"), summed over the other labels, interpolated linearly inside the
# bucket that holds it (as PromQL's histogram_quantile: the first bucket from 0, the +Inf bucket
# answers its lower bound); null without samples.
prom_median() {
    { grep "^$2_bucket{.*$3" "$1" || true; } | awk '
        { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
          cum[le] += $NF; if (le != "+Inf") bounds[le] = le + 0 }
        END {
            if (!("+Inf" in cum) || cum["+Inf"] == 0) { print "null"; exit }
            n = 0; for (le in bounds) order[++n] = le
            for (i = 2; i <= n; i++) for (j = i; j > 1 && bounds[order[j]] < bounds[order[j-1]]; j--) {
                t = order[j]; order[j] = order[j-1]; order[j-1] = t }
            rank = cum["+Inf"] / 2; lo = 0; below = 0
            for (i = 1; i <= n; i++) {
                hi = bounds[order[i]]; c = cum[order[i]]
                if (c >= rank) {
                    printf "%.4f\n", (c > below) ? lo + (hi - lo) * (rank - below) / (c - below) : hi; exit }
                lo = hi; below = c
            }
            printf "%.4f\n", lo }'
}

# prom_abs_error FILE METRIC SELECTOR: the median absolute relative error of the predictions in a
# histogram of predicted / measured ratios (samples whose labels contain SELECTOR, summed over the
# other labels): the smallest e with half the samples' ratios within [1 - e, 1 + e], the cumulative
# count interpolated linearly between bucket bounds (from 0 at 0; nothing is placed past the last
# finite bound); null without samples.
prom_abs_error() {
    { grep "^$2_bucket{.*$3" "$1" || true; } | awk '
        { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
          cum[le] += $NF; if (le != "+Inf") bounds[le] = le + 0 }
        function at(x,   i, lo, below, hi, c) {
            lo = 0; below = 0
            for (i = 1; i <= n; i++) {
                hi = bounds[order[i]]; c = cum[order[i]]
                if (x <= hi) return below + (c - below) * (x - lo) / (hi - lo)
                lo = hi; below = c
            }
            return below
        }
        END {
            if (!("+Inf" in cum) || cum["+Inf"] == 0) { print "null"; exit }
            n = 0; for (le in bounds) order[++n] = le
            for (i = 2; i <= n; i++) for (j = i; j > 1 && bounds[order[j]] < bounds[order[j-1]]; j--) {
                t = order[j]; order[j] = order[j-1]; order[j-1] = t }
            half = cum["+Inf"] / 2
            for (e = 0; e <= 4; e += 0.001) {
                low = 1 - e; if (low < 0) low = 0
                if (at(1 + e) - at(low) >= half) { printf "%.4f\n", e; exit }
            }
            print "null" }'
}

# llama_server CORE PORT BATCH LOG SLOTS: a llama-server of $LLAMA pinned to core CORE with one
# thread, 4 slots of a 16 384-token context, batch BATCH, saving and restoring slots in SLOTS, its
# log in LOG; prints its pid (called in $(...), so the caller adds it to `pids` itself).
llama_server() {
    taskset -c "$1" "$LLAMA/bin/llama-server" --model "$LLAMA/model.gguf" --host 127.0.0.1 --port "$2" \
        --threads 1 --threads-batch 1 --parallel 4 --ctx-size 16384 \
        --batch-size "$3" --ubatch-size "$3" --slot-save-path "$5/" --metrics >"$4" 2>&1 &
    echo "$!"
}
