#!/usr/bin/env bash
# The soak (not in CI; tests/e2e/reliability_soak.rs::soak_smoke is its bounded version there):
# SOAK_CONCURRENCY concurrent streams for SOAK_SECONDS through the release binary against two
# simulated replicas, ~1 in 20 clients disconnecting early, replica "a" killed at 40 % and
# restarted at 60 %. Every stream is checked byte for byte; the proxy's counts are reconciled with
# what the clients saw; the proxy's RSS and fds are sampled from /proc. Prints one "SOAK" line.
#
#   scripts/soak.sh                                  # 2000 streams for 180 s
#   SOAK_CONCURRENCY=4000 SOAK_SECONDS=600 scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export SOAK_CONCURRENCY="${SOAK_CONCURRENCY:-2000}"
export SOAK_SECONDS="${SOAK_SECONDS:-180}"
# Each stream holds ~2 fds in the proxy and ~2 in the driver.
ulimit -n "$(( SOAK_CONCURRENCY * 4 + 1024 ))" 2>/dev/null || true
cargo test --release --test e2e reliability_soak::soak_full -- --ignored --nocapture 2>&1 | tee target/soak.log
grep '^SOAK ' target/soak.log
