#!/usr/bin/env bash
# The dynamic device plugin follows a GPU's MIG mode (issue 13: the node
# agent switches an idle GPU between shared and MIG). A shared GPU offers
# the node's split count of nvidia.com/gpu ids, a MIG GPU its largest
# instance count (7 on an A100): when GPU 0 of a simulated DGX A100 (MIG
# off, split 4: 32 ids) turns MIG on and is reset, the plugin re-sends 35
# ids (7 of them GPU 0's) without a restart, and 32 again when it turns
# back. Against the stand-in kubelet (python3-grpcio); the mode is changed
# with the simulator's nvidia-smi, as an operator would; a stub apiserver
# serves the plugin's kubeconfig.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_SMI:?}" "${MIGKIT_NVML_LIB:?}"
# shellcheck source=plugin-lib.sh
. "$(dirname "$0")/plugin-lib.sh"
plugin_tmp test-dp-modeswitch
grpc_python || missing "python3-grpcio, python3-protobuf or protoc" scripts/install-deps
standin=$(dirname "$0")/kubelet_standin.py
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
die() { echo "FAIL: $*" >&2; tail -n 20 "$tmp/dp.log" >&2 || true; exit 1; }
unset NODE_NAME DEVICE_SPLIT_COUNT DEVICE_LIST_STRATEGY
export MIGKIT_SIM_MACHINE=dgx-a100 MIGKIT_SIM_STATE=$tmp/sim.json MIGKIT_NVML_LIB

"$MIGKIT_BIN" -q --simulate dgx-a100 profiles >/dev/null || die "create the simulated machine"
gpu0=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"][0]["uuid"])' "$MIGKIT_SIM_STATE")
printf 'version: v1\nnodeconfig:\n  - name: node-1\n    operatingmode: mixed\n    devicesplitcount: 4\n' \
  >"$tmp/scheduler.yaml"

# The plugin's apiserver (it lists the node's pods at Allocate; none here).
. "$(dirname "$0")/stub-apiserver.sh"
stub_apiserver_start "$tmp" --node node-1 || die "the stub apiserver did not start"
pids+=("$stub_api_pid")

mkdir -p "$tmp/dp"
ev=$tmp/events.jsonl
mkfifo "$tmp/cmd"
"$PY" "$standin" serve --dir "$tmp/dp" --out "$ev" <"$tmp/cmd" 2>"$tmp/standin.log" &
pids+=($!)
exec 7>"$tmp/cmd"
# wait_ev EXPR [TIMEOUT [FROM]]: the first event from line FROM (0-based) that EXPR holds for.
wait_ev() { "$PY" "$standin" wait --out "$ev" --expr "$1" --timeout "${2:-30}" --from "${3:-0}" 2>/dev/null; }
wait_ev "e['event'] == 'listening'" >/dev/null || die "the stand-in kubelet did not start"

MIGKIT_SCHEDULER_CONFIG=$tmp/scheduler.yaml "$MIGKIT_BIN" --simulate dgx-a100 device-plugin --dynamic-mig \
  --node-name node-1 --kubeconfig "$tmp/kubeconfig" --device-plugin-path "$tmp/dp" >"$tmp/dp.log" 2>&1 &
pids+=($!)
wait_ev "e['event'] == 'register' and e['resource'] == 'nvidia.com/gpu' and e['accepted']" >/dev/null ||
  die "the dynamic device plugin did not register nvidia.com/gpu"

# devices N ON_GPU0 WHAT: waits for a device list of N ids, ON_GPU0 of them
# GPU 0's, sent after the events that were there at the last `mark`.
from=0
mark() { from=$(wc -l <"$ev"); }
devices() {
  wait_ev "e['event'] == 'devices' and e['resource'] == 'nvidia.com/gpu' and len(e['devices']) == $1 and \
sum(d['id'].startswith('dyn-$gpu0::') for d in e['devices']) == $2" 60 "$from" >/dev/null ||
    fail "$3: no device list of $1 ids ($2 on GPU 0); last: $(grep '"devices"' "$ev" | tail -n 1 | cut -c1-300)"
}
devices 32 4 "8 shared GPUs, split 4"

# smi ARGS...: the simulator's nvidia-smi on the plugin's machine.
smi() { "$MIGKIT_SIM_SMI" "$@" >>"$tmp/smi.log" 2>&1 || die "nvidia-smi $*: $(tail -n 3 "$tmp/smi.log")"; }
mark
smi -i 0 -mig 1
smi -r -i 0
devices 35 7 "GPU 0 turned MIG on"
grep -q "GPU 0: MIG mode is now enabled (was disabled): rebuilding the device list" "$tmp/dp.log" ||
  fail "the plugin did not say why it rebuilt its list"
mark
smi -i 0 -mig 0
smi -r -i 0
devices 32 4 "GPU 0 back to shared"
grep -q "GPU 0: MIG mode is now disabled (was enabled)" "$tmp/dp.log" || fail "no log line for the switch back"

[ "$failures" -eq 0 ] || { tail -n 20 "$tmp/dp.log" >&2; exit 1; }
echo "PASS: the dynamic device list follows GPU 0's MIG mode (32 -> 35 -> 32 ids)"
