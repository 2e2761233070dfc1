"""Validates Prometheus Operator resources (PodMonitor, ServiceMonitor, PrometheusRule) in the given
YAML files against the operator's CRD schemas, as generated into the pydantic models of the PyPI
package `cloudcoil-models-prometheus-operator` (kubernetes-validate only knows core kinds).

Strict like `kubernetes-validate --strict`: the models ignore unknown fields, so each resource is
validated, dumped back, and compared with the input; any field that did not survive is reported.
Other kinds are left to kubernetes-validate. Exit status 1 on any error.
"""
import sys

import yaml
from cloudcoil.models.prometheus_operator import v1

KINDS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): v1.PodMonitor,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): v1.ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): v1.PrometheusRule,
}


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
            if unknown:
                print(f"ERROR {name}: unknown fields {unknown}")
                errors += 1
            else:
                print(f"OK    {name}")
    print(f"{checked} operator resources checked, {errors} with errors")
    return 1 if errors or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
