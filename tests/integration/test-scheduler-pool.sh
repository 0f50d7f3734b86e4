#!/usr/bin/env bash
# The unified GPU pool end to end (issue 13): the real kube-scheduler 1.20
# (scripts/k8s-testenv) with `migkit scheduler serve` as its extender and
# three fake Nodes whose inventories are published by `migkit scheduler
# node` agents on simulated dgx-a100 machines (8 A100-SXM4-40GB each):
#   pool-mig    operatingmode mig        MIG on every GPU
#   pool-soft   operatingmode hami-core  MIG off, every GPU shared (split 4)
#   pool-mixed  operatingmode mixed      GPUs 0-3 MIG, GPUs 4-7 shared
# Checks: each node's inventory lists its GPUs in the right mode; a pod with
# nvidia.com/vgpu-mode: mig gets a MIG reservation on a MIG GPU and its
# instance is created; one with hami-core gets a soft slice (memoryMiB,
# cores) on a shared GPU, the agent records the GPU's UUID at once and
# publishes the slice with its pod in the inventory; a pod without a mode
# gets one of the two, with migkit.io/vgpu-mode-chosen and a VGPUModeChosen
# Event; a pod that fits nowhere stays Pending with a reason naming both
# modes.
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
. "$(dirname "$0")/sched-lib.sh"
fail_logs=(ext.log ag-mig.log ag-soft.log ag-mixed.log k8s/kube-scheduler.log)

cat >>"$tmp/sched-config.yaml" <<'EOF'
nodeconfig:
  - name: pool-mig
    operatingmode: mig
  - name: pool-soft
    operatingmode: hami-core
    devicesplitcount: 4
  - name: pool-mixed
    operatingmode: mixed
    gpus:
      - {index: 0, mode: mig}
      - {index: 1, mode: mig}
      - {index: 2, mode: mig}
      - {index: 3, mode: mig}
      - {index: 4, mode: hami-core}
      - {index: 5, mode: hami-core}
      - {index: 6, mode: hami-core}
      - {index: 7, mode: hami-core}
EOF
"$MIGKIT_BIN" scheduler check "$tmp/sched-config.yaml" >/dev/null || fail "config check failed"

sched_start_k8s

step "three fake GPU nodes: MIG on every GPU (mig), on none (soft), on GPUs 0-3 (mixed)"
cat >"$tmp/mig.yaml" <<'EOF'
version: v1
mig-configs:
  half:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {}
    - devices: [4, 5, 6, 7]
      mig-enabled: false
EOF
sim mig apply -f "$mig_config" -c all-enabled >/dev/null || fail "enabling MIG on pool-mig failed"
sim mixed apply -f "$tmp/mig.yaml" -c half >/dev/null || fail "enabling MIG on half of pool-mixed failed"
for n in mig soft mixed; do
  fake_gpu_node "pool-$n" 80
done

step "node agents publish the inventories with each GPU's mode"
for n in mig soft mixed; do
  MIGKIT_SIM_STATE=$tmp/sim-$n.json "$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n "pool-$n" \
    -c "$tmp/sched-config.yaml" --grace 2s --resync 2s >>"$tmp/ag-$n.log" 2>&1 &
  pids+=($!)
done
inventory() { node_inv "$1"; }
for n in mig soft mixed; do
  inv=$(wait_inventory "pool-$n")
  python3 - "$n" "$inv" <<'EOF' || fail "inventory of pool-$n: $inv"
import json, sys
n, inv = sys.argv[1], json.loads(sys.argv[2])
modes = [g.get("mode", "mig") for g in inv["gpus"]]
want = {"mig": ["mig"] * 8, "soft": ["hami-core"] * 8, "mixed": ["mig"] * 4 + ["hami-core"] * 4}[n]
assert modes == want, modes
for g in inv["gpus"]:
    if g.get("mode") == "hami-core":
        assert g["softSlices"] == [] and g["profiles"] == [] and not g["mig"], g
        assert g["split"] == (4 if n == "soft" else 10), g
    else:
        assert g["mig"] and len(g["profiles"]) == 5, g
EOF
done

step "the extender serves"
"$MIGKIT_BIN" scheduler serve -c "$tmp/sched-config.yaml" --address 127.0.0.1 --port "$port" \
  >>"$tmp/ext.log" 2>&1 &
pids+=($!)
wait_ready "$port"
curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^migkit_scheduler_nodes 3$' || fail "metrics: $(curl -s "http://127.0.0.1:$port/metrics")"

pod() { # NAME MEM CORES MODE|""
  local a='{}'
  [ -z "$4" ] || a='{"nvidia.com/vgpu-mode":"'"$4"'"}'
  gpu_pod "$1" '{"nvidia.com/gpu":"1","nvidia.com/gpumem":"'"$2"'","nvidia.com/gpucores":"'"$3"'"}' "$a"
}
# check POD NODE MODE: the reservation, the recorded devices and the node's
# inventory agree, and the device sits on a GPU of that mode.
check() {
  local res devs inv
  res=$(ann "$1" mig-reservation)
  devs=$(wait_devices "$1")
  # The agent publishes the slice (or instance) on its next pass.
  inv=$(wait_inventory "$2" "any(x.get('pod') == 'default/$1' for g in i['gpus'] for x in
    (g.get('softSlices', []) if '$3' == 'hami-core' else g['instances']))")
  python3 - "$res" "$devs" "$inv" "$2" "$3" "$1" <<'EOF' || fail "pod $1 on $2 ($3): reservation $res devices $devs inventory $inv"
import json, sys
res, devs, inv = (json.loads(a) for a in sys.argv[1:4])
node, mode, pod = sys.argv[4:7]
assert res["version"] == 1 and res["node"] == node, res
(d,) = res["devices"]
g = next(g for g in inv["gpus"] if g["uuid"] == d["gpu"])
assert g.get("mode", "mig") == mode, (g.get("mode"), mode)
if mode == "hami-core":
    assert d["mode"] == "hami-core" and "profile" not in d, d
    assert devs == [d["gpu"]], devs
    (s,) = [s for s in g["softSlices"] if s["pod"] == "default/" + pod]
    assert s["memoryMiB"] == d["memoryMiB"] and s["cores"] == d["cores"], (s, d)
else:
    assert d.get("mode", "mig") == "mig" and d["profile"], d
    assert len(devs) == 1 and devs[0].startswith("MIG-"), devs
    (i,) = [i for i in g["instances"] if i.get("pod") == "default/" + pod]
    assert i["state"] == "created" and i["migUUID"] == devs[0], i
EOF
}

step "vgpu-mode mig: a MIG instance on a MIG GPU (pool-mig or pool-mixed)"
pod p-mig 19000 0 mig
node=$(wait_bound p-mig)
case $node in pool-mig | pool-mixed) ;; *) fail "p-mig bound to $node" ;; esac
check p-mig "$node" mig
[ -z "$(ann p-mig vgpu-mode-chosen)" ] || fail "p-mig named its mode but got vgpu-mode-chosen"

step "vgpu-mode hami-core: a soft slice of a shared GPU (pool-soft or pool-mixed)"
pod p-soft 8000 30 hami-core
node=$(wait_bound p-soft)
case $node in pool-soft | pool-mixed) ;; *) fail "p-soft bound to $node" ;; esac
check p-soft "$node" hami-core
python3 - "$(ann p-soft mig-reservation)" <<'EOF' || fail "p-soft's limits"
import json, sys
(d,) = json.loads(sys.argv[1])["devices"]
assert d["memoryMiB"] == 8000 and d["cores"] == 30, d
EOF

step "no vgpu-mode: the scheduler chooses, says so on the pod and in an Event"
pod p-any 3000 10 ""
node=$(wait_bound p-any)
chosen=$(ann p-any vgpu-mode-chosen)
case $chosen in mig | hami-core) ;; *) fail "p-any: vgpu-mode-chosen '$chosen'" ;; esac
check p-any "$node" "$chosen"
ev=$(kwait 20 '/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp-any,reason%3DVGPUModeChosen' \
  'o["items"]' '" ".join(e["message"] for e in o["items"])') || fail "no VGPUModeChosen Event for p-any"
grep -q "chose $chosen on node $node" <<<"$ev" || fail "VGPUModeChosen Event: '$ev'"
echo "    p-any: $chosen on $node ($ev)"

step "an isolation pod without a mode (gpucores 100) never gets a shared GPU"
pod p-iso 4000 100 ""
node=$(wait_bound p-iso)
[ "$(ann p-iso vgpu-mode-chosen)" = mig ] || fail "p-iso: vgpu-mode-chosen '$(ann p-iso vgpu-mode-chosen)'"
check p-iso "$node" mig

step "a pod that fits nowhere stays Pending with a reason naming both modes"
pod p-too-big 60000 0 ""
msg=$(wait_pending p-too-big)
grep -q "MIG: " <<<"$msg" && grep -q "hami-core: " <<<"$msg" || fail "PodScheduled message: '$msg'"
echo "    reason: $msg"
echo "PASS"
