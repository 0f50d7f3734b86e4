#!/usr/bin/env bash
# Dynamic MIG end to end: the real kube-scheduler 1.20 (scripts/k8s-testenv)
# configured with `migkit scheduler serve` as its extender (filter,
# prioritize, bind, nodeCacheCapable), two fake Nodes whose inventories are
# published by `migkit scheduler node` agents on two simulated dgx-a100
# machines. Checks: pods asking nvidia.com/gpumem are bound where they fit,
# with their reservation recorded on the pod; the agent creates exactly the
# reserved instances (profile and placement, read back from the simulator)
# and records their MIG UUIDs; concurrent pods never share a placement; a pod
# that fits nowhere stays Pending with migkit's reason in its PodScheduled
# condition; a deleted pod's instance is destroyed after the grace period; a
# restarted extender and agent lose nothing. The device plugin in dynamic
# MIG mode (`device-plugin --dynamic-mig`, against the stand-in kubelet
# kubelet_standin.py) answers each Allocate with exactly the MIG device
# reserved for the next pod, marks that pod migkit.io/mig-allocated, and
# fails the Allocate once no reservation is left.
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
. "$(dirname "$0")/sched-lib.sh"
ext_pid= ag1_pid= ag2_pid= dp_pid= standin_pid= dptmp=
fail_logs=(ext.log ag1.log ag2.log dp.log standin.log k8s/kube-scheduler.log)
sched_cleanup_hook() {
  for p in $dp_pid $standin_pid $ext_pid $ag1_pid $ag2_pid; do kill "$p" 2>/dev/null || true; done
  for p in $dp_pid $standin_pid $ext_pid $ag1_pid $ag2_pid; do wait "$p" 2>/dev/null || true; done
  [ -z "$dptmp" ] || rm -rf "$dptmp"
}

"$MIGKIT_BIN" scheduler check "$tmp/sched-config.yaml" >/dev/null || fail "config check failed"

sched_start_k8s

step "two fake GPU nodes, MIG enabled on their simulated GPUs"
for n in 1 2; do
  sim $n apply -f "$mig_config" -c all-enabled >/dev/null || fail "enabling MIG on machine $n failed"
  fake_gpu_node "gpu-node-$n" 56
done

step "node agents publish the inventories"
start_agent() {
  MIGKIT_SIM_STATE=$tmp/sim-$1.json "$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n "gpu-node-$1" \
    -c "$tmp/sched-config.yaml" --grace 2s --resync 2s >>"$tmp/ag$1.log" 2>&1 &
}
start_agent 1; ag1_pid=$!
start_agent 2; ag2_pid=$!
for n in 1 2; do
  inv=$(wait_inventory "gpu-node-$n")
  python3 - "$inv" <<'EOF' || fail "inventory of gpu-node-$n: $inv"
import json, sys
inv = json.loads(sys.argv[1])
assert inv["version"] == 1 and len(inv["gpus"]) == 8, inv
names = sorted(p["name"] for p in inv["gpus"][0]["profiles"])
# config filter: 1g.5gb+me and 1g.10gb are reported by the GPU but not allowed
assert names == ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"], names
assert all(g["mig"] for g in inv["gpus"]) and all(g["instances"] == [] for g in inv["gpus"])
EOF
done

step "the extender serves"
start_extender() {
  "$MIGKIT_BIN" scheduler serve -c "$tmp/sched-config.yaml" --address 127.0.0.1 --port "$port" \
    >>"$tmp/ext.log" 2>&1 &
}
start_extender; ext_pid=$!
wait_ready "$port"
curl -sf "http://127.0.0.1:$port/healthz" | grep -q ok || fail "healthz"
curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^migkit_scheduler_nodes 2$' || fail "metrics: $(curl -s "http://127.0.0.1:$port/metrics")"
# Capped bodies and errors in the Error field.
code=$(head -c 9000000 /dev/zero | tr '\0' ' ' | curl -s -o /dev/null -w '%{http_code}' --data-binary @- \
  "http://127.0.0.1:$port/filter")
[ "$code" = 413 ] || fail "oversized body answered $code"
out=$(curl -sf --data '{"pod":' "http://127.0.0.1:$port/filter") || fail "garbage filter"
grep -q '"Error":"not valid JSON\|"Error": *"' <<<"$out" || fail "garbage filter answered $out"

pod_yaml() { # NAME GPUS MEM [extra annotations yaml]
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
  annotations: {${4:-}}
spec:
  containers:
  - name: c
    image: example.invalid/none:1
    resources:
      limits: {nvidia.com/gpu: "$2", nvidia.com/gpumem: "$3"}
EOF
}
pod() { # NAME GPUS MEM [annotations, JSON]
  gpu_pod "$1" '{"nvidia.com/gpu":"'"$2"'","nvidia.com/gpumem":"'"$3"'"}' "${4:-}"
}

step "a 19000 MiB pod gets a 3g.20gb reservation and the instance is created"
# 3g.20gb holds 19968 MiB on an A100-SXM4-40GB; 4g.20gb too, with more compute.
pod p-20g 1 19000
node=$(wait_bound p-20g)
res=$(ann p-20g mig-reservation)
devs=$(wait_devices p-20g)
n=${node#gpu-node-}
sim "$n" export -o json >"$tmp/export.json" || fail "export"
python3 - "$res" "$devs" "$node" "$tmp/export.json" <<'EOF' || fail "reservation $res / devices $devs"
import json, sys
res, devs, node = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
assert res["version"] == 1 and res["node"] == node, res
(d,) = res["devices"]
assert d["profile"] == "3g.20gb" and d["placement"]["size"] == 4, d
assert len(devs) == 1 and devs[0].startswith("MIG-"), devs
EOF
inv=$(node_inv "$node")
python3 - "$res" "$inv" "$devs" <<'EOF' || fail "inventory after creation: $inv"
import json, sys
res, inv, devs = (json.loads(a) for a in sys.argv[1:4])
d = res["devices"][0]
g = next(g for g in inv["gpus"] if g["uuid"] == d["gpu"])
(i,) = g["instances"]
assert i["state"] == "created" and i["profile"] == "3g.20gb", i
assert i["placement"] == [d["placement"]["start"], d["placement"]["size"]], (i, d)
assert i["migUUID"] == devs[0] and i["pod"] == "default/p-20g", i
assert sum(len(x["instances"]) for x in inv["gpus"]) == 1
EOF

step "concurrent pods never share a placement"
# All 8 in one request: they are all pending at once, and kube-scheduler binds
# them concurrently (its binds are asynchronous).
for k in 1 2 3 4 5 6 7 8; do echo "---"; pod_yaml "p-c$k" 1 9000; done >"$tmp/pods-c.yaml"
kc create -f "$tmp/pods-c.yaml" >/dev/null || fail "creating the pods failed"
kwait 60 /api/v1/namespaces/default/pods \
  'sum(1 for p in o["items"] if p["metadata"]["name"].startswith("p-c") and ann(p, "mig-devices")) == 8' \
  >"$tmp/pods.json" || fail "the 8 pods were not all bound with their devices: $(kc get pods -o wide)"
python3 - "$tmp/pods.json" <<'EOF' || fail "overlapping reservations"
import json, sys
seen = {}
for p in json.load(open(sys.argv[1]))["items"]:
    a = p["metadata"].get("annotations", {})
    if "migkit.io/mig-reservation" not in a:
        continue
    r = json.loads(a["migkit.io/mig-reservation"])
    assert r["node"] == p["spec"]["nodeName"], (r, p["spec"].get("nodeName"))
    for d in r["devices"]:
        units = set(range(d["placement"]["start"], d["placement"]["start"] + d["placement"]["size"]))
        key = (r["node"], d["gpu"])
        for other, ou in seen.get(key, []):
            assert not (units & ou), ("overlap", p["metadata"]["name"], other)
        seen.setdefault(key, []).append((p["metadata"]["name"], units))
        if p["metadata"]["name"].startswith("p-c"):
            assert d["profile"] == "2g.10gb", d
    devs = json.loads(a["migkit.io/mig-devices"])
    assert len(devs) == len(r["devices"])
EOF
for n in 1 2; do
  sim $n export -o json >"$tmp/export-$n.json" || fail "export $n"
done
python3 - "$tmp/export-1.json" "$tmp/export-2.json" <<'EOF' || fail "simulators hold other instances than reserved"
import json, sys
total = 0
for f in sys.argv[1:]:
    cfg = json.load(open(f))
    for entry in cfg["mig-configs"]["current"]:
        for name, count in (entry.get("mig-devices") or {}).items():
            total += count * len(entry["devices"]) if isinstance(entry["devices"], list) else count
assert total == 9, total
EOF

step "the device plugin in dynamic MIG mode hands each pod its reserved MIG device"
# A python with grpcio for the stand-in kubelet (as test-device-plugin.sh).
if ! grpc_python; then
  [ "${CI:-}" = true ] && fail "python3-grpcio, python3-protobuf or protoc missing (scripts/install-deps)"
  echo "    SKIP (this step): python3-grpcio / protoc not installed"
else
  # Unix socket paths are short (108 bytes): the sockets go to a short temp dir.
  dptmp=$(mktemp -d /tmp/mk-dyn.XXXXXX)
  standin_start "$dptmp" || fail "the stand-in kubelet cannot start"
  MIGKIT_SIM_STATE=$tmp/sim-1.json "$MIGKIT_BIN" --simulate dgx-a100 device-plugin --dynamic-mig \
    --node-name gpu-node-1 --device-plugin-path "$dptmp/dp" >>"$tmp/dp.log" 2>&1 &
  dp_pid=$!
  wait_ev "e['event'] == 'register' and e['resource'] == 'nvidia.com/gpu' and e['accepted']" >/dev/null ||
    fail "the dynamic device plugin did not register nvidia.com/gpu"
  devs=$(wait_ev "e['event'] == 'devices' and e['resource'] == 'nvidia.com/gpu'") || fail "no device list"
  # Expected order: the node's reservations with their instances created,
  # earliest first, ties by namespace/name (mk_claim_match_allocate).
  pods_json >"$tmp/pods-dyn.json"
  order=$(python3 - "$devs" "$tmp/pods-dyn.json" <<'EOF'
import json, sys
devs = json.loads(sys.argv[1])["devices"]
# 8 simulated A100-40GB with MIG on, 7 (1g.5gb's instance count) ids each
assert len(devs) == 56 and all(d["id"].startswith("dyn-GPU-") and d["health"] == "Healthy" for d in devs), devs
assert len({d["id"].split("::")[0] for d in devs}) == 8
pods = []
for p in json.load(open(sys.argv[2]))["items"]:
    a = p["metadata"].get("annotations", {})
    if p["spec"].get("nodeName") != "gpu-node-1" or "migkit.io/mig-reservation" not in a:
        continue
    r = json.loads(a["migkit.io/mig-reservation"])
    mig = json.loads(a["migkit.io/mig-devices"])
    assert len(r["devices"]) == 1, r
    pods.append((r["time"], p["metadata"]["namespace"], p["metadata"]["name"], mig[0]))
assert pods, "no reservation on gpu-node-1"
print(" ".join("%s=%s" % (n, m) for _, _, n, m in sorted(pods)))
EOF
  ) || fail "dynamic device list: $devs"
  id0=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["devices"][0]["id"])' "$devs")
  ids=$(python3 -c 'import json,sys; print(",".join(d["id"] for d in json.loads(sys.argv[1])["devices"][:9]))' "$devs")
  r=$(dcmd preferred nvidia.com/gpu "$ids" - 2)
  python3 -c 'import json,sys; e=json.loads(sys.argv[1]); assert e["ok"] and len(e["ids"][0]) == 2, e' "$r" ||
    fail "GetPreferredAllocation: $r"
  # After each Allocate exactly the pods answered so far are marked (so none
  # before its own Allocate).
  allocated=
  for pm in $order; do
    p=${pm%%=*} mig=${pm#*=}
    r=$(dcmd allocate nvidia.com/gpu "$id0")
    python3 - "$r" "$mig" <<'EOF' || fail "Allocate for $p (want $mig): $r"
import json, sys
e, mig = json.loads(sys.argv[1]), sys.argv[2]
assert e["ok"], e
(c,) = e["responses"]
assert c["envs"] == {"NVIDIA_VISIBLE_DEVICES": mig}, c
EOF
    allocated+=" $p"
    kwait 10 /api/v1/namespaces/default/pods \
      "{p['metadata']['name'] for p in o['items'] if ann(p, 'mig-allocated')} == set('$allocated'.split())" \
      "''" >/dev/null || fail "after the Allocate for $p, the pods marked migkit.io/mig-allocated are not:$allocated"
    echo "    Allocate -> $p: $mig"
  done
  r=$(dcmd allocate nvidia.com/gpu "$id0")
  python3 -c 'import json,sys; e=json.loads(sys.argv[1]); assert not e["ok"] and "no reservation on node" in e["error"], e' \
    "$r" || fail "Allocate with no reservation left: $r"
  # Two devices for one container: no such reservation on the node.
  r=$(dcmd allocate nvidia.com/gpu "$ids")
  python3 -c 'import json,sys; e=json.loads(sys.argv[1]); assert not e["ok"], e' "$r" || fail "9 devices: $r"
  r=$(dcmd allocate nvidia.com/gpu "GPU-not-ours")
  python3 -c 'import json,sys; e=json.loads(sys.argv[1]); assert not e["ok"] and "unknown device" in e["error"], e' \
    "$r" || fail "unknown id: $r"
  kill -TERM "$dp_pid"; wait "$dp_pid" || fail "the dynamic device plugin exited $? on SIGTERM"
  dp_pid=
  echo "0 quit" >&7
  exec 7>&-
  wait "$standin_pid" || true
  standin_pid=
fi

step "a pod that fits nowhere stays Pending with migkit's reason"
pod p-too-big 1 60000
msg=$(wait_pending p-too-big)
grep -q "migkit: .*60000" <<<"$msg" || fail "PodScheduled message: '$msg'"
echo "    reason: $msg"

step "a pod asking two GPUs gets two instances on two GPUs"
pod p-two 2 4000
wait_bound p-two >/dev/null
devs=$(wait_devices p-two)
python3 - "$(ann p-two mig-reservation)" "$devs" <<'EOF' || fail "p-two"
import json, sys
r, d = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert len(r["devices"]) == 2 and len({x["gpu"] for x in r["devices"]}) == 2, r
assert all(x["profile"] == "1g.5gb" for x in r["devices"]), r
assert len(d) == 2 and len(set(d)) == 2, d
EOF

step "restarted extender and agent lose nothing"
kill "$ext_pid"; wait "$ext_pid" 2>/dev/null || true
kill "$ag1_pid"; wait "$ag1_pid" 2>/dev/null || true
start_agent 1; ag1_pid=$!
start_extender; ext_pid=$!
wait_ready "$port"
reservations=$(curl -sf "http://127.0.0.1:$port/metrics" | sed -n 's/^migkit_scheduler_reservations //p')
[ "$reservations" = 10 ] || fail "extender restarted with $reservations reservations, want 10"
pod p-after 1 9000
wait_bound p-after >/dev/null
wait_devices p-after >/dev/null
pods_json >"$tmp/pods.json"
python3 - "$tmp/pods.json" <<'EOF' || fail "overlap after restart"
import json, sys
seen = {}
for p in json.load(open(sys.argv[1]))["items"]:
    a = p["metadata"].get("annotations", {})
    if "migkit.io/mig-reservation" in a:
        r = json.loads(a["migkit.io/mig-reservation"])
        for d in r["devices"]:
            u = set(range(d["placement"]["start"], d["placement"]["start"] + d["placement"]["size"]))
            for o in seen.get((r["node"], d["gpu"]), []):
                assert not (u & o)
            seen.setdefault((r["node"], d["gpu"]), []).append(u)
EOF

step "a deleted pod's instance is destroyed after the grace period"
node=$(kwait 10 /api/v1/namespaces/default/pods/p-20g o 'o["spec"]["nodeName"]')
n=${node#gpu-node-}
uuid=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0])' "$(ann p-20g mig-devices)")
sim "$n" export -o json | grep -q '"3g.20gb"' || fail "3g.20gb not on the simulator before delete"
api DELETE /api/v1/namespaces/default/pods/p-20g -o /dev/null -f || fail "delete p-20g"
gone=0
for ((i = 0; i < 100; i++)); do
  if ! sim "$n" export -o json | grep -q '"3g.20gb"'; then gone=1; break; fi
  sleep 0.2
done
[ "$gone" = 1 ] || fail "the instance of p-20g ($uuid) still exists"
grep -q "destroyed orphan GPU instance" "$tmp/ag$n.log" || fail "agent did not log the destruction"
inv=$(node_inv "$node")
grep -q "$uuid" <<<"$inv" && fail "inventory still lists $uuid"
# Instances of live pods are untouched.
pods_json >"$tmp/pods.json"
kwait 10 /api/v1/nodes o >"$tmp/nodes.json"
python3 - "$tmp/pods.json" "$tmp/nodes.json" <<'EOF' || fail "an instance of a live pod is gone"
import json, sys
pods = {p["metadata"]["name"]: p for p in json.load(open(sys.argv[1]))["items"]}
inv = {n["metadata"]["name"]: n["metadata"]["annotations"]["migkit.io/mig-inventory"]
       for n in json.load(open(sys.argv[2]))["items"]}
for k in range(1, 9):
    p = pods["p-c%d" % k]
    (d,) = json.loads(p["metadata"]["annotations"]["migkit.io/mig-devices"])
    assert d in inv[p["spec"]["nodeName"]], ("instance of p-c%d is gone" % k, d)
EOF

# Applied for real, not with --dry-run=server: the apiserver validates and
# admits the same way, and kubectl 1.20's server dry run took 8-16 s here
# (no controller-manager runs: the Deployment and DaemonSet start no pod).
step "deploy/kubernetes/scheduler.yaml applies; its config checks"
kc create namespace migkit >/dev/null || fail "create namespace"
kc apply -f "$MIGKIT_SOURCE_DIR/deploy/kubernetes/scheduler.yaml" >/dev/null || fail "applying scheduler.yaml failed"
python3 - "$MIGKIT_SOURCE_DIR/deploy/kubernetes/scheduler.yaml" "$tmp/deploy-config.yaml" <<'EOF' ||
import sys
text = open(sys.argv[1]).read()
block = text.split("  scheduler.yaml: |\n", 1)[1].split("  kube-scheduler.yaml: |\n", 1)[0]
open(sys.argv[2], "w").write("".join(l[4:] + "\n" for l in block.splitlines()))
EOF
  fail "no scheduler.yaml in the manifest"
"$MIGKIT_BIN" scheduler check "$tmp/deploy-config.yaml" >/dev/null || fail "the manifest's scheduler.yaml does not check"

echo "PASS"
