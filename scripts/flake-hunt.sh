#!/usr/bin/env bash
# Runs the test suite (or the tests named) N times while a busy loop keeps one core loaded, as a
# shared CI machine would, and lists every failure by test: a test that fails once here is a
# defect to fix at its cause, never one to rerun.
#
#   scripts/flake-hunt.sh                        # the whole suite, 5 times, one core hogged
#   scripts/flake-hunt.sh -n 20 -- --test serial # 20 runs of one test binary
#   scripts/flake-hunt.sh -n 10 -- proxy_faults  # the tests whose names contain a filter
#   scripts/flake-hunt.sh --hogs 0               # without the load
#
# Arguments after `--` go to `cargo test` as README's test command passes them (scripts/test.sh).
# Logs: target/flake-hunt/run-K.log; the summary: target/flake-hunt/summary.txt (also printed).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
hogs=1
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs=$2; shift 2 ;;
        --hogs) hogs=$2; shift 2 ;;
        --) shift; args=("$@"); break ;;
        *) echo "flake-hunt: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

out=target/flake-hunt
rm -rf "$out"
mkdir -p "$out"

# Build once, with the dependencies installed as README's test command does, so every run
# measures the tests and not the compiler.
scripts/install-test-deps.sh >"$out/install.log" 2>&1 \
    || { tail -20 "$out/install.log" >&2; exit 1; }
export CARGO_INCREMENTAL=0 TOKENMETER_REQUIRE_LLAMA=1
cargo test --locked --no-run "${args[@]}" >"$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log" >&2; exit 1; }

hog_pids=()
stop_hogs() {
    for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
    # A plain busy loop at the tests' own priority: the other core is taken, as on a shared
    # runner where another job compiles.
    sh -c 'while :; do :; done' &
    hog_pids+=($!)
done

failed_runs=0
for k in $(seq 1 "$runs"); do
    log="$out/run-$k.log"
    start=$SECONDS
    if cargo test --locked --no-fail-fast "${args[@]}" >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed_runs=$((failed_runs + 1))
    fi
    echo "run $k: $status in $((SECONDS - start)) s" | tee -a "$out/runs.txt"
done
stop_hogs

# Each failing test, with the binary it ran in ("Running tests/e2e/main.rs (...)") and the runs
# it failed in.
summary="$out/summary.txt"
{
    echo "flake-hunt: $runs runs, $hogs core(s) hogged, cargo test ${args[*]:-(everything)}"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    cat "$out/runs.txt"
    failures=$(for k in $(seq 1 "$runs"); do
        awk -v run="$k" '
            /^ *Running / { target = $2 }
            / \.\.\. FAILED$/ { print target " " $2 " " run }
            /^error: test failed|^error: [0-9]+ targets? failed/ { next }
        ' "$out/run-$k.log"
    done)
    if [ -z "$failures" ]; then
        echo "failures: 0"
    else
        echo "failures by test (target, test: runs):"
        sort <<<"$failures" | awk '
            { key = $1 " " $2; runs[key] = runs[key] (runs[key] ? "," : "") $3; n[key]++ }
            END { for (k in n) printf "  %s: %d (runs %s)\n", k, n[k], runs[k] }' | sort
        # A binary that failed to start or crashed has no per-test line: show cargo's own verdict.
        grep -h '^error: ' "$out"/run-*.log | sort | uniq -c | sed 's/^/  cargo: /' || true
    fi
} | tee "$summary"
[ "$failed_runs" = 0 ]
