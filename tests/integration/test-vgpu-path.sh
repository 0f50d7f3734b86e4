#!/usr/bin/env bash
# The whole path of a soft slice on one node: a pod carrying a hami-core
# reservation (served by a stub apiserver) -> `migkit device-plugin
# --dynamic-mig` registered with the kubelet's own device manager
# (kubelet-harness, Kubernetes v1.20.2) -> the kubelet admits the pod and
# records the run options it would hand the runtime -> a process started with
# exactly those envs, its mounts emulated (container paths mapped to their
# host paths; the preload done by pointing LD_PRELOAD at the library that the
# mounted /etc/ld.so.preload names) runs against the CUDA driver simulator:
# it sees its cap in the three memory views and is refused past it, and the
# node agent's /metrics shows the container's usage and cap; then the pod is
# gone and the agent's prune removes its directory.
#
# Needs the kubelet-harness (scripts/k8s-testenv build; FAILS under CI=true
# without it, else skipped) and the CUDA driver simulator (77 without it).
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_BUILD_DIR:?}" "${MIGKIT_TEST_PROG_VGPU:?}"
# shellcheck source=plugin-lib.sh
. "$(dirname "$0")/plugin-lib.sh"
need_harness
. "$(dirname "$0")/vgpu-lib.sh"  # simlib, vgpu, prog, tmp, pids, fail, finish; 77 without the simulator
unset NODE_NAME MIGKIT_VGPU_ROOT MIGKIT_VGPU_LIBRARY DEVICE_SPLIT_COUNT DEVICE_LIST_STRATEGY MIGKIT_SCHEDULER_CONFIG
MIB=1048576
die() { fail "$*"; for f in "$tmp"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done; exit 1; }

# The node: a simulated DGX A100, MIG off (shared GPUs). GPU 0's UUID.
"$MIGKIT_BIN" -q --simulate dgx-a100 profiles >/dev/null || die "create the simulated machine"
gpu=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"][0]["uuid"])' "$MIGKIT_SIM_STATE")
root=$tmp/vgpu
mkdir -p "$root"
cp "$vgpu" "$root/libmigkit-vgpu.so"  # what the node DaemonSet's init container does

# The pod, as the extender leaves it after bind: a 1000 MiB, 30% soft slice of GPU 0.
python3 - "$tmp/pods.json" "$gpu" <<'EOF'
import json, sys, time
res = {"version": 1, "node": "node-1", "time": int(time.time()),
       "devices": [{"container": 0, "mode": "hami-core", "gpu": sys.argv[2], "memoryMiB": 1000, "cores": 30}]}
pod = {"metadata": {"namespace": "team-a", "name": "infer-0", "uid": "6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a",
                    "resourceVersion": "7", "annotations": {"migkit.io/mig-reservation": json.dumps(res)}},
       "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
       "status": {"phase": "Pending"}}
json.dump({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": [pod]}, open(sys.argv[1], "w"))
EOF
# A stub apiserver: the node's pods (from pods.json, re-read each time), every
# PATCH recorded (the plugin's mig-allocated mark, the agent's node
# inventory); the Node; watches held open.
. "$(dirname "$0")/stub-apiserver.sh"
stub_apiserver_start "$tmp" --pods "$tmp/pods.json" --node node-1 --patches "$tmp/patches.jsonl" ||
  die "the stub apiserver did not start"
pids+=("$stub_api_pid")

# The kubelet admits one pod asking nvidia.com/gpu: 1; the plugin answers.
mkdir -p "$tmp/dp"
"$harness" --socket-dir "$tmp/dp" --resource nvidia.com/gpu --allocate 1 --wait 120 >"$tmp/harness.jsonl" \
  2>"$tmp/harness.log" &
hpid=$!
pids+=($hpid)
# The node's mode and split count, from the scheduler's config.
printf 'version: v1\nnodeconfig:\n  - name: node-1\n    operatingmode: hami-core\n    devicesplitcount: 4\n' \
  >"$tmp/scheduler.yaml"
MIGKIT_SCHEDULER_CONFIG=$tmp/scheduler.yaml "$MIGKIT_BIN" --simulate dgx-a100 device-plugin --dynamic-mig \
  --node-name node-1 --kubeconfig "$tmp/kubeconfig" --device-plugin-path "$tmp/dp" --vgpu-root "$root" \
  >"$tmp/dp.log" 2>&1 &
pids+=($!)
wait "$hpid" || die "kubelet-harness: $(tail -n 1 "$tmp/harness.jsonl")"
alloc=$(grep '"event":"allocate"' "$tmp/harness.jsonl" | head -n 1)
[ -n "$alloc" ] || die "no allocate event"

# What the runtime would get, checked, then turned into a command line.
python3 - "$alloc" "$gpu" "$root" "$tmp/run.env" "$tmp/capacity" "$tmp/harness.jsonl" <<'EOF' || die "run options: $alloc"
import json, os, shlex, sys
a, gpu, root, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
assert a["admitted"], a
ro = a["run_options"]
envs = {e["name"]: e["value"] for e in ro["envs"]}
mounts = {m["container_path"]: (m["host_path"], m["read_only"]) for m in ro["mounts"]}
uid = "6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a"
want = {"NVIDIA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_SM_LIMIT_0": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/migkit-vgpu.cache"}
assert envs == want, envs
assert mounts == {"/usr/local/vgpu": (f"{root}/containers/{uid}_0", False),
                  "/usr/lib/migkit/libmigkit-vgpu.so": (f"{root}/libmigkit-vgpu.so", True),
                  "/etc/ld.so.preload": (f"{root}/ld.so.preload", True)}, mounts
caps = [json.loads(l) for l in open(sys.argv[6]) if '"event":"capacity"' in l]
assert caps and caps[0]["capacity"] == 8 * 4, caps[0]  # 8 shared GPUs x the node's devicesplitcount 4
# The mounts, emulated: a container path under a mount -> its host path.
def host(p):
    for c, (h, _) in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if p == c or p.startswith(c.rstrip("/") + "/"):
            return h + p[len(c):]
    return p
preload = open(host("/etc/ld.so.preload")).read().split()
assert preload == ["/usr/lib/migkit/libmigkit-vgpu.so"], preload
lines = [f"{k}={host(v) if k == 'CUDA_DEVICE_MEMORY_SHARED_CACHE' else v}" for k, v in envs.items()]
lines += ["LD_PRELOAD=" + ":".join(host(p) for p in preload),
          "CUDA_VISIBLE_DEVICES=" + envs["NVIDIA_VISIBLE_DEVICES"]]  # the runtime shows only this GPU
open(out, "w").write("\n".join(lines) + "\n")
EOF
grep -q '"migkit.io/mig-allocated"' "$tmp/patches.jsonl" || fail "the pod was not marked allocated"
[ -f "$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0.json" ] || fail "no identity file"
mapfile -t runenv <"$tmp/run.env"
inpod() { env "${runenv[@]}" "$prog" "$@"; }

# The container's memory view: its 1000 MiB cap, in the three views.
out=$(inpod dlsym info) || die "info: $out"
cap=$((1000 * MIB))
grep -q "^cuMemGetInfo total $cap " <<<"$out" || fail "cuMemGetInfo: $out"
grep -q "^cuDeviceTotalMem $cap$" <<<"$out" || fail "cuDeviceTotalMem: $out"
grep -q "^nvmlDeviceGetMemoryInfo total $cap " <<<"$out" || fail "NVML: $out"
# The cap enforced: 100 MiB chunks until CUDA_ERROR_OUT_OF_MEMORY (2) at 1000 MiB.
inpod dlsym fill 100 0 >"$tmp/fill.out" 2>"$tmp/fill.err" || fail "fill: $(cat "$tmp/fill.out" "$tmp/fill.err")"
grep -q "^filled $cap result 2$" "$tmp/fill.out" || fail "fill: $(cat "$tmp/fill.out" "$tmp/fill.err")"
grep -q 'CUDA_DEVICE_MEMORY_LIMIT_0' "$tmp/fill.err" || fail "no refusal line: $(cat "$tmp/fill.err")"
[ -f "$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0/migkit-vgpu.cache" ] ||
  fail "the region file is not in the container's host directory"

# The node agent's /metrics while the container holds 300 MiB.
# exec: $! is the program itself, so the kill below (and cleanup's) stops it;
# killing a background function's subshell left it running for 30 s, writing
# into the temporary directory while cleanup removed it.
(exec env "${runenv[@]}" "$prog" dlsym hold 300 30) >"$tmp/hold.out" 2>&1 &
hold=$!
pids+=($hold)
for ((i = 0; i < 100; i++)); do grep -q ready "$tmp/hold.out" && break; sleep 0.1; done
grep -q ready "$tmp/hold.out" || fail "hold: $(cat "$tmp/hold.out")"
mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
MIGKIT_SCHEDULER_CONFIG=$tmp/scheduler.yaml "$MIGKIT_BIN" --simulate dgx-a100 scheduler node --node-name node-1 \
  --kubeconfig "$tmp/kubeconfig" \
  --metrics-address "127.0.0.1:$mport" --vgpu-root "$root" --resync 1s >"$tmp/agent.log" 2>&1 &
agent=$!
pids+=($agent)
metrics=
for ((i = 0; i < 100; i++)); do
  metrics=$(python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "http://127.0.0.1:$mport/metrics" 2>/dev/null) && break
  sleep 0.2
done
labels="podnamespace=\"team-a\",podname=\"infer-0\",ctrname=\"main\",poduid=\"6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a\",vdeviceid=\"0\",deviceuuid=\"$gpu\""
grep -qxF "vGPU_device_memory_usage_in_bytes{$labels} $((300 * MIB))" <<<"$metrics" || fail "usage: $metrics"
grep -qxF "vGPU_device_memory_limit_in_bytes{$labels} $cap" <<<"$metrics" || fail "limit: $metrics"
grep -qxF "migkit_vgpu_device_core_limit_percent{$labels} 30" <<<"$metrics" || fail "cores: $metrics"
kill "$hold" 2>/dev/null || true
wait "$hold" 2>/dev/null || true

# The pod is gone: the agent removes its directory (a minute after it was last written).
echo '{"kind":"PodList","metadata":{"resourceVersion":"8"},"items":[]}' >"$tmp/pods.json"
touch -d '2 minutes ago' "$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0" \
  "$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0.json"
# The two go one after the other: wait for both.
gone=$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0
for ((i = 0; i < 150; i++)); do [ -e "$gone" ] || [ -e "$gone.json" ] || break; sleep 0.2; done
[ ! -e "$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0" ] || fail "the gone pod's directory is still there"
[ ! -e "$root/containers/6c1f4a52-0b8e-4d7e-9a57-1f0c2d3e4b5a_0.json" ] || fail "the gone pod's identity file is still there"
[ -e "$root/libmigkit-vgpu.so" ] || fail "the library was removed"
finish
