#!/usr/bin/env bash
# Checks deploy/: Kubernetes manifests against the Kubernetes schemas (kubernetes-validate, strict,
# offline: it bundles the schemas), Prometheus Operator and KEDA resources against their CRD
# schemas (scripts/check_crds.py), that every ConfigMap and Secret a pod names is shipped beside it
# (scripts/check_pods.py), the PrometheusRule against the plain rule file it mirrors, and every
# ConfigMap's tokenmeter.toml with `tokenmeter serve --check`, in the environment its pods give it
# (a Secret's TOKENMETER_BUDGET_STORE, a mounted keys file). Every *.yaml under deploy/kubernetes/
# is checked, so a new variant's directory needs no line here.
#
#   scripts/check-deploy.sh              check (CI runs this; needs target/debug/tokenmeter)
#   scripts/check-deploy.sh --regenerate rewrite deploy/kubernetes/prometheusrule.yaml first
#
# Python tools go into a virtualenv (default target/deploy-venv; set DEPLOY_VENV to reuse one).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh

KUBERNETES_VERSIONS=(1.29.0 1.37.0)  # 1.29: the oldest with native sidecars on by default
# ConfigMaps whose tokenmeter.toml needs request routing ([routing], [[pools]], [[rules]]), which
# this build may not have yet. They must FAIL `serve --check` while listed here; once routing is
# merged, empty the list (the script fails when a listed config passes, to say so).
ROUTING_PENDING_CONFIGS=()

VENV=${DEPLOY_VENV:-target/deploy-venv}
if [[ ! -x "$VENV/bin/kubernetes-validate" || ! -x "$VENV/bin/python" ]] \
    || ! "$VENV/bin/python" -c 'import cloudcoil.models.prometheus_operator, cloudcoil.models.keda' 2>/dev/null; then
    make_venv "$VENV" 'kubernetes-validate==1.37.0' 'cloudcoil-models-prometheus-operator==0.80.1.0' \
        'cloudcoil-models-keda==2.16.1.0'
fi
PY="$VENV/bin/python"

if [[ "${1:-}" == "--regenerate" ]]; then
    "$PY" - <<'PY'
rules = open("deploy/prometheus/tokenmeter-rules.yaml").read()
path = "deploy/kubernetes/prometheusrule.yaml"
head = open(path).read().split("spec:\n")[0]
body = rules[rules.index("groups:"):]
indented = "".join("  " + line if line.strip() else line for line in body.splitlines(True))
open(path, "w").write(head + "spec:\n" + indented)
PY
    echo "regenerated deploy/kubernetes/prometheusrule.yaml"
fi

mapfile -t MANIFESTS < <(find deploy/kubernetes -name '*.yaml' | sort)
echo "== Kubernetes schemas (strict): ${#MANIFESTS[@]} files"
for version in "${KUBERNETES_VERSIONS[@]}"; do
    # Operator kinds only warn here ("Couldn't find schema"); check_crds.py validates them.
    "$VENV/bin/kubernetes-validate" --strict --quiet --no-warn -k "$version" "${MANIFESTS[@]}"
    echo "ok: Kubernetes $version"
done

echo "== Prometheus Operator and KEDA CRD schemas"
"$PY" scripts/check_crds.py "${MANIFESTS[@]}"

echo "== ConfigMaps and Secrets that pods name are shipped beside them"
"$PY" scripts/check_pods.py "${MANIFESTS[@]}"

echo "== PrometheusRule mirrors deploy/prometheus/tokenmeter-rules.yaml"
"$PY" - <<'PY'
import sys, yaml
plain = yaml.safe_load(open("deploy/prometheus/tokenmeter-rules.yaml"))
operator = yaml.safe_load(open("deploy/kubernetes/prometheusrule.yaml"))
if plain["groups"] != operator["spec"]["groups"]:
    sys.exit("prometheusrule.yaml differs from tokenmeter-rules.yaml: run scripts/check-deploy.sh --regenerate")
print(f"ok: {sum(len(g['rules']) for g in plain['groups'])} rules equal")
PY

echo "== tokenmeter serve --check on every ConfigMap"
TOKENMETER=${TOKENMETER:-target/debug/tokenmeter}
[[ -x "$TOKENMETER" ]] || { echo "build first: cargo build ($TOKENMETER missing)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
status=0
for file in "${MANIFESTS[@]}"; do
    rm -rf "$TMP/pod" && mkdir "$TMP/pod"
    # The ConfigMap's tokenmeter.toml, and the env of the containers that mount it (NAME=VALUE\0).
    "$PY" scripts/check_pods.py --config "$file" "$TMP/pod" || continue
    mapfile -d '' -t pod_env < "$TMP/pod/env"
    pending=no
    for p in "${ROUTING_PENDING_CONFIGS[@]}"; do [[ "$p" == "$file" ]] && pending=yes; done
    if env -u TOKENMETER_LISTEN -u TOKENMETER_ADMIN_LISTEN -u TOKENMETER_UPSTREAM \
        -u TOKENMETER_BUDGET_STORE -u TOKENMETER_TENANT_KEYS_FILE "${pod_env[@]}" \
        "$TOKENMETER" serve --check --config "$TMP/pod/config.toml" > "$TMP/out" 2>&1; then
        if [[ $pending == yes ]]; then
            echo "FAIL: $file now passes: remove it from ROUTING_PENDING_CONFIGS"; status=1
        else
            # Names only: a value may be a password.
            names=$(printf '%s\n' "${pod_env[@]}" | cut -d= -f1 | grep '^TOKENMETER_' | paste -sd, - || true)
            if [[ -n $names ]]; then names=" (env from its pods: $names)"; fi
            echo "ok: $file$names"
        fi
    elif [[ $pending == yes ]]; then
        echo "pending (needs routing): $file: $(tail -1 "$TMP/out")"
    else
        echo "FAIL: $file"; cat "$TMP/out"; status=1
    fi
done
exit $status
