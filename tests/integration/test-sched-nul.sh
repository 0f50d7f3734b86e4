#!/usr/bin/env bash
# A NUL (\u0000) in a pod's annotation, which the kube-apiserver accepts,
# stops neither the node agent nor the extender (issue 27, finding 1). A
# stub apiserver (no Kubernetes needed) lists two pods bound to the node,
# one with a NUL in a foreign annotation and one with a NUL in
# migkit.io/mig-reservation. Before, `scheduler node --once` exited 1 and
# `scheduler serve` exited at start ("\u0000 is not allowed without
# JSON_ALLOW_NUL"). Now the agent's pass succeeds and publishes the
# inventory, saying the malformed pod; the extender serves, counts the
# malformed pod, and refuses in /filter only a pod whose annotation we read
# holds a NUL (naming the field) while it filters one with a NUL elsewhere.
set -euo pipefail
: "${MIGKIT_BIN:?}"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sched-nul.XXXXXX" 2>/dev/null || mktemp -d)
# shellcheck source=tests/integration/stub-apiserver.sh
. "$(dirname "$0")/stub-apiserver.sh"
stub_api_pid= ext_pid=
trap 'for p in $ext_pid $stub_api_pid; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in ag.log ext.log api.log; do echo "--- $f:" >&2; tail -n 20 "$tmp/$f" >&2 2>/dev/null || true; done
  exit 1
}
cat >"$tmp/pods.json" <<'EOF'
{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [
 {"metadata": {"name": "nul-foreign", "namespace": "default", "uid": "u1", "resourceVersion": "3",
               "annotations": {"note": "a\u0000b"}},
  "spec": {"nodeName": "stub", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}},
 {"metadata": {"name": "nul-ours", "namespace": "default", "uid": "u2", "resourceVersion": "4",
               "annotations": {"migkit.io/mig-reservation": "x\u0000y"}},
  "spec": {"nodeName": "stub", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}]}
EOF
stub_apiserver_start "$tmp" --pods "$tmp/pods.json" --node stub --patches "$tmp/patches.jsonl" || exit 1
export MIGKIT_SIM_STATE=$tmp/sim.json

"$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n stub --kubeconfig "$tmp/kubeconfig" --once \
  >"$tmp/ag.log" 2>&1 || fail "scheduler node --once failed"
grep -q "nul-ours.*migkit.io/mig-reservation holds a NUL byte" "$tmp/ag.log" || fail "the malformed pod was not said"
grep -q '"migkit.io/mig-inventory"' "$tmp/patches.jsonl" || fail "no inventory published"
echo "scheduler node --once: ok, $(grep -c . "$tmp/patches.jsonl") patch(es)"

"$MIGKIT_BIN" scheduler serve --kubeconfig "$tmp/kubeconfig" --port 0 >"$tmp/ext.out" 2>"$tmp/ext.log" &
ext_pid=$!
for ((i = 0; i < 100; i++)); do grep -q "^listening on port " "$tmp/ext.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^listening on port //p' "$tmp/ext.out")
[ -n "$port" ] || fail "the extender did not start"
for ((i = 0; i < 50; i++)); do
  n=$(curl -sf "http://127.0.0.1:$port/metrics" | sed -n 's/^migkit_scheduler_malformed_objects_total{kind="pod"} //p')
  [ "${n:-0}" -ge 1 ] && break
  sleep 0.1
done
[ "${n:-0}" -ge 1 ] || fail "the malformed pod was not counted: '$n'"
filter() { # ANNOTATIONS-JSON: the /filter answer for a GPU pod with those annotations
  curl -sf --data '{"Pod":{"metadata":{"name":"p","namespace":"default","uid":"u9","annotations":'"$1"'},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"4000"}}}]}},"NodeNames":["stub"]}' \
    "http://127.0.0.1:$port/filter"
}
out=$(filter '{"nvidia.com/vgpu-mode":"mig\u0000x"}') || fail "filter"
grep -q '"Error":"pod: metadata.annotations.nvidia.com/vgpu-mode holds a NUL byte' <<<"$out" ||
  fail "a pod with a NUL in an annotation we read: $out"
out=$(filter '{"note":"a\u0000b"}') || fail "filter"
grep -q '"FailedNodes":{"stub":' <<<"$out" && ! grep -q '"Error":"[^"]' <<<"$out" ||
  fail "a pod with a NUL in a foreign annotation was not filtered as usual: $out"
kill -0 "$ext_pid" 2>/dev/null || fail "the extender exited"
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || fail "the extender is not ready"
echo "ok"
