"""What the pods of deploy/kubernetes/ read, checked offline (kubernetes-validate checks each
resource alone, not what one names of another).

  check_pods.py FILE...            every ConfigMap and Secret a pod template names (volumes, env,
                                   envFrom) is shipped in the same directory with the keys it
                                   reads, unless the reference is `optional: true`
  check_pods.py --config FILE DIR  writes FILE's tokenmeter.toml to DIR/config.toml and the
                                   environment of the containers that mount it to DIR/env (NAME=VALUE,
                                   NUL-separated): plain values, Secret and ConfigMap values resolved,
                                   and a path into a mounted Secret or ConfigMap written under DIR and
                                   pointed there. `serve --check` then reads the config as the pod
                                   runs it (e.g. TOKENMETER_BUDGET_STORE from a Secret wins over the
                                   file). Exit status 1 when FILE has no tokenmeter.toml.
"""
import base64
import os
import sys

import yaml


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def sibling_docs(path):
    """Every resource of the directory `path` is in (a variant is applied as one directory)."""
    folder = os.path.dirname(path) or "."
    docs = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".yaml"):
            docs += load(os.path.join(folder, name))
    return docs


def data_of(docs):
    """{(kind, name): {key: text}} of the ConfigMaps and Secrets in `docs`."""
    out = {}
    for doc in docs:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if kind == "ConfigMap":
            out[(kind, name)] = dict(doc.get("data") or {})
        elif kind == "Secret":
            values = {k: base64.b64decode(v).decode() for k, v in (doc.get("data") or {}).items()}
            values.update(doc.get("stringData") or {})
            out[(kind, name)] = values
    return out


def pod_specs(docs):
    """(resource name, pod spec) of each workload in `docs`."""
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield doc["metadata"]["name"], spec["template"]["spec"]
        elif doc.get("kind") == "Pod":
            yield doc["metadata"]["name"], spec


def containers(pod):
    return (pod.get("initContainers") or []) + (pod.get("containers") or [])


def references(pod):
    """(kind, name, key or None, optional, where) of every ConfigMap / Secret the pod reads."""
    for volume in pod.get("volumes") or []:
        for field, kind, name_field in (("configMap", "ConfigMap", "name"), ("secret", "Secret", "secretName")):
            source = volume.get(field)
            if source is not None:
                optional = source.get("optional", False)
                where = f"volume {volume['name']}"
                yield kind, source[name_field], None, optional, where
                for item in source.get("items") or []:
                    yield kind, source[name_field], item["key"], optional, where
    for container in containers(pod):
        for env in container.get("env") or []:
            value_from = env.get("valueFrom") or {}
            for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                ref = value_from.get(field)
                if ref is not None:
                    where = f"container {container['name']} env {env['name']}"
                    yield kind, ref["name"], ref["key"], ref.get("optional", False), where
        for env_from in container.get("envFrom") or []:
            for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                ref = env_from.get(field)
                if ref is not None:
                    where = f"container {container['name']} envFrom"
                    yield kind, ref["name"], None, ref.get("optional", False), where


def check(paths):
    errors = checked = 0
    for path in paths:
        shipped = data_of(sibling_docs(path))
        for workload, pod in pod_specs(load(path)):
            for kind, name, key, optional, where in references(pod):
                checked += 1
                values = shipped.get((kind, name))
                if optional:
                    continue
                if values is None:
                    print(f"ERROR {path}: {workload} {where}: {kind} {name} is not in {os.path.dirname(path)}/")
                    errors += 1
                elif key is not None and key not in values:
                    print(f"ERROR {path}: {workload} {where}: {kind} {name} has no key {key!r}")
                    errors += 1
    print(f"{checked} references to ConfigMaps and Secrets checked, {errors} with errors")
    return 1 if errors else 0


def mounted_file(container, pod, shipped, path):
    """The text of the file at `path` in `container`, when a ConfigMap / Secret volume holds it."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix) or mount.get("subPath"):
            continue
        volume = volumes.get(mount["name"], {})
        for field, kind, name_field in (("configMap", "ConfigMap", "name"), ("secret", "Secret", "secretName")):
            source = volume.get(field)
            if source is None:
                continue
            values = shipped.get((kind, source[name_field]), {})
            relative = path[len(prefix):]
            for item in source.get("items") or []:
                if item["path"] == relative:
                    return values.get(item["key"])
            return values.get(relative)
    return None


def write_config(path, out):
    docs = load(path)
    configmap = next(
        (d for d in docs if d.get("kind") == "ConfigMap" and "tokenmeter.toml" in (d.get("data") or {})),
        None,
    )
    if configmap is None:
        return 1
    with open(os.path.join(out, "config.toml"), "w") as f:
        f.write(configmap["data"]["tokenmeter.toml"])
    siblings = sibling_docs(path)
    shipped = data_of(siblings)
    env = {}
    for _, pod in pod_specs(siblings):
        volumes = {
            v["name"] for v in pod.get("volumes") or []
            if (v.get("configMap") or {}).get("name") == configmap["metadata"]["name"]
        }
        for container in containers(pod):
            if not any(m["name"] in volumes for m in container.get("volumeMounts") or []):
                continue
            for var in container.get("env") or []:
                value = var.get("value")
                value_from = var.get("valueFrom") or {}
                for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                    ref = value_from.get(field)
                    if ref is not None:
                        value = shipped.get((kind, ref["name"]), {}).get(ref["key"])
                if value is None:
                    continue  # an optional reference that is not shipped, or a fieldRef
                text = mounted_file(container, pod, shipped, value)
                if text is not None:
                    local = os.path.join(out, "files", value.lstrip("/"))
                    os.makedirs(os.path.dirname(local), exist_ok=True)
                    with open(local, "w") as f:
                        f.write(text)
                    value = local
                env[var["name"]] = value
    with open(os.path.join(out, "env"), "w") as f:
        f.write("".join(f"{name}={value}\0" for name, value in env.items()))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--config"]:
        sys.exit(write_config(sys.argv[2], sys.argv[3]))
    sys.exit(check(sys.argv[1:]))
