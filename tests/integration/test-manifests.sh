#!/usr/bin/env bash
# deploy/kubernetes-1.20 (deploy/kubernetes for the test environment's
# Kubernetes 1.20) as a user deploys it: the image set by a kustomization of
# the user's own (README, "Deploy"), rendered with `kubectl kustomize` (a
# kubectl of 1.21 or later: the k8s-testenv's 1.20 kustomize cannot read the
# overlay), and applied to the real kube-apiserver of scripts/k8s-testenv,
# client-side then server-side. On what the apiserver returns: every migkit
# container has the image set, requests and limits; the probe rules
# (test-manifests-rules.py); the extender runs as non-root; privileged only
# where needed. Without the k8s-testenv cache (scripts/k8s-testenv build) it
# checks the rendered objects and skips the apiserver part.
# tests/integration/test-manifests-static.sh checks the renderings further.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:?}"
if [ -z "${MIGKIT_K8S_TESTENV:-}" ] || [ "${MIGKIT_SKIP_K8S:-}" = 1 ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset or MIGKIT_SKIP_K8S=1 (no test kube-apiserver)"
  exit 0
fi
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-manifests.XXXXXX" 2>/dev/null || mktemp -d)
. "$MIGKIT_SOURCE_DIR/tests/integration/k8s-lib.sh"
cleanup() {
  k8s_stop_early
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $* ($SECONDS s)"; }
. "$MIGKIT_SOURCE_DIR/tests/integration/python3-lib.sh"
src=$MIGKIT_SOURCE_DIR/deploy/kubernetes
image=registry.example.com/migkit/migkit:9.9.9

# check_objects FILE: the workloads in FILE (JSON objects, or a List) have
# the image set, requests and limits, probes where they serve HTTP, and the
# security context they need and no more.
check_objects() {
  python3 - "$1" "$image" <<'EOF'
import json, sys
text, image = open(sys.argv[1]).read(), sys.argv[2]
objs, dec, i = [], json.JSONDecoder(), 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    o, i = dec.raw_decode(text, i)
    objs.extend(o.get("items", []) if o.get("kind") == "List" else [o])
errors = []
def err(msg):
    errors.append(msg)
workloads = [o for o in objs if o.get("kind") in ("DaemonSet", "Deployment")]
names = sorted(o["metadata"]["name"] for o in workloads)
want = ["migkit-device-plugin", "migkit-manager", "migkit-scheduler", "migkit-scheduler-node"]
if names != want:
    err(f"workloads {names}, want {want}")
# Who may be privileged (the probes: test-manifests-rules.py).
privileged_ok = {("migkit-manager", "migkit-manager"), ("migkit-scheduler-node", "agent")}
migkit_containers = 0
for w in workloads:
    wn = w["metadata"]["name"]
    pod = w["spec"]["template"]["spec"]
    psc = pod.get("securityContext", {})
    for c in pod["containers"] + pod.get("initContainers", []):
        key = (wn, c["name"])
        where = f"{wn}/{c['name']}"
        if "migkit" in c["image"].split("/")[-1]:
            migkit_containers += 1
            if c["image"] != image:
                err(f"{where}: image {c['image']}, want {image}")
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in res.get(kind, {}):
                    err(f"{where}: no {kind}.{r}")
        sc = c.get("securityContext", {})
        if sc.get("privileged") and key not in privileged_ok:
            err(f"{where}: privileged, and it need not be")
        if not sc.get("privileged") and sc.get("allowPrivilegeEscalation", True):
            err(f"{where}: allowPrivilegeEscalation is not false")
        if not sc.get("privileged") and "ALL" not in sc.get("capabilities", {}).get("drop", []):
            err(f"{where}: capabilities not dropped")
        if wn == "migkit-scheduler":
            nonroot = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            if not nonroot or not uid:
                err(f"{where}: not non-root (runAsNonRoot {nonroot}, runAsUser {uid})")
        if key == ("migkit-scheduler", "extender") and not sc.get("readOnlyRootFilesystem"):
            err(f"{where}: root filesystem not read-only")
# Soft slices: the node DaemonSet installs the library where the device
# plugin mounts it from (its default --vgpu-root), and the plugin sees that
# host directory at the same path (Allocate answers host paths).
for w in workloads:
    if w["metadata"]["name"] != "migkit-scheduler-node":
        continue
    pod = w["spec"]["template"]["spec"]
    vols = {v["name"]: v.get("hostPath", {}).get("path") for v in pod.get("volumes", [])}
    root = "/var/lib/migkit/vgpu"
    byname = {c["name"]: c for c in pod["containers"] + pod.get("initContainers", [])}
    for cn in ("install-vgpu", "device-plugin", "agent"):
        mounts = {m["mountPath"]: vols.get(m["name"]) for m in byname.get(cn, {}).get("volumeMounts", [])}
        if mounts.get(root) != root:
            err(f"migkit-scheduler-node/{cn}: host {root} not mounted at {root} ({mounts})")
    if root + "/libmigkit-vgpu.so" not in " ".join(byname.get("install-vgpu", {}).get("command", [])):
        err("migkit-scheduler-node/install-vgpu: does not install " + root + "/libmigkit-vgpu.so")
if migkit_containers != 6:
    err(f"{migkit_containers} migkit containers, want 6")
for e in errors:
    print("FAIL:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
EOF
}

cache=$("$MIGKIT_K8S_TESTENV" path)
apiserver=1
for b in kubectl kube-apiserver; do
  [ -x "$cache/bin/$b" ] || apiserver=
done
command -v etcd >/dev/null || apiserver= # Debian's etcd-server, not in the cache
# Rendering needs a kubectl of 1.21 or later (the system's).
kubectl=$(command -v kubectl || true)
minor=0
[ -z "$kubectl" ] || minor=$("$kubectl" version --client -o json 2>/dev/null |
  python3 -c 'import json,sys; print(int("".join(c for c in json.load(sys.stdin)["clientVersion"]["minor"] if c.isdigit())))' \
  2>/dev/null || echo 0)
if [ "$minor" -lt 21 ] || ! python3 -c 'import yaml' 2>/dev/null; then
  echo "SKIP: no kubectl 1.21 or later to render deploy/kubernetes-1.20, or no python3-yaml"
  exit 0
fi
# The apiserver comes up while the manifests render.
[ -z "$apiserver" ] || k8s_start_early "$tmp/k8s"

step "the image is set in kustomization.yaml only; newTag is the project version"
version=$(sed -n 's/^project(migkit VERSION \([0-9.]*\).*/\1/p' "$MIGKIT_SOURCE_DIR/CMakeLists.txt")
[ -n "$version" ] || fail "no project version in CMakeLists.txt"
grep -q "^    newTag: \"$version\"$" "$src/kustomization.yaml" || fail "kustomization.yaml newTag is not \"$version\""
bad=$(grep -n 'image: *migkit:' "$src"/*.yaml || true)
[ -z "$bad" ] || fail "a manifest pins migkit's tag itself (kustomization.yaml sets it): $bad"

step "set the image with a kustomization of our own (README), render with $("$kubectl" version --client 2>/dev/null | head -1 || true)"
cp -r "$MIGKIT_SOURCE_DIR/deploy" "$tmp/deploy"
mkdir -p "$tmp/mine"
cat >"$tmp/mine/kustomization.yaml" <<EOF
resources:
  - ../deploy/kubernetes-1.20
images:
  - name: migkit
    newName: ${image%:*}
    newTag: "${image##*:}"
EOF
"$kubectl" kustomize "$tmp/mine" >"$tmp/rendered.yaml" 2>"$tmp/err" || fail "kubectl kustomize: $(cat "$tmp/err")"
n=$(grep -c "image: $image\$" "$tmp/rendered.yaml" || true)
[ "$n" -ge 6 ] || fail "rendered: $n containers with image $image, want 6: $(grep 'image:' "$tmp/rendered.yaml")"
if grep -E 'image: *"?migkit' "$tmp/rendered.yaml"; then fail "rendered: a container kept the unset image"; fi
python3 "$MIGKIT_SOURCE_DIR/tests/integration/test-manifests-rules.py" probes "$tmp/rendered.yaml" || fail "probe rules"

if [ -z "$apiserver" ]; then
  python3 -c 'import json, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    print(json.dumps(d))' "$tmp/rendered.yaml" >"$tmp/objects.json"
  check_objects "$tmp/objects.json" || fail "rendered objects"
  echo "SKIP (apiserver part): $cache/bin is not built (run 'scripts/k8s-testenv build')"
  exit 0
fi

step "the test apiserver (started first)"
kubectl=$cache/bin/kubectl
k8s_env_early || fail "k8s-testenv start failed"
kc() { "$kubectl" --kubeconfig "$KUBECONFIG" --request-timeout=30s "$@"; }

step "apply everything, then apply it again server-side"
# For real, not --dry-run=server: this apiserver runs no controller and no
# kubelet, so nothing acts on the objects, and it answers the same objects,
# while kubectl 1.20's server dry runs took 24-27 s each here (5 and 3 s for
# the real ones). The namespace first: the namespaced objects need it.
kc apply -f "$tmp/deploy/kubernetes/namespace.yaml" >/dev/null || fail "create the namespace"
kc apply -o json -f "$tmp/rendered.yaml" >"$tmp/objects.json" 2>"$tmp/err" ||
  fail "kubectl apply -o json: $(cat "$tmp/err")"
# Server-side apply reads the whole configuration again (its list keys, field
# types): same values, so no conflict with the apply above.
kc apply --server-side -f "$tmp/rendered.yaml" >"$tmp/ssa.out" 2>&1 ||
  fail "kubectl apply --server-side: $(cat "$tmp/ssa.out")"
cat "$tmp/ssa.out"

step "what the apiserver accepted: images, resources, probes, security contexts"
check_objects "$tmp/objects.json" || fail "objects the apiserver accepted"
python3 "$MIGKIT_SOURCE_DIR/tests/integration/test-manifests-rules.py" probes "$tmp/objects.json" ||
  fail "probe rules on what the apiserver accepted"
echo "PASS"
