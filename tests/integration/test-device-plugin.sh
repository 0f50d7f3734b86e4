#!/usr/bin/env bash
# `migkit device-plugin` against a stand-in kubelet (kubelet_standin.py,
# python3-grpcio) on simulated machines: registration per MIG strategy,
# Allocate for every device-list / id strategy and pass-device-specs,
# GetPreferredAllocation with sharing replicas, Xid health and recovery,
# kubelet restart and re-registration, SIGHUP reload, SIGTERM shutdown,
# fail-on-init-error, the NFD feature file.
#
# Nothing here asserts on time: waits are generous (WAIT seconds) and the
# latencies seen (Xid -> Unhealthy in the stream, kubelet restart -> new
# Register) are printed.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
WAIT=${MIGKIT_DP_TEST_WAIT:-30}
here=$MIGKIT_SOURCE_DIR/tests/integration
standin=$here/kubelet_standin.py
fail() { echo "FAIL: $*" >&2; [ -n "${plog:-}" ] && [ -f "$plog" ] && tail -n 30 "$plog" >&2; exit 1; }
unset MIG_STRATEGY FAIL_ON_INIT_ERROR PASS_DEVICE_SPECS DEVICE_LIST_STRATEGY DEVICE_ID_STRATEGY NVIDIA_DRIVER_ROOT \
  NVIDIA_DEV_ROOT CONFIG_FILE NVIDIA_DRIVER_RESOURCE_CONFIG DEVICE_PLUGIN_PATH MIGKIT_LABELS GFD_OUTPUT_FILE \
  NODE_NAME CDI_ANNOTATION_PREFIX DP_DISABLE_HEALTHCHECKS DP_ENABLE_HEALTHCHECKS MIG_PARTED_DEBUG

# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh"
grpc_python || missing "python3-grpcio, python3-protobuf or protoc" scripts/install-deps

plugin_tmp mk-dp
# shellcheck source=k8s-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/k8s-lib.sh"
plugin_cleanup_hook() { k8s_stop_early; }
# The apiserver of the --labels node part (near the end) comes up meanwhile.
k8s=
if [ -n "${MIGKIT_K8S_TESTENV:-}" ] && [ "${MIGKIT_SKIP_K8S:-}" != 1 ]; then
  k8s=1
  "$MIGKIT_K8S_TESTENV" build >/dev/null || fail "k8s-testenv build failed"
  k8s_start_early "$tmp/k8s"
fi
dir=$tmp/dp
mkdir -p "$dir"
out=$tmp/events.jsonl
: >"$out"
export MIGKIT_HEALTH_RECHECK_MS=1000
export MIGKIT_CDI_SPEC_DIR=$tmp/cdi # the cdi-* strategies write a spec (test-cdi.sh checks it); not /var/run/cdi

# ---- the stand-in kubelet ----
mkfifo "$tmp/cmd"
"$PY" "$standin" serve --dir "$dir" --out "$out" --proto "$MIGKIT_SOURCE_DIR/proto/deviceplugin.proto" \
  <"$tmp/cmd" 2>"$tmp/standin.log" &
standin_pid=$!
pids+=("$standin_pid")
exec 7>"$tmp/cmd"
echo 0 >"$tmp/cmd-no"

# wait_ev EXPR [FROM]: prints the first event (JSON) matching EXPR (python, `e`), from line FROM.
wait_ev() {
  "$PY" "$standin" wait --out "$out" --expr "$1" --from "${2:-0}" --timeout "$WAIT" 2>/dev/null
}
# lines: the number of event lines so far (a FROM for later waits).
lines() { wc -l <"$out"; }
# cmd VERB ARGS...: runs a stand-in command and prints its reply (JSON).
cmd() { standin_cmd "$@"; }
cmd_ok() {
  local r
  r=$(cmd "$@")
  [ "$(jq_ "$r" "e['ok']")" = True ] || fail "'$*' failed: $r"
  echo "$r"
}
# jq_ JSON EXPR: evaluates EXPR (python, `e` the parsed JSON) and prints it.
jq_() { "$PY" -c 'import json,sys; e=json.loads(sys.argv[1]); r=eval(sys.argv[2]); print(r if not isinstance(r,(list,dict)) else json.dumps(r))' "$1" "$2"; }

wait_ev "e['event'] == 'listening'" >/dev/null || fail "the stand-in kubelet did not start: $(cat "$tmp/standin.log")"

# ---- the plugin ----
plugin_pid=
plog=
# start_plugin STATE MACHINE ARGS...: starts the device plugin on a state file.
start_plugin() {
  local state=$1 machine=$2; shift 2
  plog=$tmp/plugin-$((++plugin_no)).log
  MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate "$machine" device-plugin --device-plugin-path "$dir" "$@" \
    2>"$plog" &
  plugin_pid=$!
  pids+=("$plugin_pid")
}
plugin_no=0
# stop_plugin: SIGTERM, exit 0, every socket of ours gone.
stop_plugin() {
  kill -TERM "$plugin_pid"
  local rc=0
  wait "$plugin_pid" || rc=$?
  [ "$rc" = 0 ] || fail "the plugin exited $rc after SIGTERM"
  local left
  left=$(find "$dir" -name 'nvidia-*.sock')
  [ -z "$left" ] || fail "sockets left after SIGTERM: $left"
  plugin_pid=
}
# registered FROM RESOURCE...: waits for a Register of each resource after line FROM.
registered() {
  local from=$1; shift
  for r in "$@"; do
    wait_ev "e['event'] == 'register' and e['resource'] == '$r' and e['accepted']" "$from" >/dev/null \
      || fail "no registration of '$r'"
  done
}
# registered_only FROM RESOURCE...: the resources registered after line FROM are exactly these.
registered_only() {
  local from=$1; shift
  local got
  got=$("$PY" -c '
import json, sys
print(" ".join(sorted({json.loads(l)["resource"] for l in open(sys.argv[1]).readlines()[int(sys.argv[2]):]
                       if json.loads(l)["event"] == "register"})))' "$out" "$from")
  [ "$got" = "$(printf '%s\n' "$@" | sort | xargs)" ] || fail "registered: '$got', want '$*'"
}
# devices FROM RESOURCE: the first device list of RESOURCE after line FROM.
devices() {
  wait_ev "e['event'] == 'devices' and e['resource'] == '$2'" "$1" || fail "no ListAndWatch list for '$2'"
}
sim() { MIGKIT_SIM_STATE=$1 "$MIGKIT_SIM_BIN" "${@:2}"; }

# ---- machines ----
state_none=$tmp/h100-none.json
state_mixed=$tmp/h100-mixed.json
state_single=$tmp/h100-single.json
MIGKIT_SIM_STATE=$state_mixed "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c mixed >/dev/null \
  || fail "apply mixed"
MIGKIT_SIM_STATE=$state_single "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c all-1g >/dev/null \
  || fail "apply all-1g"
MIGKIT_SIM_STATE=$state_none "$MIGKIT_BIN" -q --simulate dgx-h100 profiles >/dev/null || fail "create dgx-h100"
gpu_uuids=$(sim "$state_none" show --json | "$PY" -c 'import json,sys; print(",".join(g["uuid"] for g in json.load(sys.stdin)["gpus"]))')
IFS=, read -r -a uuid <<<"$gpu_uuids"
[ "${#uuid[@]}" = 8 ] || fail "dgx-h100 has ${#uuid[@]} GPUs"

echo "--- strategy none: registration, options, the device list"
from=$(lines)
start_plugin "$state_none" dgx-h100
registered "$from" nvidia.com/gpu
registered_only "$from" nvidia.com/gpu
reg=$(wait_ev "e['event'] == 'register' and e['resource'] == 'nvidia.com/gpu'" "$from")
[ "$(jq_ "$reg" "e['endpoint']")" = nvidia-gpu.sock ] || fail "endpoint: $reg"
[ "$(jq_ "$reg" "e['version']")" = v1beta1 ] || fail "version: $reg"
[ "$(jq_ "$reg" "e['plugin_options']['get_preferred_allocation_available']")" = True ] || fail "options: $reg"
[ "$(jq_ "$reg" "e['register_options'] == e['plugin_options']")" = True ] || fail "Register and GetDevicePluginOptions options differ: $reg"
list=$(devices "$from" nvidia.com/gpu)
[ "$(jq_ "$list" "sorted(d['id'] for d in e['devices']) == sorted('$gpu_uuids'.split(','))")" = True ] \
  || fail "device list is not the 8 GPU UUIDs: $list"
[ "$(jq_ "$list" "all(d['health'] == 'Healthy' for d in e['devices'])")" = True ] || fail "not all Healthy: $list"
[ -S "$dir/nvidia-gpu.sock" ] || fail "no socket nvidia-gpu.sock"

echo "--- Allocate: envvar + uuid, two containers"
r=$(cmd_ok allocate nvidia.com/gpu "${uuid[1]},${uuid[0]};${uuid[3]}")
[ "$(jq_ "$r" "e['responses'][0]['envs']")" = "{\"NVIDIA_VISIBLE_DEVICES\": \"${uuid[1]},${uuid[0]}\"}" ] || fail "envvar: $r"
[ "$(jq_ "$r" "e['responses'][1]['envs']['NVIDIA_VISIBLE_DEVICES']")" = "${uuid[3]}" ] || fail "second container: $r"
[ "$(jq_ "$r" "e['responses'][0]['devices'] + e['responses'][0]['mounts']")" = "[]" ] || fail "device specs without --pass-device-specs: $r"
cmd_ok prestart nvidia.com/gpu "${uuid[0]}" >/dev/null

echo "--- Xid on a whole GPU: Unhealthy, then Healthy again"
from=$(lines)
t0=$("$PY" -c 'import time; print(time.time())')
sim "$state_none" xid --gpu 2 79 || fail "migkit-sim xid"
ev=$(wait_ev "e['event'] == 'devices' and any(d['health'] == 'Unhealthy' for d in e['devices'])" "$from") \
  || fail "GPU 2 never turned Unhealthy"
[ "$(jq_ "$ev" "[d['id'] for d in e['devices'] if d['health'] == 'Unhealthy']")" = "[\"${uuid[2]}\"]" ] \
  || fail "want exactly GPU 2 Unhealthy: $ev"
echo "Xid -> Unhealthy in the stream: $(jq_ "$ev" "'%.3f s' % (e['t'] - $t0)")"
ev=$(wait_ev "e['event'] == 'devices' and all(d['health'] == 'Healthy' for d in e['devices'])" "$from") \
  || fail "GPU 2 never recovered"
echo "Unhealthy -> Healthy (recovery rule, recheck 1 s): $(jq_ "$ev" "'%.3f s' % (e['t'] - $t0)")"

echo "--- kubelet restart: sockets deleted, kubelet.sock re-created, re-registration"
from=$(lines)
r=$(cmd_ok restart)
t_restart=$(jq_ "$r" "e['t']")
registered "$from" nvidia.com/gpu
reg=$(wait_ev "e['event'] == 'register' and e['resource'] == 'nvidia.com/gpu'" "$from")
echo "kubelet restart -> Register: $(jq_ "$reg" "'%.3f s' % (e['t'] - $t_restart)")"
list=$(devices "$from" nvidia.com/gpu)
[ "$(jq_ "$list" "len(e['devices'])")" = 8 ] || fail "after the restart: $list"
[ -S "$dir/nvidia-gpu.sock" ] || fail "socket not re-created"
r=$(cmd_ok allocate nvidia.com/gpu "${uuid[0]}")
[ "$(jq_ "$r" "e['responses'][0]['envs']['NVIDIA_VISIBLE_DEVICES']")" = "${uuid[0]}" ] || fail "Allocate after restart: $r"

echo "--- SIGTERM: clean exit, sockets removed, stream ended"
from=$(lines)
stop_plugin
wait_ev "e['event'] == 'stream_end' and e['resource'] == 'nvidia.com/gpu'" "$from" >/dev/null || fail "stream not ended"

echo "--- index ids, volume-mounts, CDI, pass-device-specs with fixture /dev"
mkdir -p "$tmp/host/dev" "$tmp/host/proc/driver/nvidia-caps"
touch "$tmp/host/dev/nvidiactl" "$tmp/host/dev/nvidia-uvm"
# mig-minors as the driver writes it: gpu<minor>/gi<g>/access and gpu<minor>/gi<g>/ci<c>/access.
"$PY" - "$tmp/host/proc/driver/nvidia-caps/mig-minors" <<'PY'
import sys
n = 3
with open(sys.argv[1], "w") as f:
    f.write("config 1\nmonitor 2\n")
    for g in range(8):
        for gi in range(15):
            f.write("gpu%d/gi%d/access %d\n" % (g, gi, n)); n += 1
            for ci in range(8):
                f.write("gpu%d/gi%d/ci%d/access %d\n" % (g, gi, ci, n)); n += 1
PY
# NUMA nodes in a fixture sysfs: GPUs 0-3 on node 0, 4-6 on node 1, GPU 7 unknown (-1).
sim "$state_none" show --json | "$PY" -c '
import json, os, sys
for i, g in enumerate(json.load(sys.stdin)["gpus"]):
    d = os.path.join(sys.argv[1], "bus/pci/devices", g["bus_id"][4:].lower())
    os.makedirs(d)
    open(os.path.join(d, "numa_node"), "w").write("%d\n" % (0 if i < 4 else 1 if i < 7 else -1))' "$tmp/host/sys" \
  || fail "fixture sysfs"
from=$(lines)
MIGKIT_DEV_ROOT=$tmp/host/dev MIGKIT_PROC_ROOT=$tmp/host/proc MIGKIT_SYSFS_ROOT=$tmp/host/sys \
  start_plugin "$state_none" dgx-h100 --device-id-strategy index --device-list-strategy envvar,volume-mounts \
  --pass-device-specs=true --nvidia-driver-root /run/nvidia/driver
registered "$from" nvidia.com/gpu
list=$(devices "$from" nvidia.com/gpu)
[ "$(jq_ "$list" "[d['numa'] for d in sorted(e['devices'], key=lambda d: '$gpu_uuids'.split(',').index(d['id']))]")" = \
  "[[0], [0], [0], [0], [1], [1], [1], null]" ] || fail "NUMA topology from sysfs: $list"
r=$(cmd_ok allocate nvidia.com/gpu "${uuid[5]},${uuid[3]}")
[ "$(jq_ "$r" "e['responses'][0]['envs']['NVIDIA_VISIBLE_DEVICES']")" = /var/run/nvidia-container-devices ] \
  || fail "volume-mounts env: $r"
[ "$(jq_ "$r" "[(m['container_path'], m['host_path']) for m in e['responses'][0]['mounts']]")" = \
  '[["/var/run/nvidia-container-devices/5", "/dev/null"], ["/var/run/nvidia-container-devices/3", "/dev/null"]]' ] \
  || fail "volume-mounts with index ids: $r"
specs=$(jq_ "$r" "[(d['container_path'], d['host_path'], d['permissions']) for d in e['responses'][0]['devices']]")
want='[["/dev/nvidiactl", "/run/nvidia/driver/dev/nvidiactl", "rw"], ["/dev/nvidia-uvm", "/run/nvidia/driver/dev/nvidia-uvm", "rw"], ["/dev/nvidia5", "/run/nvidia/driver/dev/nvidia5", "rw"], ["/dev/nvidia3", "/run/nvidia/driver/dev/nvidia3", "rw"]]'
[ "$specs" = "$want" ] || fail "device specs: got $specs, want $want"
stop_plugin

from=$(lines)
start_plugin "$state_none" dgx-h100 --device-list-strategy cdi-annotations,cdi-cri
registered "$from" nvidia.com/gpu
r=$(cmd_ok allocate nvidia.com/gpu "${uuid[0]},${uuid[1]}")
[ "$(jq_ "$r" "e['responses'][0]['envs']")" = "{}" ] || fail "CDI only: no NVIDIA_VISIBLE_DEVICES wanted: $r"
cdi="k8s.device-plugin.nvidia.com/gpu=${uuid[0]},k8s.device-plugin.nvidia.com/gpu=${uuid[1]}"
[ "$(jq_ "$r" "list(e['responses'][0]['annotations'].values()) == ['$cdi'] and all(k.startswith('cdi.k8s.io/nvidia-device-plugin_') for k in e['responses'][0]['annotations'])")" = True ] \
  || fail "CDI annotation: $r"
[ "$(jq_ "$r" "e['responses'][0]['cdi_devices']")" = \
  "[\"k8s.device-plugin.nvidia.com/gpu=${uuid[0]}\", \"k8s.device-plugin.nvidia.com/gpu=${uuid[1]}\"]" ] \
  || fail "cdi_devices: $r"
stop_plugin

echo "--- strategy mixed on a mixed layout: one resource per profile, MIG Xid"
from=$(lines)
MIGKIT_DEV_ROOT=$tmp/host/dev MIGKIT_PROC_ROOT=$tmp/host/proc \
  start_plugin "$state_mixed" dgx-h100 --mig-strategy mixed --pass-device-specs=true
registered "$from" nvidia.com/gpu nvidia.com/mig-1g.10gb nvidia.com/mig-2g.20gb nvidia.com/mig-3g.40gb
registered_only "$from" nvidia.com/gpu nvidia.com/mig-1g.10gb nvidia.com/mig-2g.20gb nvidia.com/mig-3g.40gb
for pair in gpu:2 mig-1g.10gb:12 mig-2g.20gb:6 mig-3g.40gb:6; do
  list=$(devices "$from" "nvidia.com/${pair%%:*}")
  [ "$(jq_ "$list" "len(e['devices'])")" = "${pair##*:}" ] || fail "${pair%%:*}: want ${pair##*:} devices: $list"
done
[ -S "$dir/nvidia-mig-1g.10gb.sock" ] || fail "no socket nvidia-mig-1g.10gb.sock"
list=$(devices "$from" nvidia.com/mig-1g.10gb)
[ "$(jq_ "$list" "all(d['id'].startswith('MIG-') for d in e['devices'])")" = True ] || fail "MIG ids: $list"
# A 1g.10gb device of GPU 2: its GI and CI from the simulator.
read -r mig gi ci < <(sim "$state_mixed" show --json | "$PY" -c '
import json, sys
g = json.load(sys.stdin)["gpus"][2]
for i in g["gpu_instances"]:
    for c in i["compute_instances"]:
        if c.get("profile_name", c.get("name", "")).startswith("1g"):
            print(c["uuid"], i["id"], c["id"]); sys.exit(0)
sys.exit(1)') || fail "no 1g device on GPU 2 in the simulator state"
r=$(cmd_ok allocate nvidia.com/mig-1g.10gb "$mig")
[ "$(jq_ "$r" "e['responses'][0]['envs']['NVIDIA_VISIBLE_DEVICES']")" = "$mig" ] || fail "MIG envvar: $r"
specs=$(jq_ "$r" "[d['container_path'] for d in e['responses'][0]['devices']]")
gicap=$(grep "^gpu2/gi$gi/access " "$tmp/host/proc/driver/nvidia-caps/mig-minors" | cut -d' ' -f2)
cicap=$(grep "^gpu2/gi$gi/ci$ci/access " "$tmp/host/proc/driver/nvidia-caps/mig-minors" | cut -d' ' -f2)
want="[\"/dev/nvidiactl\", \"/dev/nvidia-uvm\", \"/dev/nvidia2\", \"/dev/nvidia-caps/nvidia-cap$gicap\", \"/dev/nvidia-caps/nvidia-cap$cicap\"]"
[ "$specs" = "$want" ] || fail "MIG device specs: got $specs, want $want"
from=$(lines)
t0=$("$PY" -c 'import time; print(time.time())')
sim "$state_mixed" xid --gpu 2 --gi "$gi" --ci "$ci" 48 || fail "migkit-sim xid (MIG)"
ev=$(wait_ev "e['event'] == 'devices' and e['resource'] == 'nvidia.com/mig-1g.10gb' and any(d['health'] == 'Unhealthy' for d in e['devices'])" "$from") \
  || fail "the MIG device never turned Unhealthy"
[ "$(jq_ "$ev" "[d['id'] for d in e['devices'] if d['health'] == 'Unhealthy']")" = "[\"$mig\"]" ] \
  || fail "want exactly $mig Unhealthy: $ev"
echo "MIG Xid -> Unhealthy in the stream: $(jq_ "$ev" "'%.3f s' % (e['t'] - $t0)")"
wait_ev "e['event'] == 'devices' and e['resource'] == 'nvidia.com/mig-1g.10gb' and all(d['health'] == 'Healthy' for d in e['devices'])" "$from" >/dev/null \
  || fail "the MIG device never recovered"
# Only the resource of that device re-sent its list (the others share GPU 2).
others=$("$PY" -c '
import json, sys
print(sum(1 for l in open(sys.argv[1]).readlines()[int(sys.argv[2]):]
          if json.loads(l)["event"] == "devices" and json.loads(l)["resource"] != "nvidia.com/mig-1g.10gb"))' "$out" "$from")
[ "$others" = 0 ] || fail "$others lists re-sent by resources without a changed device"
stop_plugin

echo "--- strategy single: all 1g.10gb -> nvidia.com/gpu; invalid layout -> error"
from=$(lines)
start_plugin "$state_single" dgx-h100 --mig-strategy single
registered "$from" nvidia.com/gpu
list=$(devices "$from" nvidia.com/gpu)
[ "$(jq_ "$list" "len(e['devices'])")" = 56 ] || fail "single: want 56 MIG devices: $list"
registered_only "$from" nvidia.com/gpu
[ "$(jq_ "$list" "all(d['id'].startswith('MIG-') for d in e['devices'])")" = True ] || fail "single: MIG ids: $list"
stop_plugin
rc=0
MIGKIT_SIM_STATE=$state_mixed "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$dir" \
  --mig-strategy single 2>"$tmp/single.log" || rc=$?
[ "$rc" = 1 ] || fail "single on a mixed layout exited $rc, want 1"
grep -qi "mig" "$tmp/single.log" || fail "single on a mixed layout: unclear error: $(cat "$tmp/single.log")"

echo "--- fail-on-init-error"
rc=0
MIGKIT_NVML_LIB=$tmp/none.so "$MIGKIT_BIN" device-plugin --device-plugin-path "$dir" 2>"$tmp/init.log" || rc=$?
[ "$rc" = 1 ] || fail "no NVML with fail-on-init-error: exit $rc, want 1"
plog=$tmp/init2.log
MIGKIT_NVML_LIB=$tmp/none.so FAIL_ON_INIT_ERROR=false "$MIGKIT_BIN" device-plugin --device-plugin-path "$dir" \
  2>"$plog" &
plugin_pid=$!
pids+=("$plugin_pid")
for _ in $(seq 1 $((WAIT * 10))); do grep -q "serving nothing" "$plog" && break; sleep 0.1; done
grep -q "serving nothing" "$plog" || fail "FAIL_ON_INIT_ERROR=false: no 'serving nothing' line"
kill -0 "$plugin_pid" || fail "FAIL_ON_INIT_ERROR=false: the plugin exited"
stop_plugin

echo "--- sharing: time-slicing replicas, least-shared-first, SIGHUP reload, NFD file"
cat >"$tmp/sharing.yaml" <<'EOF'
version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
EOF
printf 'Test Machine\n' >"$tmp/product"
from=$(lines)
start_plugin "$state_none" dgx-h100 --config-file "$tmp/sharing.yaml" --labels nfd-file \
  --nfd-features-file "$tmp/features" --machine-type-file "$tmp/product"
registered "$from" nvidia.com/gpu
list=$(devices "$from" nvidia.com/gpu)
[ "$(jq_ "$list" "sorted(d['id'] for d in e['devices']) == sorted('%s::%d' % (u, k) for u in '$gpu_uuids'.split(',') for k in range(4))")" = True ] \
  || fail "replica ids: $list"
r=$(cmd_ok allocate nvidia.com/gpu "${uuid[4]}::2")
[ "$(jq_ "$r" "e['responses'][0]['envs']['NVIDIA_VISIBLE_DEVICES']")" = "${uuid[4]}" ] || fail "replica Allocate: $r"
# GPU 0 has 1 replica left, GPU 1 two, the others four: size 2 takes the two least
# shared GPUs of the smallest UUIDs among those with four left, one replica each.
avail=$("$PY" -c '
import sys
u = sys.argv[1].split(",")
ids = ["%s::3" % u[0]] + ["%s::%d" % (u[1], k) for k in (2, 3)] + ["%s::%d" % (x, k) for x in u[2:] for k in range(4)]
print(",".join(ids))' "$gpu_uuids")
want=$("$PY" -c '
import sys
u = sys.argv[1].split(",")
print(",".join(sorted("%s::0" % x for x in sorted(u[2:])[:2])))' "$gpu_uuids")
r=$(cmd_ok preferred nvidia.com/gpu "$avail" - 2)
[ "$(jq_ "$r" "','.join(sorted(e['ids'][0]))")" = "$want" ] || fail "least-shared-first: got $r, want $want"
# must include a replica of GPU 0: the other slot goes to a least shared GPU.
r=$(cmd_ok preferred nvidia.com/gpu "$avail" "${uuid[0]}::3" 2)
[ "$(jq_ "$r" "len(e['ids'][0]) == 2 and '${uuid[0]}::3' in e['ids'][0] and not any(i.startswith('${uuid[1]}') for i in e['ids'][0])")" = True ] \
  || fail "must_include: $r"
[ -f "$tmp/features" ] || fail "no NFD feature file"
grep -qx 'nvidia.com/gpu.replicas=4' "$tmp/features" || fail "feature file lacks gpu.replicas=4: $(cat "$tmp/features")"
grep -qx 'nvidia.com/gpu.machine=Test-Machine' "$tmp/features" || fail "feature file lacks gpu.machine"
MIGKIT_SIM_STATE=$state_none "$MIGKIT_BIN" --simulate dgx-h100 labels --config-file "$tmp/sharing.yaml" \
  --machine-type-file "$tmp/product" --no-timestamp >"$tmp/labels.txt"
grep -v '^nvidia.com/gfd.timestamp=' "$tmp/features" | diff -u "$tmp/labels.txt" - || fail "feature file differs from 'migkit labels'"
sed -i 's/replicas: 4/replicas: 2/' "$tmp/sharing.yaml"
from=$(lines)
t0=$("$PY" -c 'import time; print(time.time())')
kill -HUP "$plugin_pid"
registered "$from" nvidia.com/gpu
reg=$(wait_ev "e['event'] == 'register' and e['resource'] == 'nvidia.com/gpu'" "$from")
echo "SIGHUP -> Register: $(jq_ "$reg" "'%.3f s' % (e['t'] - $t0)")"
list=$(devices "$from" nvidia.com/gpu)
[ "$(jq_ "$list" "len(e['devices'])")" = 16 ] || fail "after SIGHUP with replicas 2: $list"
for _ in $(seq 1 $((WAIT * 10))); do grep -qx 'nvidia.com/gpu.replicas=2' "$tmp/features" && break; sleep 0.1; done
grep -qx 'nvidia.com/gpu.replicas=2' "$tmp/features" || fail "feature file not refreshed on SIGHUP"
stop_plugin
[ ! -e "$tmp/features" ] || fail "feature file left after SIGTERM"

echo "--- --resource-config (iktos form): rename with replicas"
from=$(lines)
start_plugin "$state_none" dgx-h100 --resource-config gpu:gpu-shared:2
registered "$from" nvidia.com/gpu-shared
list=$(devices "$from" nvidia.com/gpu-shared)
[ "$(jq_ "$list" "len(e['devices'])")" = 16 ] || fail "--resource-config: $list"
stop_plugin

echo "--- errors: an unknown id, an id listed twice, a bad allocation size"
from=$(lines)
start_plugin "$state_none" dgx-h100
registered "$from" nvidia.com/gpu
r=$(cmd allocate nvidia.com/gpu "GPU-00000000-0000-0000-0000-000000000000")
[ "$(jq_ "$r" "e['ok']")" = False ] || fail "an unknown id was allocated: $r"
[ "$(jq_ "$r" "e['code']")" = StatusCode.INVALID_ARGUMENT ] || fail "unknown id: want INVALID_ARGUMENT: $r"
r=$(cmd allocate nvidia.com/gpu "${uuid[1]},${uuid[0]},${uuid[1]}")
[ "$(jq_ "$r" "e['ok'] == False and e['code'] == 'StatusCode.INVALID_ARGUMENT' and \"'${uuid[1]}' is listed twice\" in e['error']")" = True ] \
  || fail "a device id listed twice in one Allocate: want INVALID_ARGUMENT naming it: $r"
r=$(cmd preferred nvidia.com/gpu "${uuid[0]},${uuid[1]},${uuid[0]}" - 1)
[ "$(jq_ "$r" "e['ok'] == False and e['code'] == 'StatusCode.INVALID_ARGUMENT' and \"'${uuid[0]}' is listed twice\" in e['error']")" = True ] \
  || fail "a device id listed twice in GetPreferredAllocation: want INVALID_ARGUMENT naming it: $r"
r=$(cmd preferred nvidia.com/gpu "${uuid[0]},${uuid[1]}" - 0)
[ "$(jq_ "$r" "e['ok']")" = False ] || fail "allocation_size 0 was answered: $r"
r=$(cmd preferred nvidia.com/gpu "${uuid[0]},GPU-nope" - 1)
[ "$(jq_ "$r" "e['ok']")" = False ] || fail "an unknown available id was answered: $r"
many=$("$PY" -c 'import sys; print(";".join([sys.argv[1]] * 1025))' "${uuid[0]}")
r=$(cmd allocate nvidia.com/gpu "$many")
[ "$(jq_ "$r" "e['ok'] == False and e['code'] == 'StatusCode.RESOURCE_EXHAUSTED'")" = True ] \
  || fail "1025 containers in one Allocate: want RESOURCE_EXHAUSTED: $(jq_ "$r" "e.get('code')")"
r=$(cmd_ok allocate nvidia.com/gpu "${uuid[0]}")
stop_plugin

echo "--- --labels node against a real kube-apiserver (k8s-testenv), the manifest"
if [ -z "$k8s" ]; then
  echo "(skipped: no MIGKIT_K8S_TESTENV)"
else
  k8s_env_early || fail "k8s-testenv start failed"
  kc() { "$MIGKIT_K8S_KUBECTL" "$@"; }
  # The plugin reaches the apiserver through a TCP proxy (tcp_proxy.py): the
  # outage below is the proxy's, so that the apiserver need not start twice.
  api_port=${MIGKIT_K8S_SERVER##*:}
  api_port=${api_port%%/*}
  # proxy PORT: starts the proxy on PORT (0: a free one), sets proxy_pid and proxy_port.
  proxy() {
    rm -f "$tmp/proxy.port"
    "$PY" "$here/tcp_proxy.py" "$1" "$api_port" >"$tmp/proxy.port" 2>>"$tmp/proxy.log" &
    proxy_pid=$!
    pids+=("$proxy_pid")
    for _ in $(seq 1 $((WAIT * 10))); do [ -s "$tmp/proxy.port" ] && break; sleep 0.1; done
    proxy_port=$(head -1 "$tmp/proxy.port")
    [ -n "$proxy_port" ] || fail "the TCP proxy did not start: $(cat "$tmp/proxy.log")"
  }
  proxy 0
  sed "s|^\( *server: https://127.0.0.1:\)$api_port\$|\1$proxy_port|" "$KUBECONFIG" >"$tmp/kubeconfig-proxy"
  grep -q "server: https://127.0.0.1:$proxy_port\$" "$tmp/kubeconfig-proxy" || fail "no server line for the proxy: $(cat "$KUBECONFIG")"
  printf '%s\n' 'apiVersion: v1' 'kind: Node' 'metadata:' '  name: gpu-node-1' '  labels:' \
    '    nvidia.com/mig.config: mixed' '    nvidia.com/gpu.deploy.device-plugin: "true"' >"$tmp/node.yaml"
  kc apply -f "$tmp/node.yaml" >/dev/null || fail "create the Node"
  # node_labels: the Node's labels as sorted key=value lines.
  node_labels() {
    kc get node gpu-node-1 -o json | "$PY" -c '
import json, sys
for k, v in sorted(json.load(sys.stdin)["metadata"].get("labels", {}).items()):
    print("%s=%s" % (k, v))'
  }
  # wait_label KEY=VALUE | KEY absent: until the Node has that label / no longer has KEY.
  wait_label() {
    for _ in $(seq 1 $((WAIT * 10))); do
      if [ "${2:-}" = absent ]; then
        node_labels | grep >/dev/null "^$1=" || return 0
      else
        node_labels | grep -x >/dev/null "$1" && return 0
      fi
      sleep 0.1
    done
    return 1
  }
  printf 'version: v1\nflags:\n  migStrategy: mixed\n' >"$tmp/mixed.yaml"
  from=$(lines)
  start_plugin "$state_mixed" dgx-h100 --config-file "$tmp/mixed.yaml" --labels node --node-name gpu-node-1 \
    --machine-type-file "$tmp/product" --kubeconfig "$tmp/kubeconfig-proxy" --retry-interval 3s
  registered "$from" nvidia.com/mig-1g.10gb
  wait_label nvidia.com/mig-1g.10gb.count=12 || fail "the Node never got the mixed labels: $(node_labels)"
  MIGKIT_SIM_STATE=$state_mixed "$MIGKIT_BIN" --simulate dgx-h100 labels --config-file "$tmp/mixed.yaml" \
    --machine-type-file "$tmp/product" --no-timestamp >"$tmp/want-labels.txt"
  node_labels | grep -v -e '^nvidia.com/mig.config=' -e '^nvidia.com/gpu.deploy' -e 'kubernetes.io/' \
    >"$tmp/got-labels.txt" || true
  diff -u "$tmp/want-labels.txt" "$tmp/got-labels.txt" || fail "Node labels differ from 'migkit labels'"
  # Back to strategy none: the mig-* labels we set go, the others stay.
  printf 'version: v1\nflags:\n  migStrategy: none\n' >"$tmp/mixed.yaml"
  kill -HUP "$plugin_pid"
  wait_label nvidia.com/mig-1g.10gb.count absent || fail "stale MIG labels not removed: $(node_labels)"
  wait_label nvidia.com/mig.strategy absent || fail "stale mig.strategy not removed: $(node_labels)"
  node_labels | grep -x >/dev/null 'nvidia.com/mig.config=mixed' || fail "the manager's label was removed"
  node_labels | grep -x >/dev/null 'nvidia.com/gpu.deploy.device-plugin=true' || fail "the operator's label was removed"
  node_labels | grep -x >/dev/null 'nvidia.com/gpu.count=8' || fail "gpu.count after SIGHUP: $(node_labels)"
  # The apiserver away (its connections closed, new ones refused): the plugin
  # still reloads and registers (labels go through a thread of their own),
  # and labels the Node once it is back.
  kill -KILL "$proxy_pid"
  wait "$proxy_pid" 2>/dev/null || true
  printf 'version: v1\nflags:\n  migStrategy: mixed\n' >"$tmp/mixed.yaml"
  from=$(lines)
  failed=$(grep -c "Cannot label node 'gpu-node-1'" "$plog" || true)
  kill -HUP "$plugin_pid"
  registered "$from" nvidia.com/mig-1g.10gb
  # Back once the plugin has met the outage (a labelling that failed).
  for _ in $(seq 1 $((WAIT * 10))); do
    [ "$(grep -c "Cannot label node 'gpu-node-1'" "$plog" || true)" -gt "$failed" ] && break
    sleep 0.1
  done
  [ "$(grep -c "Cannot label node 'gpu-node-1'" "$plog" || true)" -gt "$failed" ] ||
    fail "no failed labelling while the apiserver was away"
  grep -q "Cannot label node 'gpu-node-1'.*retrying in 3s" "$plog" || fail "--retry-interval 3s not used: $(grep "Cannot label" "$plog" | tail -1)"
  proxy "$proxy_port"
  # The manifest (while the labeller waits for its retry, --retry-interval 3s): valid
  # for the apiserver; its ServiceAccount may patch Nodes, not delete them.
  kc apply --dry-run=server -f "$MIGKIT_SOURCE_DIR/deploy/kubernetes/device-plugin.yaml" >"$tmp/apply.out" 2>&1 \
    || fail "deploy/kubernetes/device-plugin.yaml: $(cat "$tmp/apply.out")"
  kc apply -f "$MIGKIT_SOURCE_DIR/deploy/kubernetes/device-plugin.yaml" >/dev/null || fail "apply the manifest"
  sa=system:serviceaccount:kube-system:migkit-device-plugin
  [ "$(kc auth can-i --as="$sa" patch nodes)" = yes ] || fail "the ServiceAccount cannot patch nodes"
  [ "$(kc auth can-i --as="$sa" delete nodes 2>/dev/null || true)" = no ] || fail "the ServiceAccount may delete nodes"
  WAIT=$((WAIT * 3)) wait_label nvidia.com/mig-1g.10gb.count=12 || fail "labels not published after the outage"
  stop_plugin
fi

echo "--- --kubelet-socket '': serve without registering"
mkdir -p "$tmp/dp3"
plog=$tmp/noreg.log
MIGKIT_SIM_STATE=$state_none "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$tmp/dp3" \
  --kubelet-socket '' 2>"$plog" &
plugin_pid=$!
pids+=("$plugin_pid")
for _ in $(seq 1 $((WAIT * 10))); do [ -S "$tmp/dp3/nvidia-gpu.sock" ] && break; sleep 0.1; done
[ -S "$tmp/dp3/nvidia-gpu.sock" ] || fail "--kubelet-socket '': not serving"
kill -TERM "$plugin_pid"
wait "$plugin_pid" || fail "--kubelet-socket '': exit $?"
! grep -q -e "kubelet socket" -e "Registered" "$plog" || fail "--kubelet-socket '': tried to register"
[ ! -e "$tmp/dp3/nvidia-gpu.sock" ] || fail "--kubelet-socket '': socket left"

echo "--- bad flags"
rc=0; "$MIGKIT_BIN" device-plugin --mig-strategy bogus 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--mig-strategy bogus exited $rc, want 2"
rc=0; "$MIGKIT_BIN" device-plugin --device-list-strategy envvar,nope 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--device-list-strategy nope exited $rc, want 2"

cmd_ok quit >/dev/null
wait "$standin_pid" || fail "the stand-in kubelet failed: $(cat "$tmp/standin.log")"
echo "PASS"
