#!/usr/bin/env bash
# deploy/kubernetes as a user deploys it: the image set in one place
# (kustomization.yaml `images:`, what `kustomize edit set image` writes),
# rendered with `kubectl kustomize` (the k8s-testenv's kubectl 1.20), and
# applied to the real kube-apiserver of scripts/k8s-testenv with a
# server-side dry run. On what the apiserver returns: every migkit container
# has the image set, requests and limits; probes where the component serves
# HTTP; the extender runs as non-root; privileged only where needed.
# Without the k8s-testenv cache (scripts/k8s-testenv build) it renders with the
# system's kubectl, checks the rendered objects and skips the apiserver part.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:?}"
if [ -z "${MIGKIT_K8S_TESTENV:-}" ] || [ "${MIGKIT_SKIP_K8S:-}" = 1 ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset or MIGKIT_SKIP_K8S=1 (no test kube-apiserver)"
  exit 0
fi
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-manifests.XXXXXX" 2>/dev/null || mktemp -d)
cleanup() {
  "$MIGKIT_K8S_TESTENV" stop "$tmp/k8s" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }
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
# Containers that must have probes (they serve HTTP), and who may be privileged.
probed = {("migkit-scheduler", "extender"), ("migkit-scheduler", "kube-scheduler")}
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
        if key in probed:
            for p in ("readinessProbe", "livenessProbe"):
                if p not in c:
                    err(f"{where}: no {p}")
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
kubectl=$cache/bin/kubectl
apiserver=1
for b in kubectl kube-apiserver; do
  [ -x "$cache/bin/$b" ] || apiserver=
done
command -v etcd >/dev/null || apiserver= # Debian's etcd-server, not in the cache
if [ -z "$apiserver" ]; then
  # Without the testenv: render with the system's kubectl, check the objects as
  # rendered, and say that the apiserver part did not run.
  if command -v kubectl >/dev/null && python3 -c 'import yaml' 2>/dev/null; then
    kubectl=$(command -v kubectl)
  else
    echo "SKIP: $cache/bin is not built (run 'scripts/k8s-testenv build') and no kubectl + python3-yaml"
    exit 0
  fi
fi

step "the image is set in kustomization.yaml only; newTag is the project version"
version=$(sed -n 's/^project(migkit VERSION \([0-9.]*\).*/\1/p' "$MIGKIT_SOURCE_DIR/CMakeLists.txt")
[ -n "$version" ] || fail "no project version in CMakeLists.txt"
grep -q "^    newTag: \"$version\"$" "$src/kustomization.yaml" || fail "kustomization.yaml newTag is not \"$version\""
bad=$(grep -n 'image: *migkit:' "$src"/*.yaml || true)
[ -z "$bad" ] || fail "a manifest pins migkit's tag itself (kustomization.yaml sets it): $bad"

step "set the image as 'kustomize edit set image' does, render with $("$kubectl" version --client 2>/dev/null | head -1 || true)"
cp -r "$src" "$tmp/k"
if command -v kustomize >/dev/null; then
  (cd "$tmp/k" && kustomize edit set image "migkit=$image")
else
  python3 - "$tmp/k/kustomization.yaml" "${image%:*}" "${image##*:}" <<'EOF'
import re, sys
path, name, tag = sys.argv[1:]
text = open(path).read()
new = re.sub(r'(  - name: migkit\n    newName: )\S+(\n    newTag: )\S+', r'\g<1>%s\g<2>"%s"' % (name, tag), text)
if new == text:
    sys.exit("no images: entry for migkit in kustomization.yaml")
open(path, "w").write(new)
EOF
fi
"$kubectl" kustomize "$tmp/k" >"$tmp/rendered.yaml" 2>"$tmp/err" || fail "kubectl kustomize: $(cat "$tmp/err")"
n=$(grep -c "image: $image\$" "$tmp/rendered.yaml" || true)
[ "$n" -ge 6 ] || fail "rendered: $n containers with image $image, want 6: $(grep 'image:' "$tmp/rendered.yaml")"
if grep -E 'image: *"?migkit' "$tmp/rendered.yaml"; then fail "rendered: a container kept the unset image"; fi

if [ -z "$apiserver" ]; then
  python3 -c 'import json, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    print(json.dumps(d))' "$tmp/rendered.yaml" >"$tmp/objects.json"
  check_objects "$tmp/objects.json" || fail "rendered objects"
  echo "SKIP (apiserver part): $cache/bin is not built (run 'scripts/k8s-testenv build'); rendered with $kubectl"
  exit 0
fi

step "start the test apiserver"
envlines=$("$MIGKIT_K8S_TESTENV" start "$tmp/k8s" --no-build --owner-pid $$) || fail "k8s-testenv start failed"
eval "$envlines"
kc() { "$kubectl" --kubeconfig "$KUBECONFIG" --request-timeout=30s "$@"; }

step "server-side dry run of everything"
# The namespace for real: a dry run creates nothing, and the namespaced
# objects cannot be checked in a namespace that does not exist.
kc apply -f "$tmp/k/namespace.yaml" >/dev/null || fail "create the namespace"
kc apply --server-side --dry-run=server -f "$tmp/rendered.yaml" >"$tmp/ssa.out" 2>&1 ||
  fail "kubectl apply --server-side --dry-run=server: $(cat "$tmp/ssa.out")"
kc apply --dry-run=server -o json -f "$tmp/rendered.yaml" >"$tmp/objects.json" 2>"$tmp/err" ||
  fail "kubectl apply --dry-run=server -o json: $(cat "$tmp/err")"
cat "$tmp/ssa.out"

step "what the apiserver accepted: images, resources, probes, security contexts"
check_objects "$tmp/objects.json" || fail "objects the apiserver accepted"
echo "PASS"
