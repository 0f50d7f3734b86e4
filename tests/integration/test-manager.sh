#!/usr/bin/env bash
# `migkit manager` end to end against a real kube-apiserver (scripts/k8s-testenv)
# and a simulated dgx-a100: label changes drive pending -> success with the
# layout applied and the GPU components' labels restored exactly; an
# impossible config fails with nothing touched; a GPU pod that never leaves
# makes the bounded wait time out (failed, labels restored) and the retry
# with backoff succeeds once it is gone; a manager killed mid-change is
# finished by the next one; an apiserver crash in the middle of a change,
# after an etcd compaction, is survived; a NUL in the annotations of a pod or
# the node stops nothing (issue 27); the deploy/kubernetes manifests apply and
# their ServiceAccount may do what the manager does, and no more.
#
# No fixed wait stands for an event: each step waits (bounded) for the log
# line, label or state it needs. The manager's short test timings
# (--pod-wait-timeout, --backoff-*) keep its retries quick; a state the
# manager holds only for a moment is read from the node's watched history
# (node_history), so a loaded machine cannot miss it.
#
# ctest sets the paths it needs (ctest --test-dir build -R test-manager); run
# directly, it takes them from the checkout it is in and its build/ directory.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${MIGKIT_BIN:=$MIGKIT_SOURCE_DIR/build/migkit}" "${MIGKIT_SIM_BIN:=$MIGKIT_SOURCE_DIR/build/sim/bin/migkit-sim}"
: "${MIGKIT_K8S_TESTENV:=$MIGKIT_SOURCE_DIR/scripts/k8s-testenv}"
[ -x "$MIGKIT_BIN" ] || { echo "FAIL: no $MIGKIT_BIN: build first (cmake --build build)" >&2; exit 1; }
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-manager.XXXXXX")
mgr_pid=
pt_pid=
hist_pid=
h_pid=
cleanup() {
  for p in $mgr_pid $pt_pid $hist_pid $h_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "$MIGKIT_K8S_TESTENV" stop "$tmp/k8s" >/dev/null 2>&1 || true
  [ -n "${MIGKIT_KEEP_TEST_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- manager log (last 60 lines):" >&2
  tail -n 60 "$tmp/mgr.log" >&2 2>/dev/null || true
  exit 1
}
step() { echo "--- $* ($SECONDS s)"; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIGKIT_SIM_FAULTS CONFIG_FILE NODE_NAME WITH_REBOOT WITH_SHUTDOWN_HOST_GPU_CLIENTS POD_NAMESPACE
export MIGKIT_SIM_STATE=$tmp/sim.json

"$MIGKIT_K8S_TESTENV" build >/dev/null || fail "k8s-testenv build failed"
# No watch cache: watches read etcd, so a compaction makes a resumed watch see 410 Gone.
envlines=$("$MIGKIT_K8S_TESTENV" start "$tmp/k8s" --owner-pid $$ -- --watch-cache=false) ||
  fail "k8s-testenv start failed"
eval "$envlines"
kc() { "$MIGKIT_K8S_KUBECTL" "$@"; }
mk() { "$MIGKIT_BIN" -q --simulate dgx-a100 "$@"; }

node=gpu-node-1
cfg=$tmp/config.yaml
cat >"$cfg" <<'YAML'
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  all-balanced-again:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
  first-1g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [1, 2, 3, 4, 5, 6, 7]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
  impossible:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 8
YAML

kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $node
  labels:
    nvidia.com/gpu.deploy.device-plugin: "true"
    nvidia.com/gpu.deploy.dcgm-exporter: "true"
    nvidia.com/gpu.deploy.gpu-feature-discovery: "false"
    nvidia.com/gpu.deploy.mig-manager: "true"
EOF

# The node's state, deploy labels (sorted, without their prefix) and the
# paused-labels annotation, one line: a kubectl go-template, no interpreter
# started per poll.
view_tpl='state={{with .metadata.labels}}{{or (index . "nvidia.com/mig.config.state") "-"}}{{else}}-{{end}}'
# shellcheck disable=SC2016  # a template, not shell
view_tpl+=' deploy={{$s := ""}}{{range $k, $v := .metadata.labels}}{{if eq (printf "%.22s" $k) "nvidia.com/gpu.deploy."}}'
# shellcheck disable=SC2016
view_tpl+='{{$s}}{{slice $k 22}}={{$v}}{{$s = ","}}{{end}}{{end}}'
view_tpl+=' annotation={{with .metadata.annotations}}{{or (index . "migkit.io/paused-labels") "-"}}{{else}}-{{end}}{{"\n"}}'
node_view() { kc get node "$node" -o go-template="$view_tpl"; }
restored="deploy=dcgm-exporter=true,device-plugin=true,gpu-feature-discovery=false,mig-manager=true annotation=-"
paused="deploy=dcgm-exporter=paused-for-mig-change,device-plugin=paused-for-mig-change,gpu-feature-discovery=false,mig-manager=true"
state() { kc get node "$node" -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}'; }
# wait_for STATE SECONDS: the state label reaches STATE.
wait_for() {
  local want=$1 n=$(($2 * 5))
  for _ in $(seq "$n"); do
    [ "$(state)" = "$want" ] && return 0
    sleep 0.2
  done
  fail "state is '$(state)', want '$want' after $2 s; node: $(node_view)"
}
select_config() { kc label node "$node" --overwrite "nvidia.com/mig.config=$1" >/dev/null; }
events() {
  kc get events -n default --field-selector "involvedObject.name=$node" -o jsonpath='{range .items[*]}{.reason}{"\n"}{end}'
}
# wait_log TEXT SECONDS [AFTER]: a line of the manager's log after its line
# AFTER (default 0) holds TEXT.
wait_log() {
  for _ in $(seq $(($2 * 5))); do tail -n +$((${3:-0} + 1)) "$tmp/mgr.log" | grep -Fq -- "$1" && return 0; sleep 0.2; done
  fail "no '$1' in the manager's log (after line ${3:-0}) within $2 s"
}
# Every version of the node, one node_view line each, as a watch delivers
# them (kubectl get -w: the node, then each change from its version on).
node_history() {
  # kubectl itself in the background (not kc, a function): $! is kubectl.
  "$MIGKIT_K8S_KUBECTL" get node "$node" -w -o go-template="$view_tpl" >"$tmp/history" 2>&1 &
  hist_pid=$!
  for _ in $(seq 150); do [ -s "$tmp/history" ] && return 0; sleep 0.2; done
  fail "the node watch printed nothing: $(cat "$tmp/history")"
}
# history_wait GLOB SECONDS AFTER: the number of the first line after line
# AFTER of the history that matches GLOB.
history_wait() {
  local n l
  for _ in $(seq $(($2 * 5))); do
    n=0
    while IFS= read -r l; do
      n=$((n + 1))
      # shellcheck disable=SC2053
      [ "$n" -gt "$3" ] && [[ $l == $1 ]] && { echo "$n"; return 0; }
    done <"$tmp/history"
    sleep 0.2
  done
  fail "no node version '$1' after line $3 within $2 s; history:"$'\n'"$(cat "$tmp/history")"
}
# start_manager [FLAG...]: the manager of $node, its output appended to mgr.log.
start_manager() {
  "$MIGKIT_BIN" --simulate dgx-a100 --debug-areas k8s manager -n "$node" -f "$cfg" -m "$tmp/host" "$@" \
    >>"$tmp/mgr.log" 2>&1 &
  mgr_pid=$!
}
expect_restored() {
  local v; v=$(node_view)
  [ "$v" = "state=$1 $restored" ] || fail "$2: node is '$v', want 'state=$1 $restored'"
}

step "usage: -n is required"
set +e; "$MIGKIT_BIN" manager -f "$cfg" >"$tmp/out" 2>&1; rc=$?; set -e
[ "$rc" = 2 ] && grep -q 'invalid -n <node-name> flag' "$tmp/out" || fail "no -n: exit $rc: $(cat "$tmp/out")"

step "a node that does not exist (yet): said once, then waited for"
"$MIGKIT_BIN" --simulate dgx-a100 manager -n ghost-node -f "$cfg" -m "$tmp/host" >"$tmp/ghost.log" 2>&1 &
ghost_pid=$!
for _ in $(seq 100); do grep -q "Node 'ghost-node' does not exist yet" "$tmp/ghost.log" && break; sleep 0.2; done
kill "$ghost_pid"; wait "$ghost_pid" 2>/dev/null || true
grep -q "Node 'ghost-node' does not exist yet: waiting for it" "$tmp/ghost.log" ||
  fail "no 'does not exist yet': $(cat "$tmp/ghost.log")"

step "no label: nothing happens"
# Quick retries (1 s, then 2 s) and pod waits (2 s): the steps below wait for
# them; node_history sees the states they pass through.
start_manager --pod-wait-timeout 2 --backoff-initial 1 --backoff-max 2
# The first run (no label) has ended once the manager waits for a change.
wait_log "Waiting for a change of nvidia.com/mig.config on node '$node'" 30
[ "$(state)" = "" ] || fail "state set without a label: $(node_view)"
kill -0 "$mgr_pid" || fail "manager exited"

step "all-balanced: pending -> success, layout applied, labels restored"
select_config all-balanced
wait_for success 30
mk assert -f "$cfg" -c all-balanced >/dev/null || fail "all-balanced not applied"
expect_restored success "after all-balanced"
ev=$(events)
echo "$ev" | grep -x MigConfigPending >/dev/null || fail "no MigConfigPending event: $ev"
echo "$ev" | grep -x MigComponentsPaused >/dev/null || fail "no MigComponentsPaused event: $ev"
echo "$ev" | grep -x MigConfigApplied >/dev/null || fail "no MigConfigApplied event: $ev"
grep -q 'mig.config.state=pending' "$tmp/mgr.log" || fail "never went pending"

step "same layout under another name: success without touching anything"
mk export >"$tmp/before.yaml"
n_paused=$(grep -c 'Paused GPU components' "$tmp/mgr.log")
select_config all-balanced-again
for _ in $(seq 150); do grep -q "'all-balanced-again' is already applied" "$tmp/mgr.log" && break; sleep 0.2; done
grep -q "'all-balanced-again' is already applied" "$tmp/mgr.log" || fail "no 'already applied'"
wait_for success 5
[ "$(grep -c 'Paused GPU components' "$tmp/mgr.log")" = "$n_paused" ] || fail "paused for an applied config"
mk export | diff -u "$tmp/before.yaml" - || fail "layout changed"

step "impossible config: failed, nothing touched"
select_config impossible
wait_for failed 20
mk export | diff -u "$tmp/before.yaml" - || fail "impossible config touched the GPUs"
expect_restored failed "after impossible"
[ "$(grep -c 'Paused GPU components' "$tmp/mgr.log")" = "$n_paused" ] || fail "paused for an impossible config"
events | grep -x MigConfigFailed >/dev/null || fail "no MigConfigFailed event"
# The reason where `kubectl get node -o yaml` shows it, next to the state label.
failure() { kc get node "$node" -o jsonpath='{.metadata.annotations.migkit\.io/mig\.config\.failure}'; }
[[ $(failure) == "MIG config 'impossible' failed: "* ]] || fail "failure annotation: '$(failure)'"
# Events carry the kubelet's involvedObject (uid = node name), which the
# kubectl of the test env (1.20) needs to show them in `describe node`.
ev=$(kc get events -n default -o name \
  --field-selector "involvedObject.name=$node,involvedObject.uid=$node,reason=MigConfigFailed")
[ -n "$ev" ] || fail "MigConfigFailed event without involvedObject.uid=$node: $(kc get events -n default -o yaml)"
kc describe node "$node" >"$tmp/describe.txt"
grep -q 'MigConfigFailed.*impossible' "$tmp/describe.txt" ||
  fail "kubectl describe node shows no MigConfigFailed: $(sed -n '/^Events:/,$p' "$tmp/describe.txt")"

step "unknown config name: failed"
select_config no-such-config
for _ in $(seq 150); do grep -q "no config named 'no-such-config'" "$tmp/mgr.log" && break; sleep 0.2; done
grep -q "no config named 'no-such-config'" "$tmp/mgr.log" || fail "unknown config not reported"
wait_for failed 5
expect_restored failed "after an unknown config"
grep "no config named 'no-such-config'" "$tmp/mgr.log" | grep -q "it has: all-disabled, all-balanced" ||
  fail "the unknown config's error does not list the configs"
# No retry can fix it: none within 3 times the backoff (1 s: a retry would
# come), until the file or the label changes. A fixed wait: nothing to wait for.
sleep 3
[ "$(grep -c "Reconfiguring node '$node' to MIG config 'no-such-config'" "$tmp/mgr.log")" = 1 ] ||
  fail "an unknown config was retried: $(grep "no-such-config" "$tmp/mgr.log")"
grep -q "Not retrying MIG config 'no-such-config'" "$tmp/mgr.log" || fail "no 'Not retrying' line"
# The config file gains it (as an updated ConfigMap would): tried again, and it is the applied layout.
cat >>"$cfg" <<'YAML'
  no-such-config:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
YAML
wait_for success 15
grep -q "MIG config file '$cfg' changed: trying the label again" "$tmp/mgr.log" || fail "config change not seen"

step "a GPU component pod that never leaves: the wait times out, failed, labels restored; retried once it is gone; a user GPU workload never blocks"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: cuda-user
  namespace: default
spec:
  nodeName: $node
  tolerations: [{operator: Exists}]
  containers:
  - name: c
    image: cuda:none
    resources:
      limits: {nvidia.com/gpu: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: cuda-job
  namespace: default
  labels: {app: nvidia-device-plugin-daemonset}
spec:
  nodeName: $node
  tolerations: [{operator: Exists}]
  containers:
  - name: c
    image: device-plugin:none
EOF
# Paused while it waits, then failed with the labels restored: each state
# lasts only until the next retry (1-2 s), so they are read from the history.
node_history
h=$(wc -l <"$tmp/history")
select_config all-3g
h=$(history_wait "state=pending $paused annotation=*" 30 "$h")
h=$(history_wait "state=failed *" 30 "$h")
v=$(sed -n "${h}p" "$tmp/history")
[ "$v" = "state=failed $restored" ] || fail "after the pod wait timed out: node was '$v', want 'state=failed $restored'"
kill "$hist_pid"; wait "$hist_pid" 2>/dev/null || true; hist_pid=
grep -q 'Timed out after 2 s waiting for 1 GPU pod(s)' "$tmp/mgr.log" || fail "timeout not logged"
# The retries wait for the pod again: nothing changes while it is there.
mk assert -f "$cfg" -c all-balanced >/dev/null || fail "layout changed although the wait failed"
kc delete pod cuda-job -n default --grace-period=0 --force >/dev/null 2>&1
wait_for success 60
mk assert -f "$cfg" -c all-3g >/dev/null || fail "all-3g not applied after the retry (the user pod must not block)"
[ -z "$(failure)" ] || fail "failure annotation left after success: '$(failure)'"
expect_restored success "after the retry"
kc delete pod cuda-user -n default --grace-period=0 --force >/dev/null 2>&1
grep -q 'Will retry MIG config' "$tmp/mgr.log" || fail "no retry logged"

step "manager killed mid-change: the next one finishes and restores"
"$MIGKIT_SIM_BIN" fault crash-after 3 >/dev/null
select_config first-1g
for _ in $(seq 100); do kill -0 "$mgr_pid" 2>/dev/null || break; sleep 0.2; done
set +e; wait "$mgr_pid"; rc=$?; set -e
mgr_pid=
[ "$rc" = 137 ] || fail "manager did not die in the middle (exit $rc)"
v=$(node_view)
[[ $v == "state=pending $paused annotation="* ]] || fail "after the crash: $v"
"$MIGKIT_SIM_BIN" fault clear >/dev/null
# Pod waits long enough to take the apiserver away in the middle of one, and
# no timed retry within the test: the next runs come from label changes.
start_manager --pod-wait-timeout 120 --backoff-initial 300 --backoff-max 300
wait_for success 30
mk assert -f "$cfg" -c first-1g >/dev/null || fail "first-1g not applied after restart"
expect_restored success "after the restart"

step "apiserver crash in the middle of a change, after an etcd compaction: failed with labels restored; 410 Gone, relist, the manager resumes"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: cuda-job-2
  namespace: default
  labels: {app: nvidia-dcgm-exporter}
spec:
  nodeName: $node
  containers:
  - name: c
    image: dcgm-exporter:none
EOF
select_config all-balanced
v=
for _ in $(seq 150); do v=$(node_view); [[ $v == "state=pending $paused"* ]] && break; sleep 0.2; done
[[ $v == "state=pending $paused"* ]] || fail "not paused: $v"
# The manager now only lists pods (it waits for cuda-job-2). Two writes the
# node watch does not see, then a compaction: the watch's version is gone
# when it reconnects (docs/k8s-testenv.md); the informer resumes a broken
# watch from its version, however long the outage takes. A late write of the
# manager to the node between the fillers and the compaction would give the
# watch a version the compaction keeps: try again until the node did not
# change meanwhile.
for try in 1 2 3 4 5; do
  rv0=$(kc get node "$node" -o jsonpath='{.metadata.resourceVersion}')
  kc create configmap -n default "filler-$try-a" >/dev/null
  kc create configmap -n default "filler-$try-b" >/dev/null
  "$MIGKIT_K8S_TESTENV" compact "$tmp/k8s" >/dev/null || fail "compact failed"
  [ "$(kc get node "$node" -o jsonpath='{.metadata.resourceVersion}')" = "$rv0" ] && break
  [ "$try" -lt 5 ] || fail "the node kept changing; cannot compact past the manager's watch"
done
log_at=$(wc -l <"$tmp/mgr.log")
"$MIGKIT_K8S_TESTENV" down "$tmp/k8s" kube-apiserver --kill >/dev/null || fail "apiserver down failed"
# Up again once the run has failed for it and the manager tries to restore
# the paused labels against the missing apiserver.
wait_log "Cannot restore the paused labels of node '$node' yet" 60 "$log_at"
"$MIGKIT_K8S_TESTENV" up "$tmp/k8s" kube-apiserver >/dev/null || fail "apiserver up failed"
wait_for failed 60
expect_restored failed "after the outage"
kill -0 "$mgr_pid" || fail "manager exited"
# The pod gone, a new label (through the relisted watch): applied.
kc delete pod cuda-job-2 -n default --grace-period=0 --force >/dev/null 2>&1
select_config all-disabled
wait_for success 60
mk assert -f "$cfg" -c all-disabled >/dev/null || fail "all-disabled not applied after the apiserver crash"
grep -q "version too old, relisting" "$tmp/mgr.log" || fail "no relist after 410 Gone"
expect_restored success "after the apiserver crash"
kill -0 "$mgr_pid" || fail "manager exited"

step "SIGTERM: clean exit"
kill "$mgr_pid"
set +e; wait "$mgr_pid"; rc=$?; set -e
mgr_pid=
[ "$rc" = 0 ] || fail "exit $rc after SIGTERM"

step "hostile data (issue 27 finding 1): a NUL in a pod's annotation, then in the node's: configs applied, the manager stays up"
# The apiserver accepts a NUL (\u0000) in an annotation value. Before, a pod
# on the node holding one made every reconfiguration fail ("Cannot list the
# pods of node"), and a NUL in the node's annotations made the manager exit.
# A node of its own, with its own (simulated) machine.
node4=gpu-node-4
mkdir -p "$tmp/h"
api() { # METHOD PATH [curl args...]
  curl -sS --cacert "$MIGKIT_K8S_CA" -H "Authorization: Bearer $MIGKIT_K8S_TOKEN" -X "$1" \
    "$MIGKIT_K8S_SERVER$2" "${@:3}"
}
h_cfg=$MIGKIT_SOURCE_DIR/examples/config.yaml
h_mk() { MIGKIT_SIM_STATE=$tmp/h/sim.json "$MIGKIT_BIN" -q --simulate dgx-a100 "$@"; }
state4() { kc get node "$node4" -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}'; }
# wait_state4 STATE SECONDS: ends early when the state is failed (with its reason) or the manager exits.
wait_state4() {
  local s
  for _ in $(seq $(($2 * 5))); do
    s=$(state4)
    [ "$s" = "$1" ] && return 0
    [ "$s" != failed ] ||
      fail "$node4: state is 'failed': $(kc get node "$node4" -o jsonpath='{.metadata.annotations.migkit\.io/mig\.config\.failure}')"
    kill -0 "$h_pid" 2>/dev/null || fail "$node4: the manager exited: $(tail -n 20 "$tmp/h/mgr.log")"
    sleep 0.2
  done
  fail "$node4: state is '$(state4)', want '$1' after $2 s"
}
code=$(api POST /api/v1/nodes -H 'Content-Type: application/json' -o "$tmp/post.out" -w '%{http_code}' \
  --data '{"apiVersion":"v1","kind":"Node","metadata":{"name":"'"$node4"'","labels":{"nvidia.com/gpu.deploy.device-plugin":"true"}}}')
[ "$code" = 201 ] || fail "node: HTTP $code $(cat "$tmp/post.out")"
code=$(api POST /api/v1/namespaces/default/pods -H 'Content-Type: application/json' -o "$tmp/post.out" -w '%{http_code}' \
  --data '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nul-pod","annotations":{"note":"x\u0000y"}},"spec":{"nodeName":"'"$node4"'","containers":[{"name":"c","image":"example.invalid/none:1"}]}}')
[ "$code" = 201 ] || fail "pod: HTTP $code $(cat "$tmp/post.out")"
MIGKIT_SIM_STATE=$tmp/h/sim.json "$MIGKIT_BIN" --simulate dgx-a100 manager -n "$node4" -f "$h_cfg" -m "$tmp/h/host" \
  >>"$tmp/h/mgr.log" 2>&1 &
h_pid=$!
kc label node "$node4" --overwrite nvidia.com/mig.config=all-balanced >/dev/null || fail "labelling $node4"
wait_state4 success 40
h_mk assert -f "$h_cfg" -c all-balanced >/dev/null || fail "$node4: all-balanced not applied"
# The node's next versions all hold the NUL: the manager reads every one of
# them before it sees the new label.
api PATCH "/api/v1/nodes/$node4" -H 'Content-Type: application/merge-patch+json' -o /dev/null -f \
  --data '{"metadata":{"annotations":{"note":"a\u0000b"}}}' || fail "patching $node4"
kc label node "$node4" --overwrite nvidia.com/mig.config=all-1g.5gb >/dev/null || fail "labelling $node4"
for _ in $(seq 200); do
  h_mk assert -f "$h_cfg" -c all-1g.5gb >/dev/null 2>&1 && break
  kill -0 "$h_pid" 2>/dev/null || fail "$node4: the manager exited: $(tail -n 20 "$tmp/h/mgr.log")"
  sleep 0.2
done
h_mk assert -f "$h_cfg" -c all-1g.5gb >/dev/null || fail "$node4: all-1g.5gb not applied"
wait_state4 success 20
kill "$h_pid"
set +e; wait "$h_pid"; rc=$?; set -e
h_pid=
[ "$rc" = 0 ] || fail "$node4: the manager exited $rc (SIGTERM)"

step "no -f: a generated config, published as ConfigMap <node>-mig-config"
kc apply -f "$MIGKIT_SOURCE_DIR/deploy/kubernetes/namespace.yaml" >/dev/null
POD_NAMESPACE=migkit "$MIGKIT_BIN" --simulate dgx-a100 manager -n gpu-node-2 -m "$tmp/host" \
  --generated-config-file "$tmp/generated.yaml" >"$tmp/gen.log" 2>&1 &
gen_pid=$!
for _ in $(seq 150); do kc get configmap -n migkit gpu-node-2-mig-config >/dev/null 2>&1 && break; sleep 0.2; done
kc get configmap -n migkit gpu-node-2-mig-config -o json >"$tmp/cm.json" 2>/dev/null ||
  { kill "$gen_pid"; cat "$tmp/gen.log" >&2; fail "no ConfigMap gpu-node-2-mig-config"; }
kill "$gen_pid"; wait "$gen_pid" || true
python3 - "$tmp/cm.json" <<'PY' || fail "ConfigMap content: $(cat "$tmp/cm.json")"
import json, sys
cm = json.load(open(sys.argv[1]))
y = cm["data"]["config.yaml"]
assert cm["metadata"]["labels"]["nvidia.com/node-name"] == "gpu-node-2", cm["metadata"]
assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "nvidia-mig-manager", cm["metadata"]
for name in ("all-disabled:", "all-enabled:", "all-balanced:", "all-1g.5gb:"):
    assert name in y, name
PY
[ -s "$tmp/generated.yaml" ] || fail "generated config not written"
# A restarted pod updates the ConfigMap it finds.
kc patch configmap -n migkit gpu-node-2-mig-config --type merge -p '{"data":{"config.yaml":"stale"}}' >/dev/null
POD_NAMESPACE=migkit "$MIGKIT_BIN" --simulate dgx-a100 manager -n gpu-node-2 -m "$tmp/host" \
  --generated-config-file "$tmp/generated.yaml" >"$tmp/gen2.log" 2>&1 &
gen_pid=$!
for _ in $(seq 150); do grep -q 'Published the generated config' "$tmp/gen2.log" && break; sleep 0.2; done
kill "$gen_pid"; wait "$gen_pid" || true
grep -q 'Published the generated config' "$tmp/gen2.log" || fail "second publish: $(cat "$tmp/gen2.log")"
kc get configmap -n migkit gpu-node-2-mig-config -o jsonpath='{.data.config\.yaml}' | grep 'all-balanced:' >/dev/null ||
  fail "ConfigMap not updated by the second start"
mk plan -f "$tmp/generated.yaml" -c all-1g.5gb >/dev/null || fail "generated config: cannot plan all-1g.5gb"

step "WITH_REBOOT: a mode change that needs a reboot reboots once; a reboot that did not help fails"
# A fresh A100 machine whose GPUs have no sysfs `reset` (passthrough): the
# mode change stays pending until the (simulated) machine reboots.
node3=gpu-node-3
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $node3
  labels:
    nvidia.com/gpu.deploy.device-plugin: "true"
    nvidia.com/mig.config: all-balanced
EOF
mkdir -p "$tmp/pt/bin" "$tmp/pt/proc" "$tmp/pt/host"
printf '#!/bin/sh\necho "reboot $*" >>"%s"\n' "$tmp/pt/reboots" >"$tmp/pt/bin/reboot"
chmod +x "$tmp/pt/bin/reboot"
printf 'ext4 1032192 2 - Live 0x0000000000000000\n' >"$tmp/pt/proc/modules"
for bus in 07 0f 47 4e 87 90 b7 bd; do
  d=$tmp/pt/sys/bus/pci/devices/0000:$bus:00.0
  mkdir -p "$d"
  echo 0x10de >"$d/vendor"; echo 0x20b0 >"$d/device"; echo 0x030200 >"$d/class"
  echo 0x10de >"$d/subsystem_vendor"; echo 0x134f >"$d/subsystem_device"
done
# Through env(1), not a shell function: `pt CMD &` then makes $! the command
# itself (exec'd by env), so killing $! stops it.
pt_env=(env "PATH=$tmp/pt/bin:$PATH" "MIGKIT_SIM_STATE=$tmp/pt/sim.json" "MIGKIT_SYSFS_ROOT=$tmp/pt/sys"
        "MIGKIT_PROC_ROOT=$tmp/pt/proc" "MIGKIT_NVIDIA_SMI=")
pt() { "${pt_env[@]}" "$@"; }
state3() {
  kc get node "$node3" -o \
    jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state} {.metadata.labels.nvidia\.com/gpu\.deploy\.device-plugin}'
}
wait_state3() {
  for _ in $(seq $(($2 * 5))); do [ "$(state3)" = "$1" ] && return 0; sleep 0.2; done
  tail -n 30 "$tmp/pt/mgr.log" >&2
  fail "node3 is '$(state3)', want '$1'"
}
stop_pt() {
  kill "$pt_pid" 2>/dev/null || true
  wait "$pt_pid" || true
  ! kill -0 "$pt_pid" 2>/dev/null || fail "manager $pt_pid still running"
  pt_pid=
}
run_pt_manager() {
  "${pt_env[@]}" "$MIGKIT_BIN" --simulate dgx-a100 manager -n "$node3" -f "$cfg" -m "$tmp/pt/host" -r \
    --backoff-initial 60 >>"$tmp/pt/mgr.log" 2>&1 &
  pt_pid=$!
}
run_pt_manager
wait_state3 "rebooting paused-for-mig-change" 30
# The state is written before `reboot` runs.
for _ in $(seq 150); do [ -s "$tmp/pt/reboots" ] && break; sleep 0.2; done
[ "$(cat "$tmp/pt/reboots")" = "reboot " ] || fail "reboot calls: $(cat "$tmp/pt/reboots" 2>/dev/null)"
[ -s "$tmp/pt/host/var/lib/migkit/reboot-attempted" ] || fail "no reboot marker"
stop_pt
# The node came back without the mode change (no simulated reboot): failed, no second reboot.
run_pt_manager
wait_state3 "failed true" 30
grep -q 'did not take effect after rebooting' "$tmp/pt/mgr.log" || fail "no 'did not take effect' message"
[ "$(cat "$tmp/pt/reboots")" = "reboot " ] || fail "rebooted twice: $(cat "$tmp/pt/reboots")"
stop_pt
# A real reboot applies the pending mode; the next start finishes the config.
pt "$MIGKIT_SIM_BIN" reboot >/dev/null
run_pt_manager
wait_state3 "success true" 30
pt "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-balanced >/dev/null || fail "node3 not applied"
[ ! -e "$tmp/pt/host/var/lib/migkit/reboot-attempted" ] || fail "the marker stayed after success"
stop_pt

step "WITH_SHUTDOWN_HOST_GPU_CLIENTS: active host units stopped around the change (last first), started again"
install -m 0755 "$MIGKIT_SOURCE_DIR/tests/fixtures/service/systemctl" "$tmp/pt/bin/systemctl"
printf 'version: v1\nsystemd-services:\n  - nvsm.service\n  - nv_peer_mem.service\n  - dcgm.service\n' \
  >"$tmp/pt/clients.yaml"
printf 'nvsm.service\ndcgm.service\n' >"$tmp/pt/active"
export STANDIN_LOG=$tmp/pt/calls.log STANDIN_ACTIVE=$tmp/pt/active
"${pt_env[@]}" STANDIN_LOG="$STANDIN_LOG" STANDIN_ACTIVE="$STANDIN_ACTIVE" "$MIGKIT_BIN" --simulate dgx-a100 \
  manager -n "$node3" -f "$cfg" -m "$tmp/pt/host" -d -g "$tmp/pt/clients.yaml" >>"$tmp/pt/mgr.log" 2>&1 &
pt_pid=$!
kc label node "$node3" --overwrite nvidia.com/mig.config=all-3g >/dev/null
for _ in $(seq 150); do
  [ "$(state3)" = "success true" ] && pt "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-3g >/dev/null 2>&1 &&
    break
  sleep 0.2
done
pt "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-3g >/dev/null || fail "node3: all-3g not applied"
stop_pt
got=$(grep -E '^systemctl (stop|start)' "$STANDIN_LOG" || true)
want=$'systemctl stop dcgm.service\nsystemctl stop nvsm.service\nsystemctl start --no-block nvsm.service\nsystemctl start --no-block dcgm.service'
[ "$got" = "$want" ] || fail "host clients: calls"$'\n'"$got"$'\n'"want"$'\n'"$want"
[ "$(sort "$STANDIN_ACTIVE" | tr '\n' ' ')" = "dcgm.service nvsm.service " ] || fail "active units: $(cat "$STANDIN_ACTIVE")"

step "deploy/kubernetes: applied, the ServiceAccount may do what the manager does, and no more"
# A real apply: the server validates and admits every object as a
# server-side dry run would (which kubectl 1.20 makes ten times slower), and
# creates them.
kc apply -k "$MIGKIT_SOURCE_DIR/deploy/kubernetes" >"$tmp/out" 2>&1 ||
  { cat "$tmp/out" >&2; fail "kubectl apply -k deploy/kubernetes"; }
cat "$tmp/out"
sa=system:serviceaccount:migkit:migkit-manager
can() { [ "$(kc auth can-i --as=$sa "$@" 2>/dev/null)" = yes ]; }
for a in "get nodes" "list nodes" "watch nodes" "patch nodes" "list pods --all-namespaces" \
         "create events -n default" "create configmaps -n migkit" "patch configmaps -n migkit" "get pods -n migkit"; do
  # shellcheck disable=SC2086
  can $a || fail "the manager's ServiceAccount cannot '$a'"
done
for a in "delete nodes" "update nodes" "create nodes" "delete pods -n default" "get secrets -n migkit" \
         "create configmaps -n default" "create events -n migkit"; do
  # shellcheck disable=SC2086
  ! can $a || fail "the manager's ServiceAccount may '$a' (more than it needs)"
done

echo "PASS ($SECONDS s)"
