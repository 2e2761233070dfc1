#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust: promtool and prometheus (Debian's `prometheus`),
# curl, and the official OpenAI Python SDK. Idempotent; needs root for apt-get.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check openai
fi
