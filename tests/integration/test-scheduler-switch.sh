#!/usr/bin/env bash
# The unified pool's idle mode switch end to end (issue 13): the real
# kube-scheduler 1.20 (scripts/k8s-testenv), `migkit scheduler serve` as its
# extender, and a `migkit scheduler node` agent on a simulated dgx-a100
# (A100-SXM4-40GB: a MIG mode change waits for a GPU reset) for one mixed
# node with `modeswitch: idle`: GPU 6 pinned mig, GPU 7 unpinned (MIG off:
# shared), the others disabled.
# Checks: an idle GPU is listed switchable only after the agent's grace
# period; a pod that fits only after a switch is never given GPU 7 while a
# pod holds a slice of it (it stays Pending, GPU 7 keeps MIG off); once GPU 7
# is idle and switchable, the pod lands there, the agent turns MIG on (with
# the reset) and creates its instance; the way back: a hami-core pod waits
# while that instance exists, and gets GPU 7 turned shared again once it
# does not.
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
. "$(dirname "$0")/sched-lib.sh"
fail_logs=(ext.log ag.log k8s/kube-scheduler.log)

cat >>"$tmp/sched-config.yaml" <<'EOF'
nodeconfig:
  - name: pool-sw
    operatingmode: mixed
    modeswitch: idle
    gpus:
      - {index: 0, mode: disabled}
      - {index: 1, mode: disabled}
      - {index: 2, mode: disabled}
      - {index: 3, mode: disabled}
      - {index: 4, mode: disabled}
      - {index: 5, mode: disabled}
      - {index: 6, mode: mig}
EOF
"$MIGKIT_BIN" scheduler check "$tmp/sched-config.yaml" >/dev/null || fail "config check failed"

sched_start_k8s

step "a fake GPU node: MIG on GPU 6 only"
cat >"$tmp/mig.yaml" <<'EOF'
version: v1
mig-configs:
  six:
    - devices: [6]
      mig-enabled: true
      mig-devices: {}
    - devices: [0, 1, 2, 3, 4, 5, 7]
      mig-enabled: false
EOF
sim sw apply -f "$tmp/mig.yaml" -c six >/dev/null || fail "enabling MIG on GPU 6 failed"
fake_gpu_node pool-sw 8

MIGKIT_SIM_STATE=$tmp/sim-sw.json "$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n pool-sw \
  -c "$tmp/sched-config.yaml" --grace 2s --resync 2s >>"$tmp/ag.log" 2>&1 &
pids+=($!)
inventory() { node_inv pool-sw; }
# gpu7 PYTHON-EXPR: waits (up to 60 s) until the expression holds of GPU 7's
# inventory entry `g`; prints the inventory.
gpu7() {
  wait_inventory pool-sw "(lambda g: $1)(next(g for g in i['gpus'] if g['index'] == 7))"
}

step "the agent lists GPU 7 shared, then switchable once idle for its grace; GPU 6 (pinned) never"
gpu7 'g.get("mode") == "hami-core" and not g["mig"]' >/dev/null
gpu7 'g.get("switchable") is True and len(g["profiles"]) == 5' >/dev/null
python3 - "$(inventory)" <<'EOF' || fail "inventory: $(inventory)"
import json, sys
gpus = json.loads(sys.argv[1])["gpus"]
assert [g["index"] for g in gpus] == [6, 7], gpus
assert gpus[0].get("mode", "mig") == "mig" and "switchable" not in gpus[0], gpus[0]
EOF

step "the extender serves"
"$MIGKIT_BIN" scheduler serve -c "$tmp/sched-config.yaml" --address 127.0.0.1 --port "$port" \
  >>"$tmp/ext.log" 2>&1 &
pids+=($!)
wait_ready "$port"

pod() { # NAME MEM MODE
  gpu_pod "$1" '{"nvidia.com/gpu":"1","nvidia.com/gpumem":"'"$2"'"}' '{"nvidia.com/vgpu-mode":"'"$3"'"}'
}
gone() { del_pod "$1"; }
# on_gpu7 POD MODE: its one device is on GPU 7, in that mode.
on_gpu7() {
  python3 - "$(ann "$1" mig-reservation)" "$(inventory)" "$2" <<'EOF' || fail "$1: $(ann "$1" mig-reservation)"
import json, sys
res, inv, mode = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
(d,) = res["devices"]
(g,) = [g for g in inv["gpus"] if g["index"] == 7]
assert d["gpu"] == g["uuid"] and d.get("mode", "mig") == mode, (d, g)
EOF
}

step "a soft slice on GPU 7 and a 7g on GPU 6: nothing is left for a 3g"
pod p-soft 8000 hami-core
[ "$(wait_bound p-soft)" = pool-sw ] || fail "p-soft not on pool-sw"
on_gpu7 p-soft hami-core
pod p-full 40000 mig
[ "$(wait_bound p-full)" = pool-sw ] || fail "p-full not on pool-sw"
case $(wait_devices p-full) in *MIG-*) ;; *) fail "p-full: no MIG device" ;; esac
gpu7 'not g.get("switchable") and len(g["softSlices"]) == 1' >/dev/null

step "a MIG pod that fits only after a switch waits while a pod holds GPU 7"
pod p-wait 19000 mig
msg=$(wait_pending p-wait)
echo "    reason: $msg"
# A negative check, so a window: the agent passes at least once (resync 2 s)
# in it, and must keep MIG off on GPU 7.
sleep 3
gpu7 'g.get("mode") == "hami-core" and not g["mig"] and len(g["softSlices"]) == 1' >/dev/null
grep -q "turned MIG" "$tmp/ag.log" && fail "the agent switched a GPU with a pod on it"

step "GPU 7 freed: switchable only after the grace period (hysteresis)"
# The agent says when it holds an idle GPU back for its grace: a line more
# after the delete (the timing alone cannot tell: on a busy machine the agent
# may publish more than a second after the delete without any hold).
held="idle GPU(s) to pass their grace period"
n0=$(grep -c "$held" "$tmp/ag.log" || true)
t0=$(date +%s.%N)
gone p-soft
gpu7 'g.get("switchable") is True' >/dev/null
t1=$(date +%s.%N)
python3 -c "import sys; d = $t1 - $t0; print('    switchable %.1f s after the delete' % d); sys.exit(d < 1.0)" \
  || fail "GPU 7 listed switchable before its grace period"
[ "$(grep -c "$held" "$tmp/ag.log" || true)" -gt "$n0" ] || fail "the agent did not hold GPU 7 for its grace period"

step "the waiting pod lands on GPU 7; the agent turns MIG on (reset) and creates its instance"
gone p-wait # kube-scheduler would retry it within 60 s; a new one is scheduled at once
pod p-wait 19000 mig
[ "$(wait_bound_retried p-wait)" = pool-sw ] || fail "p-wait not on pool-sw"
case $(wait_devices p-wait) in *MIG-*) ;; *) fail "p-wait: no MIG device" ;; esac
gpu7 'g.get("mode", "mig") == "mig" and g["mig"] and any(i.get("pod") == "default/p-wait" for i in g["instances"])' \
  >/dev/null
on_gpu7 p-wait mig
grep -q "GPU 7: idle, turned MIG on" "$tmp/ag.log" || fail "agent log: no switch of GPU 7"

step "the way back: a hami-core pod waits while the instance exists, then gets GPU 7 shared"
pod p-soft2 2000 hami-core
wait_pending p-soft2 >/dev/null
gone p-wait
gpu7 'g.get("switchable") is True and g.get("split") == 10 and g["instances"] == []' >/dev/null
gone p-soft2
pod p-soft2 2000 hami-core
[ "$(wait_bound_retried p-soft2)" = pool-sw ] || fail "p-soft2 not on pool-sw"
wait_devices p-soft2 >/dev/null
gpu7 'g.get("mode") == "hami-core" and not g["mig"] and len(g["softSlices"]) == 1' >/dev/null
on_gpu7 p-soft2 hami-core
grep -q "GPU 7: idle, turned MIG off" "$tmp/ag.log" || fail "agent log: no switch back of GPU 7"
echo "PASS"
