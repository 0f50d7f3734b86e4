#!/usr/bin/env bash
# Hostile data from the cluster never stops the MIG manager (issue 27,
# finding 1), on the real kube-apiserver of scripts/k8s-testenv. The
# apiserver accepts a NUL (\u0000) in an annotation value; before, a pod on
# the node holding one made every reconfiguration fail ("Cannot list the pods
# of node"), and a NUL in the node's annotations made the manager exit. Here:
# with such a pod on the node the manager applies a selected config (success,
# layout applied); then with such an annotation on the node too it stays up
# and applies another.
#
# ctest sets the paths it needs; run directly, it takes them from the
# checkout it is in and its build/ directory.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${MIGKIT_BIN:=$MIGKIT_SOURCE_DIR/build/migkit}"
: "${MIGKIT_K8S_TESTENV:=$MIGKIT_SOURCE_DIR/scripts/k8s-testenv}"
[ -x "$MIGKIT_BIN" ] || { echo "FAIL: no $MIGKIT_BIN: build first (cmake --build build)" >&2; exit 1; }
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-manager-hostile.XXXXXX")
mgr_pid=
cleanup() {
  if [ -n "$mgr_pid" ]; then kill "$mgr_pid" 2>/dev/null || true; wait "$mgr_pid" 2>/dev/null || true; fi
  "$MIGKIT_K8S_TESTENV" stop "$tmp/k8s" >/dev/null 2>&1 || true
  [ -n "${MIGKIT_KEEP_TEST_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- manager log (last 40 lines):" >&2
  tail -n 40 "$tmp/mgr.log" >&2 2>/dev/null || true
  exit 1
}
step() { echo "--- $* ($SECONDS s)"; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIGKIT_SIM_FAULTS CONFIG_FILE NODE_NAME WITH_REBOOT WITH_SHUTDOWN_HOST_GPU_CLIENTS POD_NAMESPACE
export MIGKIT_SIM_STATE=$tmp/sim.json

"$MIGKIT_K8S_TESTENV" build >/dev/null || fail "k8s-testenv build failed"
envlines=$("$MIGKIT_K8S_TESTENV" start "$tmp/k8s" --owner-pid $$) || fail "k8s-testenv start failed"
eval "$envlines"
kc() { "$MIGKIT_K8S_KUBECTL" "$@"; }
api() { # METHOD PATH [curl args...]
  curl -sS --cacert "$MIGKIT_K8S_CA" -H "Authorization: Bearer $MIGKIT_K8S_TOKEN" -X "$1" \
    "$MIGKIT_K8S_SERVER$2" "${@:3}"
}
node=gpu-node-1
cfg=$MIGKIT_SOURCE_DIR/examples/config.yaml
state() { kc get node "$node" -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}'; }
wait_for() { # STATE SECONDS
  for ((i = 0; i < $2 * 5; i++)); do
    [ "$(state)" = "$1" ] && return 0
    [ "$(state)" != failed ] || fail "state is 'failed': $(kc get node "$node" -o jsonpath='{.metadata.annotations.migkit\.io/mig\.config\.failure}')"
    kill -0 "$mgr_pid" 2>/dev/null || fail "the manager exited"
    sleep 0.2
  done
  fail "state is '$(state)', want '$1' after $2 s"
}

step "a pod on the node with a NUL in an annotation"
code=$(api POST /api/v1/nodes -H 'Content-Type: application/json' -o "$tmp/post.out" -w '%{http_code}' \
  --data '{"apiVersion":"v1","kind":"Node","metadata":{"name":"'"$node"'","labels":{"nvidia.com/gpu.deploy.device-plugin":"true"}}}')
[ "$code" = 201 ] || fail "node: HTTP $code $(cat "$tmp/post.out")"
code=$(api POST /api/v1/namespaces/default/pods -H 'Content-Type: application/json' -o "$tmp/post.out" -w '%{http_code}' \
  --data '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nul-pod","annotations":{"note":"x\u0000y"}},"spec":{"nodeName":"'"$node"'","containers":[{"name":"c","image":"example.invalid/none:1"}]}}')
[ "$code" = 201 ] || fail "pod: HTTP $code $(cat "$tmp/post.out")"

step "the manager applies all-balanced"
"$MIGKIT_BIN" --simulate dgx-a100 manager -n "$node" -f "$cfg" -m "$tmp/host" \
  --pod-wait-timeout 8 --backoff-initial 10 --backoff-max 20 >>"$tmp/mgr.log" 2>&1 &
mgr_pid=$!
kc label node "$node" --overwrite nvidia.com/mig.config=all-balanced >/dev/null || fail "labelling the node"
wait_for success 40
"$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-balanced >/dev/null || fail "all-balanced not applied"

step "a NUL in a node annotation too: all-1g.5gb"
api PATCH "/api/v1/nodes/$node" -H 'Content-Type: application/merge-patch+json' -o /dev/null -f \
  --data '{"metadata":{"annotations":{"note":"a\u0000b"}}}' || fail "patching the node"
sleep 1
kill -0 "$mgr_pid" 2>/dev/null || fail "the manager exited"
kc label node "$node" --overwrite nvidia.com/mig.config=all-1g.5gb >/dev/null || fail "labelling the node"
for ((i = 0; i < 200; i++)); do
  "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-1g.5gb >/dev/null 2>&1 && break
  kill -0 "$mgr_pid" 2>/dev/null || fail "the manager exited"
  sleep 0.2
done
"$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-1g.5gb >/dev/null || fail "all-1g.5gb not applied"
wait_for success 20
kill -0 "$mgr_pid" 2>/dev/null || fail "the manager exited"
echo "ok"
