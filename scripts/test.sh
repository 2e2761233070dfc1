#!/usr/bin/env bash
# README's test command. Installs what the tests need beyond Rust (scripts/install-test-deps.sh:
# Prometheus and promtool, curl, the OpenAI SDK, the manifest validators, and llama.cpp's
# llama-server with its test model), then runs every test. TOKENMETER_REQUIRE_LLAMA=1 makes the
# tests against the real engine fail instead of skipping if llama-server is missing.
#
# `--no-fail-fast`: a failing test binary does not hide the results of the ones after it.
#
#   scripts/test.sh                             # everything
#   scripts/test.sh --test e2e llama_server::   # extra arguments go to cargo test
#   scripts/flake-hunt.sh                       # the suite 5 times with one core hogged
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
TOKENMETER_REQUIRE_LLAMA=1 cargo test --locked --no-fail-fast "$@"
