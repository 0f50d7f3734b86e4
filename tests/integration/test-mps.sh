#!/usr/bin/env bash
# MPS sharing (docs/device-plugin.md, "MPS sharing") on a simulated dgx-h100
# with the simulator's nvidia-cuda-mps-control stand-in (sim/mps), driven by
# the kubelet's own device manager (kubelet-harness): the plugin starts one
# control daemon for nvidia.com/gpu before it registers (GPUs in
# exclusive-process compute mode through NVML, pinned memory limit
# total/replicas and thread percentage 100/replicas sent to it), Allocate
# hands out CUDA_MPS_PIPE_DIRECTORY and the pipe and shm mounts; a daemon
# that dies makes the devices Unhealthy until it is restarted; SIGTERM quits
# it and restores the compute mode. What upstream rejects fails the start.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_BUILD_DIR:?}"
fail() {
  echo "FAIL: $*" >&2
  for f in "${tmp:-/nonexistent}"/*.log "${tmp:-/nonexistent}"/*.jsonl; do
    [ -f "$f" ] && { echo "--- $f (last 15 lines)" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}
unset MIG_STRATEGY CONFIG_FILE DEVICE_LIST_STRATEGY MPS_ROOT CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh"
need_harness
PY=python3
command -v "$PY" >/dev/null || PY=/usr/bin/python3
# The stand-in, found by the plugin in PATH as the real one.
export PATH=$MIGKIT_BUILD_DIR/sim/bin:$PATH
[ -x "$MIGKIT_BUILD_DIR/sim/bin/nvidia-cuda-mps-control" ] || fail "no nvidia-cuda-mps-control stand-in built"
export MIGKIT_MPS_CHECK_MS=300

plugin_tmp mk-mps
plugin_cleanup_hook() { # a stand-in daemon left by a failed run
  for f in "$tmp"/mps/*/*/pipe/nvidia-cuda-mps-control.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
}
state=$tmp/state.json
export MIGKIT_SIM_STATE=$state
"$MIGKIT_BIN" -q --simulate dgx-h100 profiles >/dev/null || fail "create dgx-h100"
show() { "$MIGKIT_SIM_BIN" show --json; }
mps_yaml() { printf 'version: v1\nsharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: %s\n' "$1"; }
mps_yaml 4 >"$tmp/mps.yaml"
root=$tmp/mps

# ---- what upstream rejects: the start fails ----
mps_yaml 49 >"$tmp/mps49.yaml"
out=$("$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$tmp" --kubelet-socket '' \
  --config-file "$tmp/mps49.yaml" --mps-root "$root" 2>&1) && fail "49 replicas accepted"
echo "$out" | grep -q "maximum allowed replicas exceeded (48 MPS clients" || fail "49 replicas: $out"
MIGKIT_SIM_STATE=$tmp/mig.json "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c gpu7-1g >/dev/null \
  || fail "apply"
out=$(MIGKIT_SIM_STATE=$tmp/mig.json "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$tmp" \
  --kubelet-socket '' --config-file "$tmp/mps.yaml" --mps-root "$root" --mig-strategy mixed 2>&1) \
  && fail "MPS with mixed accepted"
echo "$out" | grep -q "MPS sharing is not supported with the mixed MIG strategy" || fail "mixed: $out"
[ ! -e "$root/.ready" ] || fail "a rejected start left '$root/.ready'"

# ---- the daemon, Allocate under the kubelet's device manager, health ----
d=$tmp/dp
mkdir -p "$d"
"$harness" --socket-dir "$d" --wait 60 --resource nvidia.com/gpu --allocate 1 --watch 60 \
  >"$tmp/harness.jsonl" 2>"$tmp/kubelet.log" &
hpid=$!
pids+=("$hpid")
"$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$d" --config-file "$tmp/mps.yaml" \
  --mps-root "$root" 2>"$tmp/plugin.log" &
ppid=$!
pids+=("$ppid")
seen() { # seen FILE EXPR: within 30 s
  for _ in $(seq 1 300); do jline "$1" "$2" >/dev/null && return 0; sleep 0.1; done
  return 1
}
seen "$tmp/harness.jsonl" "e['event'] == 'capacity' and e['capacity'] == 32 and e['allocatable'] == 32" \
  || fail "never registered 32 MPS replicas"
[ -e "$root/.ready" ] && [ -e "$root/nvidia.com/gpu/.started" ] || fail "no .ready / .started in '$root'"
# the simulator's shared state: compute mode and the commands the daemon got
"$PY" - "$(show)" <<'PY' || fail "simulator state after the start: $(show | head -c 3000)"
import json, sys
m = json.loads(sys.argv[1])
modes = [g["compute_mode"] for g in m["gpus"]]
assert modes == [3] * 8, modes  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS on every GPU
cmds = [c["command"] for c in m.get("mps_commands", [])]
pipes = {c["pipe"] for c in m.get("mps_commands", [])}
assert cmds[0] == "start", cmds
# H100 80GB HBM3 (81559 MiB) / 4 replicas; 100 / 4
want = ["set_default_device_pinned_mem_limit %d 20389M" % i for i in range(8)] + ["set_default_active_thread_percentage 25"]
assert cmds[1:1 + len(want)] == want, cmds
assert len(pipes) == 1 and list(pipes)[0].endswith("/mps/nvidia.com/gpu/pipe"), pipes
PY
a=$(jline "$tmp/harness.jsonl" "e['event'] == 'allocate' and e['pod'] == 'harness-pod-1'") || fail "no allocation"
"$PY" - "$a" "$root" <<'PY' || fail "allocation: $a"
import json, sys
e, root = json.loads(sys.argv[1]), sys.argv[2]
assert e["admitted"], e
r = e["responses"]["nvidia.com/gpu"]
assert r["envs"]["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe", r["envs"]
assert r["envs"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-"), r["envs"]
mounts = sorted((m["container_path"], m["host_path"]) for m in r["mounts"])
assert mounts == [("/dev/shm", root + "/shm"), ("/mps/nvidia.com/gpu/pipe", root + "/nvidia.com/gpu/pipe")], mounts
# what the kubelet hands the runtime
ro = e["run_options"]
assert {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/mps/nvidia.com/gpu/pipe"} in ro["envs"] or \
    ["CUDA_MPS_PIPE_DIRECTORY", "/mps/nvidia.com/gpu/pipe"] in [list(x.values()) if isinstance(x, dict) else x for x in ro["envs"]], ro
PY
echo "ok: MPS daemon started before registration, Allocate hands out the pipe directory and mounts"

# the daemon dies: Unhealthy, restarted, Healthy again
pid=$(cat "$root/nvidia.com/gpu/pipe/nvidia-cuda-mps-control.pid") || fail "no pid file of the stand-in"
kill -KILL "$pid"
t0=$(date +%s.%N)
seen "$tmp/harness.jsonl" "e['event'] == 'capacity' and e['unhealthy'] == 32" \
  || fail "the dead daemon never made the devices Unhealthy"
t1=$(date +%s.%N)
grep -q "does not answer" "$tmp/plugin.log" || fail "no log of the dead daemon"
"$PY" - "$tmp/harness.jsonl" <<'PY' || fail "the devices never became Healthy again"
import json, sys, time
for _ in range(300):
    caps = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    caps = [e for e in caps if e.get("event") == "capacity"]
    bad = [i for i, e in enumerate(caps) if e["unhealthy"] == 32]
    if bad and any(e["unhealthy"] == 0 and e["allocatable"] == 32 for e in caps[bad[0]:]):
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PY
t2=$(date +%s.%N)
[ "$(show | "$PY" -c 'import json,sys; print([c["command"] for c in json.load(sys.stdin)["mps_commands"]].count("start"))')" = 2 ] \
  || fail "the daemon was not started again"
echo "daemon killed -> Unhealthy: $(echo "$t1 - $t0" | bc) s; -> restarted, Healthy: $(echo "$t2 - $t1" | bc) s"

# SIGTERM: quit sent, compute mode back to default, .ready gone
kill -TERM "$ppid"
wait "$ppid" || fail "the plugin exited $? after SIGTERM"
kill "$hpid" 2>/dev/null || true
wait "$hpid" 2>/dev/null || true
"$PY" - "$(show)" <<'PY' || fail "after SIGTERM: $(show | head -c 2000)"
import json, sys
m = json.loads(sys.argv[1])
assert [g["compute_mode"] for g in m["gpus"]] == [0] * 8
assert m["mps_commands"][-1]["command"] == "quit", m["mps_commands"][-3:]
PY
[ ! -e "$root/.ready" ] || fail "'$root/.ready' left after SIGTERM"
[ ! -e "$root/nvidia.com/gpu/pipe/control" ] || fail "the daemon still runs after SIGTERM"
echo "PASS"
