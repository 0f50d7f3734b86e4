#!/usr/bin/env bash
# `migkit device-plugin` driven by the kubelet's own device manager
# (shared/tools/kubelet-harness: Kubernetes v1.20.2 devicemanager code, built
# by `scripts/k8s-testenv build` into the cache's bin/): registration in both
# register modes, pod admission through GetPreferredAllocation and Allocate,
# a kubelet restart with checkpoint restore and re-registration, health
# updates seen as capacity, sharing replicas.
#
# The harness binary: $MIGKIT_KUBELET_HARNESS, else <k8s-testenv path>/bin/kubelet-harness.
# Missing, it FAILS under CI=true and is skipped elsewhere.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}"
fail() {
  echo "FAIL: $*" >&2
  for f in "${tmp:-/nonexistent}"/*.log "${tmp:-/nonexistent}"/*.jsonl; do
    [ -f "$f" ] && [ "$f" -nt "$tmp/.mark" ] && { echo "--- $f (last 15 lines)" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}
unset MIG_STRATEGY FAIL_ON_INIT_ERROR PASS_DEVICE_SPECS DEVICE_LIST_STRATEGY DEVICE_ID_STRATEGY CONFIG_FILE \
  NVIDIA_DRIVER_RESOURCE_CONFIG DEVICE_PLUGIN_PATH MIGKIT_LABELS DP_DISABLE_HEALTHCHECKS DP_ENABLE_HEALTHCHECKS

# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh"
need_harness
PY=python3
command -v "$PY" >/dev/null || PY=/usr/bin/python3

plugin_tmp mk-dph
export MIGKIT_HEALTH_RECHECK_MS=1000

state_none=$tmp/none.json
state_mixed=$tmp/mixed.json
MIGKIT_SIM_STATE=$state_mixed "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c mixed >/dev/null \
  || fail "apply mixed"
MIGKIT_SIM_STATE=$state_none "$MIGKIT_BIN" -q --simulate dgx-h100 profiles >/dev/null || fail "create dgx-h100"


# run NAME STATE PLUGIN-ARGS -- HARNESS-ARGS: one harness run against one plugin, in a fresh directory.
run() {
  local name=$1 state=$2; shift 2
  local pargs=()
  while [ "$1" != -- ]; do pargs+=("$1"); shift; done
  shift
  local d=$tmp/$name
  mkdir -p "$d"
  echo "--- $name"
  touch "$tmp/.mark"
  "$harness" --socket-dir "$d" --wait 60 "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.kubelet.log" &
  local hpid=$!
  pids+=("$hpid")
  MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$d" "${pargs[@]}" \
    2>"$tmp/$name.plugin.log" &
  local ppid=$!
  pids+=("$ppid")
  local rc=0
  wait "$hpid" || rc=$?
  kill -TERM "$ppid" 2>/dev/null || echo "$name: the plugin was not running any more" >&2
  local prc=0
  wait "$ppid" || prc=$?
  if [ "$rc" != 0 ] || ! tail -n 1 "$tmp/$name.jsonl" | grep -q '^kubelet-harness: OK'; then
    tail -n 5 "$tmp/$name.jsonl" >&2
    tail -n 20 "$tmp/$name.plugin.log" >&2
    fail "$name: the harness exited $rc"
  fi
  [ "$prc" = 0 ] || fail "$name: the plugin exited $prc after SIGTERM"
  [ -z "$(find "$d" -name 'nvidia-*.sock')" ] || fail "$name: sockets left behind"
}

# Whole GPUs, sync registration (kubelet >= 1.26 calls GetDevicePluginOptions
# inside Register), 2 GPUs admitted through GetPreferredAllocation, restart.
run none-sync "$state_none" -- --resource nvidia.com/gpu --allocate 2 --restart --expect-capacity 8 \
  --probe-preferred
out=$tmp/none-sync.jsonl
jline "$out" "e['event'] == 'register' and e['accepted'] and e['options_match']" >/dev/null \
  || fail "none-sync: no accepted Register with matching options"
a=$(jline "$out" "e['event'] == 'allocate' and e['pod'] == 'harness-pod-1'") || fail "none-sync: no allocation"
"$PY" -c '
import json, sys
e = json.loads(sys.argv[1])
ids = e["devices"]["nvidia.com/gpu"]
env = e["responses"]["nvidia.com/gpu"]["envs"]["NVIDIA_VISIBLE_DEVICES"]
assert e["admitted"], e
assert len(ids) == 2 and sorted(env.split(",")) == sorted(ids), (ids, env)
assert e.get("preferred_honoured", {}).get("nvidia.com/gpu", True), e
' "$a" || fail "none-sync: allocation: $a"
jline "$out" "e['event'] == 'checkpoint' and e['match']" >/dev/null || fail "none-sync: checkpoint not restored"
jline "$out" "e['event'] == 'register' and e['phase'] == 2 and e['accepted']" >/dev/null \
  || fail "none-sync: no re-registration after the kubelet restart"

# The same with v1.20's own registration path.
run none-direct "$state_none" -- --resource nvidia.com/gpu --allocate 1 --restart --register-mode direct \
  --expect-capacity 8

# Mixed strategy, one MIG resource, device specs through the runtime options.
run mixed-mig "$state_mixed" --mig-strategy mixed -- --resource nvidia.com/mig-1g.10gb --allocate 2 --restart \
  --expect-capacity 12
a=$(jline "$tmp/mixed-mig.jsonl" "e['event'] == 'allocate' and e['pod'] == 'harness-pod-1'") \
  || fail "mixed-mig: no allocation"
"$PY" -c '
import json, sys
e = json.loads(sys.argv[1])
ids = e["devices"]["nvidia.com/mig-1g.10gb"]
assert e["admitted"] and len(ids) == 2 and all(i.startswith("MIG-") for i in ids), e
' "$a" || fail "mixed-mig: allocation: $a"

# NUMA: GPUs 0-3 on node 0, 4-7 on node 1 (fixture sysfs); the kubelet's
# single-numa-node policy must get two GPUs of one node.
"$PY" - "$tmp/sys" "$state_none" "$MIGKIT_SIM_BIN" <<'PY' || fail "fixture sysfs"
import json, os, subprocess, sys
env = dict(os.environ, MIGKIT_SIM_STATE=sys.argv[2])
gpus = json.loads(subprocess.run([sys.argv[3], "show", "--json"], env=env, check=True,
                                 capture_output=True).stdout)["gpus"]
for i, g in enumerate(gpus):
    d = os.path.join(sys.argv[1], "bus/pci/devices", g["bus_id"][4:].lower())
    os.makedirs(d)
    open(os.path.join(d, "numa_node"), "w").write("%d\n" % (i // 4))
PY
MIGKIT_SYSFS_ROOT=$tmp/sys run numa "$state_none" -- --resource nvidia.com/gpu --allocate 2 \
  --topology-policy single-numa-node --numa-nodes 2 --expect-capacity 8
jline "$tmp/numa.jsonl" "e['event'] == 'capacity' and sorted(tuple(d.get('numa', [])) for d in e['devices']) == [(0,)] * 4 + [(1,)] * 4" \
  >/dev/null || fail "numa: the kubelet did not get the NUMA nodes: $(grep -m1 capacity "$tmp/numa.jsonl")"
a=$(jline "$tmp/numa.jsonl" "e['event'] == 'allocate' and e['pod'] == 'harness-pod-1'") || fail "numa: no allocation"
numa=$(MIGKIT_SIM_STATE=$state_none "$MIGKIT_SIM_BIN" show --json | "$PY" -c '
import json, sys
ids = json.loads(sys.argv[1])["devices"]["nvidia.com/gpu"]
order = [g["uuid"] for g in json.load(sys.stdin)["gpus"]]
print(sorted({order.index(i) // 4 for i in ids}))' "$a")
[ "$numa" = "[0]" ] || [ "$numa" = "[1]" ] || fail "numa: GPUs from NUMA nodes $numa: $a"

# Sharing: 8 GPUs x 4 replicas.
printf 'version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n' \
  >"$tmp/sharing.yaml"
run shared "$state_none" --config-file "$tmp/sharing.yaml" -- --resource nvidia.com/gpu --allocate 1 \
  --expect-capacity 32

# Health: an Xid on GPU 3 shows as one unhealthy device, then it recovers.
d=$tmp/health
mkdir -p "$d"
echo "--- health"
touch "$tmp/.mark"
"$harness" --socket-dir "$d" --wait 60 --resource nvidia.com/gpu --watch 30 >"$tmp/health.jsonl" \
  2>"$tmp/health.kubelet.log" &
hpid=$!
pids+=("$hpid")
MIGKIT_SIM_STATE=$state_none "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$d" \
  2>"$tmp/health.plugin.log" &
ppid=$!
pids+=("$ppid")
seen() {
  for _ in $(seq 1 300); do jline "$tmp/health.jsonl" "$1" >/dev/null && return 0; sleep 0.1; done
  return 1
}
seen "e['event'] == 'capacity' and e['capacity'] == 8 and e['allocatable'] == 8" || fail "health: never registered"
MIGKIT_SIM_STATE=$state_none "$MIGKIT_SIM_BIN" xid --gpu 3 79 || fail "migkit-sim xid"
seen "e['event'] == 'capacity' and e['unhealthy'] == 1" || fail "health: the Xid never showed as an unhealthy device"
recovered=0
for _ in $(seq 1 300); do
  "$PY" - "$tmp/health.jsonl" <<'PY' && { recovered=1; break; }
import json, sys
caps = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"capacity"' in l]
caps = [e for e in caps if e.get("event") == "capacity"]
bad = [i for i, e in enumerate(caps) if e["unhealthy"] == 1]
sys.exit(0 if bad and any(e["unhealthy"] == 0 and e["allocatable"] == 8 for e in caps[bad[0]:]) else 1)
PY
  sleep 0.1
done
[ "$recovered" = 1 ] || fail "health: the device never recovered"
kill -TERM "$ppid" 2>/dev/null || fail "health: the plugin was not running any more"
wait "$ppid" || fail "health: the plugin exited $? after SIGTERM"
kill "$hpid" 2>/dev/null || true
wait "$hpid" 2>/dev/null || true
echo "PASS"
