#!/usr/bin/env bash
# deploy/kubernetes* as `kubectl kustomize` renders them, without a cluster:
#   - each kustomization renders (deploy/kubernetes for current Kubernetes,
#     deploy/kubernetes-1.20 for our test environment, deploy/kubernetes-mps),
#     with no deprecated kustomize field (kubectl warns of them);
#   - the probe rules (test-manifests-rules.py probes): every long-running
#     container probed, no loopback httpGet/tcpSocket host without
#     hostNetwork, no probe of a port served on loopback only;
#   - the kube-scheduler configuration: v1 by default and v1beta1 in the 1.20
#     overlay, each with only its version's fields, a kube-scheduler image that
#     reads it, and the same settings in both;
#   - the probes do what they say: the extender's exec probes run (as the
#     kubelet runs them, inside the container) against `migkit scheduler
#     serve`, the device plugin's against a serving plugin, the manager's
#     against the simulator; each fails when its daemon is not there;
#   - README's "deploy from your registry" lines, run as typed (with
#     `kubectl apply -k` rendered by `kubectl kustomize`), give every migkit
#     container README's one image path;
#   - docs/deploy.md says what the deploy files do (runAsUser, the build
#     combinations, the lintian overrides).
# Renders with a kubectl of 1.21 or later where there is one (its kustomize
# reads the overlays), else with test-manifests-rules.py's renderer; needs
# python3-yaml (scripts/install-deps), else SKIP.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:?}" "${MIGKIT_BIN:?}"
tmp=$(mktemp -d /tmp/mk-manifests.XXXXXX) # short: Unix socket paths
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $* ($SECONDS s)"; }
src=$MIGKIT_SOURCE_DIR
rules=$src/tests/integration/test-manifests-rules.py
. "$src/tests/integration/stub-apiserver.sh"
. "$src/tests/integration/python3-lib.sh"

python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml is not installed (scripts/install-deps)"; exit 0; }
# The newest kubectl at hand: the system's, or the k8s-testenv's (1.20, whose
# kustomize v2.0.3 reads neither directories under resources nor patches).
kubectl=
for k in "$(command -v kubectl || true)" "$("${MIGKIT_K8S_TESTENV:-/nonexistent}" path 2>/dev/null || true)/bin/kubectl"; do
  [ -x "$k" ] || continue
  minor=$("$k" version --client -o json 2>/dev/null |
    python3 -c 'import json,sys; print(int("".join(c for c in json.load(sys.stdin)["clientVersion"]["minor"] if c.isdigit())))' \
    2>/dev/null || echo 0)
  if [ "$minor" -ge 21 ]; then kubectl=$k; break; fi
done
# render DIR: `kubectl kustomize DIR`, or without a kubectl of 1.21 or later
# (Debian's kubernetes-client is 1.20) test-manifests-rules.py's renderer of
# the fields these kustomizations use (it refuses any other).
if [ -n "$kubectl" ]; then
  echo "rendering with $kubectl ($("$kubectl" version --client 2>/dev/null | head -1))"
  render() { "$kubectl" kustomize "$1"; }
else
  echo "note: no kubectl 1.21 or later: rendering with test-manifests-rules.py render"
  render() { python3 "$rules" render "$1"; }
fi

step "every kustomization renders, with no deprecated field"
cp -r "$src/deploy" "$tmp/deploy"
for d in kubernetes kubernetes-1.20 kubernetes-mps; do
  render "$tmp/deploy/$d" >"$tmp/$d.yaml" 2>"$tmp/$d.err" || fail "rendering deploy/$d: $(cat "$tmp/$d.err")"
  if grep -i 'deprecated' "$tmp/$d.err"; then fail "deploy/$d uses deprecated kustomize fields"; fi
  for f in bases patchesStrategicMerge patchesJson6902 vars commonLabels; do
    grep -q "^$f:" "$tmp/deploy/$d/kustomization.yaml" && fail "deploy/$d/kustomization.yaml uses the deprecated '$f'"
  done
  echo "deploy/$d: $(grep -c '^kind:' "$tmp/$d.yaml") objects"
done
# As JSON, read faster by the checks below (libyaml's loader where there is one).
python3 -c '
import json, sys, yaml
for f in sys.argv[1:]:
    with open(f + ".yaml") as y:
        json.dump([d for d in yaml.load_all(y, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d],
                  open(f + ".json", "w"))' \
  "$tmp/kubernetes" "$tmp/kubernetes-1.20" "$tmp/kubernetes-mps"
python3 -c '
import json, sys
for d in json.load(open(sys.argv[1])):
    if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "migkit-device-plugin":
        s = d["spec"]["template"]["spec"]
        sys.exit(0 if s.get("hostPID") and s["containers"][0]["securityContext"].get("privileged") else 1)
sys.exit(1)' "$tmp/kubernetes-mps.json" || fail "deploy/kubernetes-mps: the device plugin patch is not applied"

step "probe rules"
python3 "$rules" probes "$tmp/kubernetes.json" "$tmp/kubernetes-1.20.json" "$tmp/kubernetes-mps.json" ||
  fail "probe rules"
# The rules can fail: the probes this test replaced (httpGet to 127.0.0.1 in
# a pod without hostNetwork) and a container with none.
python3 - "$tmp/kubernetes.json" "$tmp/bad.yaml" <<'EOF'
import json, sys, yaml
docs = json.load(open(sys.argv[1]))
for d in docs:
    if d["kind"] == "Deployment" and d["metadata"]["name"] == "migkit-scheduler":
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "extender":
                c["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": 8888, "host": "127.0.0.1"}}
                del c["livenessProbe"]
yaml.dump_all(docs, open(sys.argv[2], "w"), Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
EOF
python3 "$rules" probes "$tmp/bad.yaml" 2>"$tmp/bad.err" && fail "the probe rules pass a loopback httpGet"
grep -q 'readinessProbe httpGet host 127.0.0.1 without hostNetwork' "$tmp/bad.err" || fail "rules: $(cat "$tmp/bad.err")"
echo "ok: the rules refuse an httpGet probe of 127.0.0.1 ($(wc -l <"$tmp/bad.err") findings)"

step "kube-scheduler configuration: v1 (current), v1beta1 (1.20), same settings"
python3 "$rules" scheduler-config "$tmp/kubernetes.json" v1 >"$tmp/v1.json" || fail "deploy/kubernetes's configuration"
python3 "$rules" scheduler-config "$tmp/kubernetes-1.20.json" v1beta1 >"$tmp/v1beta1.json" ||
  fail "deploy/kubernetes-1.20's configuration"
cmp -s "$tmp/v1.json" "$tmp/v1beta1.json" ||
  fail "the v1 and v1beta1 configurations differ: $(diff "$tmp/v1.json" "$tmp/v1beta1.json")"
# A field v1 dropped (v1beta3 removed the bind addresses) is refused.
python3 - "$tmp/kubernetes.json" "$tmp/bad.json" <<'EOF'
import json, sys
objs = json.load(open(sys.argv[1]))
for o in objs:
    if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "migkit-scheduler-config":
        o["data"]["kube-scheduler.yaml"] += "healthzBindAddress: 0.0.0.0:10251\n"
json.dump(objs, open(sys.argv[2], "w"))
EOF
python3 "$rules" scheduler-config "$tmp/bad.json" v1 >/dev/null 2>"$tmp/bad.err" && fail "v1 with healthzBindAddress passes"
grep -q 'healthzBindAddress: no such field' "$tmp/bad.err" || fail "rules: $(cat "$tmp/bad.err")"
# The extender is where the configuration says, and listens there.
grep -q '"urlPrefix": "http://127.0.0.1:8888"' "$tmp/v1.json" || fail "urlPrefix is not http://127.0.0.1:8888: $(cat "$tmp/v1.json")"
grep -q 'command: \["migkit", "scheduler", "serve", "--address", "127.0.0.1", "--port", "8888"\]' \
  "$src/deploy/kubernetes/scheduler.yaml" || fail "the extender does not listen on 127.0.0.1:8888"
echo "ok: v1 and v1beta1 hold the same settings, each only its own fields"

step "the extender's exec probes against migkit scheduler serve"
probe_cmd() { python3 "$rules" exec-probe "$tmp/kubernetes.json" "$@"; }
# probe_argv VAR JSON: array VAR is the command of JSON (a list), decoded once:
# the polls below run it without a python each.
probe_argv() {
  mapfile -d '' -t "$1" < <(python3 -c 'import json,sys; sys.stdout.write("".join(a + "\0" for a in json.loads(sys.argv[1])))' "$2")
}
# run_probe VAR FROM TO: runs the command of array VAR with FROM replaced by TO
# in every argument, output dropped, 5 s at most (then exit 124).
run_probe() {
  local -n argv=$1
  timeout 5 "${argv[@]//"$2"/"$3"}" >/dev/null 2>&1
}
ready=$(probe_cmd migkit-scheduler extender readinessProbe)
live=$(probe_cmd migkit-scheduler extender livenessProbe)
[ "$ready" != null ] && [ "$live" != null ] || fail "the extender's probes are not exec probes"
probe_argv ready_argv "$ready"
probe_argv live_argv "$live"
probe_argv bad_argv "${ready//\/readyz/\/nonexistent}"
grep -q '127.0.0.1/8888' <<<"$ready$live" || fail "the extender's probes do not ask 127.0.0.1:8888: $ready $live"
stub_apiserver_start "$tmp" || fail "the stub apiserver did not start: $(cat "$tmp/api.log")"
pids+=("$stub_api_pid")
"$MIGKIT_BIN" scheduler serve --kubeconfig "$tmp/kubeconfig" --address 127.0.0.1 --port 0 \
  >"$tmp/ext.port" 2>"$tmp/ext.log" &
ext_pid=$!
pids+=("$ext_pid")
for _ in $(seq 100); do [ -s "$tmp/ext.port" ] && break; sleep 0.1; done
port=$(awk 'NR == 1 {print $NF}' "$tmp/ext.port")
[ -n "$port" ] || fail "the extender printed no port: $(cat "$tmp/ext.log")"
rc=1
for _ in $(seq 100); do rc=0; run_probe ready_argv 127.0.0.1/8888 "127.0.0.1/$port" || rc=$?; [ "$rc" = 0 ] && break; sleep 0.1; done
[ "$rc" = 0 ] || fail "the extender's readiness probe fails against a ready extender (exit $rc): $(tail -3 "$tmp/ext.log")"
run_probe live_argv 127.0.0.1/8888 "127.0.0.1/$port" || fail "the extender's liveness probe fails"
# The readiness probe of a path the extender does not serve must fail.
run_probe bad_argv 127.0.0.1/8888 "127.0.0.1/$port" && fail "the probe passes on a 404"
kill "$ext_pid"; wait "$ext_pid" 2>/dev/null || true
run_probe live_argv 127.0.0.1/8888 "127.0.0.1/$port" && fail "the liveness probe passes with no extender"
echo "ok: readiness and liveness pass against the extender, fail on a 404 and with none"

step "the device plugin's readiness probe against a serving plugin"
dp_probe=$(probe_cmd migkit-device-plugin device-plugin readinessProbe)
[ "$dp_probe" != null ] || fail "the device plugin's readiness probe is not an exec probe"
probe_argv dp_argv "$dp_probe"
[ "$(probe_cmd migkit-scheduler-node device-plugin readinessProbe)" = "$dp_probe" ] ||
  fail "the dynamic device plugin's readiness probe differs from the device plugin's"
mkdir -p "$tmp/dp"
run_probe dp_argv /var/lib/kubelet/device-plugins "$tmp/dp" && fail "the device plugin's probe passes with no plugin"
MIGKIT_SIM_STATE=$tmp/dgx-a100.json DEVICE_PLUGIN_PATH=$tmp/dp KUBELET_SOCKET= \
  "$MIGKIT_BIN" --simulate dgx-a100 device-plugin --labels none >"$tmp/dp.log" 2>&1 &
dp_pid=$!
pids+=("$dp_pid")
rc=1
for _ in $(seq 300); do rc=0; run_probe dp_argv /var/lib/kubelet/device-plugins "$tmp/dp" || rc=$?; [ "$rc" = 0 ] && break; sleep 0.1; done
[ "$rc" = 0 ] || fail "the device plugin's probe fails against a serving plugin: $(ls "$tmp/dp"; tail -3 "$tmp/dp.log")"
kill "$dp_pid"; wait "$dp_pid" 2>/dev/null || true
run_probe dp_argv /var/lib/kubelet/device-plugins "$tmp/dp" && fail "the probe passes after the plugin stopped"
echo "ok: passes while the plugin serves its socket, fails before and after"

step "the manager's readiness probe"
m_probe=$(probe_cmd migkit-manager migkit-manager readinessProbe)
[ "$m_probe" != null ] || fail "the manager's readiness probe is not an exec probe"
probe_argv m_argv "$m_probe"
m_sim=("$MIGKIT_BIN" --simulate dgx-a100 "${m_argv[@]:1}")
MIGKIT_SIM_STATE=$tmp/dgx-a100.json run_probe m_sim x x || fail "the manager's probe fails on a simulated DGX A100: ${m_sim[*]}"
m_none=("$MIGKIT_BIN" "${m_argv[@]:1}")
MIGKIT_NVML_LIB=$tmp/none.so run_probe m_none x x && fail "the manager's probe passes without NVML"
echo "ok: $m_probe passes with GPUs, fails without NVML"

step "README: the registry lines as typed, one image path"
readme=$src/README.md
block=$(awk '/kubectl apply -k my-migkit/ {print; exit} f {print} /^    mkdir -p my-migkit/ {f=1; print}' "$readme" |
  sed 's/^    //')
[ -n "$block" ] || fail "README has no 'mkdir -p my-migkit ... kubectl apply -k my-migkit' block"
grep -q 'kustomize edit' "$readme" && fail "README still says 'kustomize edit' (Debian ships no kustomize)"
version=$(sed -n 's/^project(migkit VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
(
  cd "$tmp"
  # kubectl apply -k DIR, rendered instead of applied.
  kubectl() { [ "$1 $2" = "apply -k" ] || exit 3; render "$3" >"$tmp/readme.yaml"; }
  eval "$block"
) || fail "README's lines failed"
images=$(python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] in ("DaemonSet", "Deployment"):
        s = d["spec"]["template"]["spec"]
        for c in s["containers"] + s.get("initContainers", []):
            if "kube-scheduler" not in c["image"]:
                print(c["image"])' "$tmp/readme.yaml" | sort | uniq -c)
want=registry.example.com/migkit/migkit:$version
[ "$(awk '{print $2}' <<<"$images")" = "$want" ] || fail "README's rendering: images $images, want only $want"
n=$(awk '{print $1}' <<<"$images")
[ "$n" -ge 6 ] || fail "README's rendering: $n migkit containers, want 6 or more"
# Every other place README names the pushed image says the same path.
grep -q "docker://$want" "$readme" || fail "README's skopeo copy does not push to $want"
grep -q '"repository": "registry.example.com/migkit", "image": "migkit", "version": "'"$version"'"' "$readme" ||
  fail "README's ClusterPolicy patch does not name $want"
grep -q "^    newTag: \"$version\"$" "$src/deploy/kubernetes/kustomization.yaml" ||
  fail "deploy/kubernetes/kustomization.yaml newTag is not \"$version\""
echo "ok: $n migkit containers with $want"

step "docs/deploy.md says what the deploy files do"
deploydoc=$src/docs/deploy.md
uid=$(sed -n 's/^migkit:x:\([0-9]*\):[0-9]*:.*/\1/p' "$src/deploy/image/finish-rootfs" | head -1)
[ -n "$uid" ] || fail "deploy/image/finish-rootfs writes no user migkit"
grep -q "^        runAsUser: $uid$" "$src/deploy/kubernetes/scheduler.yaml" ||
  fail "scheduler.yaml's runAsUser is not the image's user migkit ($uid): $(grep runAsUser "$src/deploy/kubernetes/scheduler.yaml")"
grep -q "runAsUser: $uid\` in \`deploy/kubernetes/scheduler.yaml\`" "$deploydoc" ||
  fail "docs/deploy.md does not say runAsUser $uid as the manifest does"
ccs=$(sed -n 's/^  for cc in \(.*\); do$/\1/p' "$src/scripts/build-matrix" | wc -w)
types=$(sed -n 's/^    for type in \(.*\); do .*/\1/p' "$src/scripts/build-matrix" | wc -w)
combos=$((ccs * types))
# MIGKIT_MATRIX_SKIP=a,b or ="a b" (build-matrix reads a space-separated list).
skipped=$(sed -n 's/^MIGKIT_MATRIX_SKIP=\("[^"]*"\|[^ "]*\) scripts\/build-matrix$/\1/p' "$src/scripts/test" |
  tr ',"' '  ' | wc -w)
[ "$combos" -gt 0 ] || fail "cannot count scripts/build-matrix's combinations"
grep -q "builds the $combos combinations" "$deploydoc" || fail "docs/deploy.md does not say build-matrix builds $combos combinations"
grep -q "$((combos - skipped)) of its $combos combinations" "$deploydoc" ||
  fail "docs/deploy.md does not say scripts/test builds $((combos - skipped)) of the $combos combinations"
if grep -q 'share/man/man1' "$src/CMakeLists.txt" && grep -qi 'manual page is still to write' "$deploydoc"; then
  fail "docs/deploy.md says the manual page is still to write; migkit(1) ships"
fi
for f in "$src"/deploy/debian/lintian-overrides*; do
  while read -r line; do
    tag=$(awk -F': ' '{print $2}' <<<"$line" | awk '{print $1}')
    grep -q "| \`$tag\`" "$deploydoc" || fail "docs/deploy.md's lintian table lacks $tag ($(basename "$f"))"
  done < <(grep -v '^#' "$f" | grep .)
done
echo "ok: runAsUser $uid, $combos combinations ($((combos - skipped)) in scripts/test), the lintian overrides explained"
echo PASS
