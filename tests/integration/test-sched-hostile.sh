#!/usr/bin/env bash
# Hostile data from the cluster never stops the scheduler's daemons (issue
# 27, finding 1), on the real kube-apiserver and kube-scheduler of
# scripts/k8s-testenv. The apiserver accepts a NUL (\u0000) in an annotation
# value; before, the extender exited and could not start while such a pod
# existed, and `scheduler node --once` failed. Here: pods with a NUL in a
# foreign annotation and in one of ours, bound to the node and pending;
# `scheduler node --once` succeeds and publishes the inventory; the extender
# starts, counts the malformed pods, refuses only the pending one (its
# reason names the field) and binds a normal pod; a Node with a NUL in our
# annotation, then deleted and added again, and a NUL on the real node's
# foreign annotation, do not stop it: another pod is bound after them, the
# malformed Node gets a MalformedObject Event.
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
. "$(dirname "$0")/sched-lib.sh"
ext_pid= ag_pid=
fail_logs=(ext.log ag.log ag-once.log k8s/kube-scheduler.log)
sched_cleanup_hook() {
  for p in $ext_pid $ag_pid; do kill "$p" 2>/dev/null || true; done
  for p in $ext_pid $ag_pid; do wait "$p" 2>/dev/null || true; done
}
sched_start_k8s
sim 1 apply -f "$mig_config" -c all-enabled >/dev/null || fail "enabling MIG failed"
fake_gpu_node gpu-node-1 56

post_pod() { # NAME JSON-ANNOTATIONS NODE(or "") LIMITS-JSON
  local spec='"containers":[{"name":"c","image":"example.invalid/none:1","resources":{"limits":'"$4"'}}]'
  [ -z "$3" ] || spec+=',"nodeName":"'"$3"'"'
  api POST /api/v1/namespaces/default/pods -H 'Content-Type: application/json' -o "$tmp/post.out" -w '%{http_code}' \
    --data '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'"$1"'","annotations":'"$2"'},"spec":{'"$spec"'}}'
}
step "the apiserver takes pods with a NUL in an annotation"
code=$(post_pod nul-foreign '{"note":"a\u0000b"}' gpu-node-1 '{}')
[ "$code" = 201 ] || fail "pod nul-foreign: HTTP $code $(cat "$tmp/post.out")"
code=$(post_pod nul-ours '{"migkit.io/mig-reservation":"x\u0000y"}' gpu-node-1 '{}')
[ "$code" = 201 ] || fail "pod nul-ours: HTTP $code $(cat "$tmp/post.out")"
code=$(post_pod nul-pending '{"nvidia.com/vgpu-mode":"mig\u0000x"}' "" '{"nvidia.com/gpu":"1","nvidia.com/gpumem":"4000"}')
[ "$code" = 201 ] || fail "pod nul-pending: HTTP $code $(cat "$tmp/post.out")"

step "scheduler node --once succeeds"
MIGKIT_SIM_STATE=$tmp/sim-1.json "$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n gpu-node-1 \
  -c "$tmp/sched-config.yaml" --once >>"$tmp/ag-once.log" 2>&1 || fail "scheduler node --once failed"
grep -q "nul-ours.*NUL" "$tmp/ag-once.log" || fail "the agent did not say the malformed pod"
[ -n "$(node_inv gpu-node-1)" ] ||
  fail "no inventory published"

step "the extender starts and serves"
MIGKIT_SIM_STATE=$tmp/sim-1.json "$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n gpu-node-1 \
  -c "$tmp/sched-config.yaml" --grace 1s --resync 2s >>"$tmp/ag.log" 2>&1 &
ag_pid=$!
"$MIGKIT_BIN" scheduler serve -c "$tmp/sched-config.yaml" --address 127.0.0.1 --port "$port" >>"$tmp/ext.log" 2>&1 &
ext_pid=$!
wait_ready "$port"
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || fail "the extender is not ready"
metric() { curl -sf "http://127.0.0.1:$port/metrics" | sed -n "s/^$1 //p"; }
for ((i = 0; i < 100; i++)); do
  [ "$(metric 'migkit_scheduler_malformed_objects_total{kind="pod"}')" -ge 2 ] 2>/dev/null && break
  sleep 0.1
done
[ "$(metric 'migkit_scheduler_malformed_objects_total{kind="pod"}')" -ge 2 ] || fail "malformed pods not counted"

pod() { gpu_pod "$1" '{"nvidia.com/gpu":"1","nvidia.com/gpumem":"'"$2"'"}'; } # NAME MEM
pod ok-1 4000
[ "$(wait_bound ok-1)" = gpu-node-1 ] || fail "ok-1 not bound to gpu-node-1"
wait_devices ok-1 >/dev/null
# kube-scheduler tried nul-pending before the extender listened ("connection
# refused") and keeps it aside until the pod changes: a label brings it back.
api PATCH /api/v1/namespaces/default/pods/nul-pending -H 'Content-Type: application/merge-patch+json' -o /dev/null \
  -f --data '{"metadata":{"labels":{"retry":"1"}}}' || fail "labelling nul-pending"
msg=$(kwait 30 /api/v1/namespaces/default/pods/nul-pending '"NUL" in cond(o, "PodScheduled").get("message", "")' \
  'cond(o, "PodScheduled")["message"]') ||
  fail "nul-pending's PodScheduled message does not name the NUL: '$(kc get pod nul-pending \
    -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}')'"
echo "    nul-pending: $msg"

step "Nodes with a NUL, deleted and added again, do not stop it"
api PATCH /api/v1/nodes/gpu-node-1 -H 'Content-Type: application/merge-patch+json' -o /dev/null -f \
  --data '{"metadata":{"annotations":{"note":"\u0000"}}}' || fail "patching gpu-node-1"
# Each round waits for the extender to have skipped (counted) the decoy it
# added before deleting it (a foreign annotation, gpu-node-1's note, is not
# counted).
for round in 1 2; do
  code=$(api POST /api/v1/nodes -H 'Content-Type: application/json' -o "$tmp/post.out" -w '%{http_code}' \
    --data '{"apiVersion":"v1","kind":"Node","metadata":{"name":"decoy","annotations":{"migkit.io/mig-inventory":"{\u0000"}}}')
  [ "$code" = 201 ] || fail "node decoy: HTTP $code $(cat "$tmp/post.out")"
  for ((i = 0; i < 100; i++)); do
    [ "$(metric 'migkit_scheduler_malformed_objects_total{kind="node"}')" -ge "$round" ] 2>/dev/null && break
    kill -0 "$ext_pid" 2>/dev/null || fail "the extender exited"
    sleep 0.1
  done
  [ "$(metric 'migkit_scheduler_malformed_objects_total{kind="node"}')" -ge "$round" ] ||
    fail "round $round: the malformed decoy was not counted"
  api DELETE /api/v1/nodes/decoy -o /dev/null -f || fail "deleting decoy (round $round)"
done
kill -0 "$ext_pid" 2>/dev/null || fail "the extender exited"
pod ok-2 9000
[ "$(wait_bound ok-2)" = gpu-node-1 ] || fail "ok-2 not bound"
ev=$(kwait 20 '/api/v1/events?fieldSelector=reason%3DMalformedObject' \
  '{"Node/decoy", "Pod/nul-ours"} <= {e["involvedObject"]["kind"] + "/" + e["involvedObject"]["name"] for e in o["items"]}' \
  '" ".join(e["involvedObject"]["kind"] + "/" + e["involvedObject"]["name"] for e in o["items"])') ||
  fail "MalformedObject Events: no Node/decoy and Pod/nul-ours"
kill -0 "$ext_pid" 2>/dev/null || fail "the extender exited"
kill -0 "$ag_pid" 2>/dev/null || fail "the agent exited"
[ "$(grep -c "holds a NUL byte" "$tmp/ext.log")" -le 6 ] || fail "the malformed objects were said more than once each"
echo "ok"
