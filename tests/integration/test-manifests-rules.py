#!/usr/bin/env python3
"""The rules every rendered migkit manifest keeps (tests/integration/test-manifests*.sh).

Usage: test-manifests-rules.py probes FILE...
         Each FILE: rendered objects (YAML documents, or JSON objects / a List,
         as `kubectl apply -o json` prints them). Checks the probe rules:
         every long-running container of a DaemonSet, Deployment or
         StatefulSet has a readiness or liveness probe; no httpGet or
         tcpSocket probe names a loopback host unless the pod has
         hostNetwork (the kubelet sends them from the node, to the pod's IP
         when no host is given); a probed port is one the container declares
         by name, and is not the port of a server the container binds to
         loopback only; exec probes name a command.
       test-manifests-rules.py scheduler-config FILE KIND
         FILE: rendered objects; KIND: v1 or v1beta1. The kube-scheduler
         configuration in ConfigMap migkit-scheduler-config is that API
         version, uses only fields that version has, and the kube-scheduler
         image's tag is a Kubernetes version that reads it; prints the
         configuration without apiVersion as JSON (to compare renders).
       test-manifests-rules.py render DIR
         Renders the kustomization in DIR as far as migkit's use it
         (resources: files and directories; images; patches: strategic merge
         by kind and name, containers and lists of named items merged by
         name) and prints the objects as YAML: for machines without a
         kubectl of 1.21 or later (Debian's kubernetes-client is 1.20).
         Refuses any other kustomize field.
       test-manifests-rules.py exec-probe FILE WORKLOAD CONTAINER KIND
         Prints the exec command (JSON list) of probe KIND (readinessProbe,
         livenessProbe) of CONTAINER in WORKLOAD.
Exit status 1 with one line per broken rule on stderr.
"""
import ipaddress
import json
import re
import sys

WORKLOAD_KINDS = ("DaemonSet", "Deployment", "StatefulSet")
PROBES = ("readinessProbe", "livenessProbe", "startupProbe")


def load(path):
    text = open(path).read()
    if text.lstrip().startswith(("{", "[")):
        objs, dec, i = [], json.JSONDecoder(), 0
        while i < len(text):
            if text[i].isspace():
                i += 1
                continue
            o, i = dec.raw_decode(text, i)
            objs.append(o)
    else:
        import yaml  # python3-yaml (scripts/install-deps)

        objs = [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]
    if len(objs) == 1 and isinstance(objs[0], list):
        objs = objs[0]
    out = []
    for o in objs:
        out.extend(o.get("items", []) if o.get("kind") == "List" else [o])
    return out


def is_loopback(host):
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_ports(container):
    """Ports the container's own command binds to loopback only
    (migkit's --address 127.0.0.1 --port N, --metrics-address 127.0.0.1:N)."""
    args = list(container.get("command", [])) + list(container.get("args", []))
    ports, address = set(), None
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a == "--address":
            address = nxt
        elif a.startswith("--address="):
            address = a.split("=", 1)[1]
        elif a in ("--metrics-address",) or a.startswith("--metrics-address="):
            v = a.split("=", 1)[1] if "=" in a else nxt
            host, _, port = v.rpartition(":")
            if is_loopback(host) and port.isdigit():
                ports.add(int(port))
    if address and is_loopback(address):
        for i, a in enumerate(args):
            v = args[i + 1] if a == "--port" and i + 1 < len(args) else (a.split("=", 1)[1] if a.startswith("--port=") else None)
            if v and v.isdigit():
                ports.add(int(v))
    return ports


def check_probes(objs, errors):
    n = 0
    for w in objs:
        if w.get("kind") not in WORKLOAD_KINDS:
            continue
        pod = w["spec"]["template"]["spec"]
        host_network = bool(pod.get("hostNetwork"))
        for c in pod.get("containers", []):
            n += 1
            where = f"{w['kind']} {w['metadata']['name']}/{c['name']}"
            probes = {k: c[k] for k in PROBES if k in c}
            if not any(k in probes for k in ("readinessProbe", "livenessProbe")):
                errors.append(f"{where}: no readiness or liveness probe")
            named = {p.get("name"): p.get("containerPort") for p in c.get("ports", []) if p.get("name")}
            local = loopback_ports(c)
            for kind, p in probes.items():
                handlers = [h for h in ("httpGet", "tcpSocket", "exec", "grpc") if h in p]
                if len(handlers) != 1:
                    errors.append(f"{where}: {kind} has {len(handlers)} handlers ({handlers}), want 1")
                    continue
                h = handlers[0]
                if h == "exec":
                    cmd = p["exec"].get("command") or []
                    if not cmd or not all(isinstance(a, str) and a for a in cmd):
                        errors.append(f"{where}: {kind} exec has no command")
                    continue
                spec = p[h]
                host = spec.get("host")
                if host is not None and not host_network and is_loopback(host):
                    errors.append(f"{where}: {kind} {h} host {host} without hostNetwork: the kubelet "
                                  "probes from the node, whose loopback is not the pod's")
                port = spec.get("port")
                if isinstance(port, str) and not port.isdigit():
                    if port not in named:
                        errors.append(f"{where}: {kind} {h} port '{port}' is not a port the container names")
                        continue
                    port = named[port]
                if port is not None and int(port) in local and not host_network:
                    errors.append(f"{where}: {kind} {h} port {port}: the container serves it on loopback "
                                  "only, unreachable from the kubelet (use an exec probe)")
    if n == 0:
        errors.append("no workload containers in the rendered objects")


# Fields of KubeSchedulerConfiguration per API version (k8s.io/kube-scheduler
# config/<version>/types.go and component-base's v1alpha1 types); a key not
# listed is one that version rejects (kube-scheduler decodes strictly).
COMPONENT = {
    "leaderElection": {"leaderElect": None, "leaseDuration": None, "renewDeadline": None, "retryPeriod": None,
                       "resourceLock": None, "resourceName": None, "resourceNamespace": None},
    "clientConnection": {"kubeconfig": None, "acceptContentTypes": None, "contentType": None, "qps": None,
                         "burst": None},
}
EXTENDER = {"urlPrefix": None, "filterVerb": None, "preemptVerb": None, "prioritizeVerb": None, "weight": None,
            "bindVerb": None, "enableHTTPS": None, "tlsConfig": None, "httpTimeout": None,
            "nodeCacheCapable": None, "managedResources": [{"name": None, "ignoredByScheduler": None}],
            "ignorable": None}
PROFILE = {"schedulerName": None, "plugins": None, "pluginConfig": None}
COMMON = dict(COMPONENT, apiVersion=None, kind=None, parallelism=None, enableProfiling=None,
              enableContentionProfiling=None, percentageOfNodesToScore=None, podInitialBackoffSeconds=None,
              podMaxBackoffSeconds=None, extenders=[EXTENDER])
SCHEMA = {
    # 1.25 and later (delayCacheUntilActive from 1.29; profiles' own
    # percentageOfNodesToScore from 1.25).
    "v1": dict(COMMON, profiles=[dict(PROFILE, percentageOfNodesToScore=None)], delayCacheUntilActive=None),
    # 1.19 to 1.22: the two bind addresses were removed in v1beta3.
    "v1beta1": dict(COMMON, profiles=[PROFILE], healthzBindAddress=None, metricsBindAddress=None),
}
# Kubernetes minor versions whose kube-scheduler reads the version.
MINORS = {"v1": range(25, 100), "v1beta1": range(19, 23)}


def check_fields(value, schema, path, errors):
    if schema is None:
        return
    if isinstance(schema, list):
        if not isinstance(value, list):
            errors.append(f"{path}: not a list")
            return
        for i, v in enumerate(value):
            check_fields(v, schema[0], f"{path}[{i}]", errors)
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: not a mapping")
        return
    for k, v in value.items():
        if k not in schema:
            errors.append(f"{path}.{k}: no such field in this version")
        else:
            check_fields(v, schema[k], f"{path}.{k}", errors)


def scheduler_config(objs, want, errors):
    import yaml

    cms = [o for o in objs if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "migkit-scheduler-config"]
    if len(cms) != 1:
        errors.append(f"{len(cms)} ConfigMaps migkit-scheduler-config, want 1")
        return None
    cfg = yaml.safe_load(cms[0]["data"]["kube-scheduler.yaml"])
    if cfg.get("apiVersion") != f"kubescheduler.config.k8s.io/{want}" or cfg.get("kind") != "KubeSchedulerConfiguration":
        errors.append(f"kube-scheduler.yaml: {cfg.get('apiVersion')} {cfg.get('kind')}, want "
                      f"kubescheduler.config.k8s.io/{want} KubeSchedulerConfiguration")
    check_fields(cfg, SCHEMA[want], "kube-scheduler.yaml", errors)
    images = [c["image"] for o in objs if o.get("kind") in WORKLOAD_KINDS
              for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler"]
    for image in images:
        m = re.search(r":v1\.(\d+)\.\d+$", image)
        if not m:
            errors.append(f"kube-scheduler image {image}: no v1.MINOR.PATCH tag")
        elif int(m.group(1)) not in MINORS[want]:
            errors.append(f"kube-scheduler image {image} does not read {want} (Kubernetes 1.{MINORS[want].start}"
                          f"-1.{MINORS[want].stop - 1} do)")
    if not images:
        errors.append("no kube-scheduler container")
    cfg.pop("apiVersion", None)
    return cfg


KUSTOMIZE_FIELDS = {"apiVersion", "kind", "resources", "images", "patches"}


def merge(base, patch):
    """Strategic merge as kustomize does it for these manifests: mappings
    merge, lists of mappings with a name merge by name, other values replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch and
            all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = list(base)
        for item in patch:
            idx = [i for i, x in enumerate(out) if x["name"] == item["name"]]
            if idx:
                out[idx[0]] = merge(out[idx[0]], item)
            else:
                out.append(item)
        return out
    return patch


def render(d):
    import os
    import yaml

    k = yaml.safe_load(open(os.path.join(d, "kustomization.yaml")))
    extra = set(k) - KUSTOMIZE_FIELDS
    if extra:
        raise SystemExit(f"{d}/kustomization.yaml: {sorted(extra)} not rendered here (use kubectl kustomize)")
    objs = []
    for r in k.get("resources", []):
        path = os.path.join(d, r)
        if os.path.isdir(path):
            objs += render(path)
        else:
            objs += [o for o in yaml.safe_load_all(open(path)) if o]
    for p in k.get("patches", []):
        for patch in yaml.safe_load_all(open(os.path.join(d, p["path"]))):
            key = (patch["kind"], patch["metadata"]["name"])
            hits = [i for i, o in enumerate(objs) if (o["kind"], o["metadata"]["name"]) == key]
            if len(hits) != 1:
                raise SystemExit(f"{d}: patch {p['path']} matches {len(hits)} objects {key}")
            objs[hits[0]] = merge(objs[hits[0]], patch)
    for img in k.get("images", []):
        for o in objs:
            if o.get("kind") not in WORKLOAD_KINDS:
                continue
            s = o["spec"]["template"]["spec"]
            for c in s.get("containers", []) + s.get("initContainers", []):
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = img.get("newName", name) + ":" + str(img.get("newTag", tag or "latest"))
    return objs


def main(argv):
    errors = []
    if len(argv) >= 2 and argv[0] == "probes":
        for f in argv[1:]:
            e = []
            check_probes(load(f), e)
            errors += [f"{f}: {x}" for x in e]
    elif len(argv) == 3 and argv[0] == "scheduler-config":
        cfg = scheduler_config(load(argv[1]), argv[2], errors)
        if cfg is not None and not errors:
            print(json.dumps(cfg, sort_keys=True))
    elif len(argv) == 2 and argv[0] == "render":
        import yaml

        yaml.safe_dump_all(render(argv[1]), sys.stdout, sort_keys=False)
        return 0
    elif len(argv) == 5 and argv[0] == "exec-probe":
        for o in load(argv[1]):
            if o.get("kind") in WORKLOAD_KINDS and o["metadata"]["name"] == argv[2]:
                for c in o["spec"]["template"]["spec"]["containers"]:
                    if c["name"] == argv[3]:
                        print(json.dumps(c.get(argv[4], {}).get("exec", {}).get("command")))
                        return 0
        errors.append(f"no container {argv[2]}/{argv[3]}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors:
        print("FAIL:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
