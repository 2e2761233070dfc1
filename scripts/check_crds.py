"""Validates Prometheus Operator resources (PodMonitor, ServiceMonitor, PrometheusRule) and KEDA's
ScaledObject in the given YAML files against their CRD schemas, as generated into the pydantic
models of the PyPI packages `cloudcoil-models-prometheus-operator` and `cloudcoil-models-keda`
(kubernetes-validate only knows core kinds). A ScaledObject's Prometheus triggers are checked
beyond the schema (their metadata is a free map there): the keys the scaler needs, a threshold
that is a number, and a query that reads a series the shipped recording rules record.

Strict like `kubernetes-validate --strict`: the models ignore unknown fields, so each resource is
validated, dumped back, and compared with the input; any field that did not survive is reported.
Other kinds are left to kubernetes-validate. Exit status 1 on any error.
"""
import sys

import re

import yaml
from cloudcoil.models.keda import v1alpha1 as keda
from cloudcoil.models.prometheus_operator import v1

RULES = "deploy/prometheus/tokenmeter-rules.yaml"

KINDS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): v1.PodMonitor,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): v1.ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): v1.PrometheusRule,
    ("keda.sh/v1alpha1", "ScaledObject"): keda.ScaledObject,
}


def recorded():
    """The series the shipped rules record."""
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def trigger_errors(doc, records):
    """What a ScaledObject's Prometheus triggers lack or get wrong."""
    errors = []
    for i, trigger in enumerate(doc["spec"]["triggers"]):
        if trigger.get("type") != "prometheus":
            continue
        meta = trigger.get("metadata", {})
        where = f"spec.triggers[{i}].metadata"
        for key in ("serverAddress", "query", "threshold"):
            if not meta.get(key):
                errors.append(f"{where}.{key} missing")
        try:
            float(meta.get("threshold", ""))
        except ValueError:
            errors.append(f"{where}.threshold is not a number: {meta.get('threshold')!r}")
        names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{\[(]|\s*$)", meta.get("query", "")))
        if not names & records:
            errors.append(f"{where}.query reads no recorded series of {RULES}: {meta.get('query')!r}")
    return errors


def dropped(original, dumped, path=""):
    """Paths present in `original` but missing from `dumped` (unknown fields)."""
    out = []
    if isinstance(original, dict):
        for key, value in original.items():
            here = f"{path}.{key}" if path else key
            if not isinstance(dumped, dict) or key not in dumped:
                out.append(here)
            else:
                out += dropped(value, dumped[key], here)
    elif isinstance(original, list) and isinstance(dumped, list):
        for i, (a, b) in enumerate(zip(original, dumped)):
            out += dropped(a, b, f"{path}[{i}]")
    return out


def main(paths):
    errors = checked = 0
    records = recorded()
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            model = KINDS.get((doc.get("apiVersion"), doc.get("kind")))
            if model is None:
                continue
            name = f"{path}: {doc['kind']}/{doc.get('metadata', {}).get('name')}"
            checked += 1
            try:
                parsed = model.model_validate(doc)
            except Exception as e:  # pydantic.ValidationError, reported whole
                print(f"ERROR {name}: {e}")
                errors += 1
                continue
            dump = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
            unknown = dropped(doc, dump)
            problems = trigger_errors(doc, records) if doc["kind"] == "ScaledObject" else []
            if unknown:
                print(f"ERROR {name}: unknown fields {unknown}")
                errors += 1
            elif problems:
                print(f"ERROR {name}: {'; '.join(problems)}")
                errors += 1
            else:
                print(f"OK    {name}")
    print(f"{checked} operator resources checked, {errors} with errors")
    return 1 if errors or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
