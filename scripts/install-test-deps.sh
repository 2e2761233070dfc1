#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust: promtool and prometheus (Debian's `prometheus`),
# curl, nginx, redis-server, the official OpenAI Python SDK, the manifest validators, and llama.cpp's
# llama-server with its random-weight test model (scripts/llama/build.sh; ~10 minutes the first
# time). Idempotent; needs root for apt-get. scripts/test.sh (README's test command) runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# nginx terminates TLS in front of a test backend (tests/e2e/tls_upstream.rs).
[ -x /usr/sbin/nginx ] || need_apt+=(nginx)
# Redis keeps the tenant budgets every replica shares (tests/e2e/budget_redis.rs).
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # The nginx and redis packages may start system services; the tests run their own.
  systemctl stop nginx >/dev/null 2>&1 || true
  systemctl stop redis-server >/dev/null 2>&1 || true
fi
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check openai
fi
# The manifest validators (kubernetes-validate bundles the Kubernetes schemas; the operator models
# give the PodMonitor / PrometheusRule schemas, KEDA's the ScaledObject's) live in a virtualenv that
# scripts/check-deploy.sh uses (it installs the same list where one is missing).
VENV=${DEPLOY_VENV:-target/deploy-venv}
if [[ ! -x "$VENV/bin/kubernetes-validate" ]] \
    || ! "$VENV/bin/python" -c 'import cloudcoil.models.prometheus_operator, cloudcoil.models.keda' >/dev/null 2>&1; then
  make_venv "$VENV" 'kubernetes-validate==1.37.0' 'cloudcoil-models-prometheus-operator==0.80.1.0' \
    'cloudcoil-models-keda==2.16.1.0'
fi
# A real inference engine for tests/e2e/llama_server.rs.
scripts/llama/build.sh
