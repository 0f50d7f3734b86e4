#!/usr/bin/env bash
# The CUDA driver simulator (libcuda.so.1, sim/cuda): the driver API self-test,
# devices per CUDA_VISIBLE_DEVICES (indices, UUIDs, MIG UUIDs), CUDA processes
# in NVML's answers (memory, processes, utilisation) and in migkit-sim,
# crash safety (kill -9 leaves no charge), contention between processes on one
# GPU, and the CUDA 13 runtime (a .cu program built with nvcc -cudart shared).
# Skips (exit 0, "SKIP") when the simulator was not built (no cuda.h).
set -euo pipefail
: "${MIGKIT_BUILD_DIR:?}"
bin=$MIGKIT_BUILD_DIR/sim/bin
lib=$MIGKIT_BUILD_DIR/sim/lib
if [ ! -x "$bin/cuda-sim-driver" ] || [ ! -e "$lib/libcuda.so.1" ]; then
  echo "SKIP: CUDA driver simulator not built (no /usr/local/cuda/include/cuda.h)"
  exit 0
fi
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-cuda-sim.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
unset MIGKIT_SIM_MACHINE MIGKIT_SIM_FAULTS CUDA_VISIBLE_DEVICES MIGKIT_SIM_CUDA_CTX_MIB MIGKIT_SIM_KERNEL_NS
# Contexts cost nothing in the exact checks below; "context size" checks the model's default.
export MIGKIT_SIM_CUDA_CTX_MIB=0
export MIGKIT_SIM_STATE=$tmp/state.json
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
drv() { "$bin/cuda-sim-driver" "$@"; }
drvbin=$bin/cuda-sim-driver
sim() { "$bin/migkit-sim" "$@"; }
# wait_procs GPU N: until N CUDA processes run on GPU (a loaded machine starts them late).
wait_procs() {
  for _ in $(seq 100); do
    [ "$(sim cuda-processes | awk -v g="$1" '$1 == g' | wc -l)" -ge "$2" ] && return 0
    sleep 0.1
  done
}
# wait_for FILE REGEX: up to 30 s for a line in FILE.
wait_for() {
  for _ in $(seq 300); do grep -Eq -e "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "timed out waiting for '$2' in $1: $(cat "$1" 2>/dev/null)"
  return 1
}

sim create dgx-a100 >/dev/null

# --- the simulator's files call one another in layer order (internal.h) -------
objdir=$MIGKIT_BUILD_DIR/sim/cuda/CMakeFiles/cuda-sim.dir
if [ -d "$objdir" ] && [ -n "${MIGKIT_SOURCE_DIR:-}" ] && command -v nm >/dev/null; then
  python3 "$MIGKIT_SOURCE_DIR/sim/cuda/check-layers.py" "$MIGKIT_SOURCE_DIR/sim/cuda" "$objdir" >"$tmp/layers" 2>&1 ||
    fail "layering: $(cat "$tmp/layers")"
fi

# --- the driver API ------------------------------------------------------------
if ! drv selftest >"$tmp/selftest" 2>&1; then
  fail "selftest: $(grep -v '^ok' "$tmp/selftest")"
fi
grep -q '^PASSED' "$tmp/selftest" || fail "selftest did not pass"
# What NVIDIA's libraries need: linking, graphs, stream memory operations, VMM, pools, IPC, arrays.
if ! "$bin/cuda-sim-libs" selftest >"$tmp/libs" 2>&1; then
  fail "libs selftest: $(grep -v '^ok' "$tmp/libs")"
fi
grep -q '^PASSED' "$tmp/libs" || fail "libs selftest did not pass"
# Cluster occupancy (cuBLASLt's start): refused below compute capability 9.0, SMs / cluster size on an H100.
"$bin/cuda-sim-libs" clusters >"$tmp/clusters" 2>&1
grep -qx "clusters error 912" "$tmp/clusters" || fail "clusters on an A100: $(cat "$tmp/clusters")"
MIGKIT_SIM_STATE=$tmp/h100.json sim create dgx-h100 >/dev/null
MIGKIT_SIM_STATE=$tmp/h100.json "$bin/cuda-sim-libs" clusters >"$tmp/clusters" 2>&1
grep -qx "clusters 66 size 8 16-portable 912 16-nonportable 0/8" "$tmp/clusters" ||
  fail "clusters on an H100: $(cat "$tmp/clusters")"

# --- every driver entry point exported and answered by cuGetProcAddress ----------
# py ARGS: python3 loading the simulator (ctypes); a sanitizer build needs its runtime first.
py() {
  local asan
  asan=$(ldd "$lib/libcuda.so.1" 2>/dev/null | awk '/libasan/ { print $3 }')
  if [ -n "$asan" ]; then
    LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 python3 "$@"
  else
    python3 "$@"
  fi
}
if [ -r /usr/local/cuda/include/cudaTypedefs.h ]; then
  py "$MIGKIT_SOURCE_DIR/tests/cuda-sim/check-procs.py" "$lib/libcuda.so.1" /usr/local/cuda/include \
    >"$tmp/procs" 2>&1 || fail "entry points: $(cat "$tmp/procs")"
  # The committed generated tables are what gen-procs.py makes from this toolkit.
  python3 "$MIGKIT_SOURCE_DIR/sim/cuda/gen-procs.py" /usr/local/cuda/include "$MIGKIT_SOURCE_DIR/sim/cuda" "$tmp/gen"
  for f in procs.h procs.inc stubs.c nomacro.h; do
    cmp -s "$tmp/gen/$f" "$MIGKIT_SOURCE_DIR/sim/cuda/$f" || fail "sim/cuda/$f is stale: run sim/cuda/gen-procs.py"
  done
fi
# A stub names itself under tracing.
MIGKIT_SIM_CUDA_TRACE=1 py -c 'import ctypes,sys; sys.exit(ctypes.CDLL(sys.argv[1]).cuTexRefCreate(None) != 801)' \
  "$lib/libcuda.so.1" 2>"$tmp/stubtrace" || fail "stub: not CUDA_ERROR_NOT_SUPPORTED"
grep -q 'cuTexRefCreate: not supported' "$tmp/stubtrace" || fail "stub trace: $(cat "$tmp/stubtrace")"

# --- a teardown after the driver's exit handler gives nothing back twice ----------
drv exit-late 1000 >"$tmp/late" 2>&1 || fail "exit-late: $(cat "$tmp/late")"
drv nvml 0 >"$tmp/late-nvml" || fail "nvml after exit-late"
grep -q '^used_mib=0 procs=0 ' "$tmp/late-nvml" || fail "after a late teardown: $(head -1 "$tmp/late-nvml")"
# (a count driven below zero refuses every later allocation on the GPU)
drv hold 30000 0 >"$tmp/late-hold" 2>&1 || fail "after a late teardown, 30000 MiB refused: $(cat "$tmp/late-hold")"

# --- devices -------------------------------------------------------------------
drv info >"$tmp/info"
[ "$(wc -l <"$tmp/info")" -eq 8 ] || fail "dgx-a100: 8 CUDA devices expected: $(cat "$tmp/info")"
grep -q '^0 name=NVIDIA A100-SXM4-40GB .* mem_mib=40960 sms=108 cc=8.0 bus=07$' "$tmp/info" ||
  fail "device 0: $(head -1 "$tmp/info")"
CUDA_VISIBLE_DEVICES=2,0 drv info >"$tmp/info2"
[ "$(awk '{print $NF}' "$tmp/info2" | tr '\n' ' ')" = "bus=47 bus=07 " ] ||
  fail "CUDA_VISIBLE_DEVICES=2,0: $(cat "$tmp/info2")"
CUDA_VISIBLE_DEVICES=1,bogus,3 drv info >"$tmp/info3"
[ "$(wc -l <"$tmp/info3")" -eq 1 ] || fail "an invalid entry ends the list: $(cat "$tmp/info3")"
uuid3=$(sim show --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["gpus"][3]["uuid"])')
CUDA_VISIBLE_DEVICES=${uuid3:0:12} drv info >"$tmp/info4"
grep -q "^0 .* bus=4e$" "$tmp/info4" || fail "a GPU UUID prefix selects GPU 3: $(cat "$tmp/info4")"
CUDA_VISIBLE_DEVICES=8 drv info >"$tmp/info5" 2>&1 || true
[ ! -s "$tmp/info5" ] || fail "index 8 of 8: no device expected: $(cat "$tmp/info5")"

# --- NVML sees CUDA processes; kill -9 leaves nothing --------------------------------
CUDA_VISIBLE_DEVICES=3 "$drvbin" hold 1500 60 >"$tmp/hold" &
holder=$!
pids+=($holder)
wait_for "$tmp/hold" '^ready'
sim cuda-processes >"$tmp/procs"
grep -Eq "^3 +- +- +$holder +1500.0 " "$tmp/procs" || fail "process in migkit-sim: $(cat "$tmp/procs")"
drv nvml 3 >"$tmp/nvml" || fail "NVML queries"
grep -q "^used_mib=1500 procs=1 util=0 util_rc=0 samples_rc=0$" "$tmp/nvml" || fail "NVML memory/processes: $(cat "$tmp/nvml")"
grep -q "^pid=$holder used_mib=1500 sm=0$" "$tmp/nvml" || fail "NVML process list: $(cat "$tmp/nvml")"
CUDA_VISIBLE_DEVICES=3 drv oom >"$tmp/oom" || fail "OOM with another process holding memory: $(cat "$tmp/oom")"
CUDA_VISIBLE_DEVICES=3 drv selftest >"$tmp/selftest2" 2>&1 || fail "selftest beside another process: $(grep -v "^ok" "$tmp/selftest2" | tail -20)"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
sim cuda-processes >"$tmp/procs"
[ "$(wc -l <"$tmp/procs")" -eq 1 ] || fail "killed process still listed: $(cat "$tmp/procs")"

# --- context size: the model's (A100: 400 MiB) unless MIGKIT_SIM_CUDA_CTX_MIB says ----
(unset MIGKIT_SIM_CUDA_CTX_MIB; CUDA_VISIBLE_DEVICES=3 exec "$drvbin" hold 100 60) >"$tmp/hold" &
holder=$!
pids+=($holder)
wait_for "$tmp/hold" '^ready'
sim cuda-processes >"$tmp/procs"
grep -Eq "^3 +- +- +$holder +500.0 " "$tmp/procs" || fail "context size in migkit-sim: $(cat "$tmp/procs")"
drv nvml 3 >"$tmp/nvml" || fail "NVML queries"
grep -q "^used_mib=500 procs=1 " "$tmp/nvml" || fail "context size in NVML memory: $(cat "$tmp/nvml")"
grep -q "^pid=$holder used_mib=500 " "$tmp/nvml" || fail "context size in NVML's process list: $(cat "$tmp/nvml")"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
(unset MIGKIT_SIM_CUDA_CTX_MIB; CUDA_VISIBLE_DEVICES=3 MIGKIT_SIM_CUDA_CTX_MIB=64 exec "$drvbin" hold 100 60) >"$tmp/hold" &
holder=$!
pids+=($holder)
wait_for "$tmp/hold" '^ready'
sim cuda-processes >"$tmp/procs"
grep -Eq "^3 +- +- +$holder +164.0 " "$tmp/procs" || fail "MIGKIT_SIM_CUDA_CTX_MIB=64: $(cat "$tmp/procs")"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true

# --- contention: two processes' kernels share one GPU ---------------------------------
CUDA_VISIBLE_DEVICES=5 "$drvbin" burn 20000000 80 >"$tmp/burn1" &
b1=$!
CUDA_VISIBLE_DEVICES=5 "$drvbin" burn 20000000 80 >"$tmp/burn2" &
b2=$!
pids+=($b1 $b2)
wait_procs 5 2
sleep 0.5
sim cuda-processes --window 400 >"$tmp/procs-burn"
MIGKIT_SIM_UTIL_WINDOW_MS=400 drv nvml 5 >"$tmp/nvml-burn" || fail "NVML queries during the burn"
wait "$b1" || fail "burn 1"
wait "$b2" || fail "burn 2"
for f in burn1 burn2; do
  ns=$(sed -n 's/^elapsed_ns=//p' "$tmp/$f")
  # 80 x 20 ms alone is 1.6 s; sharing the GPU with the other it takes about 3.2 s.
  [ "$ns" -ge 2400000000 ] && [ "$ns" -le 8000000000 ] || fail "$f: $ns ns, expected about 3.2 s on a shared GPU"
done
total=$(awk 'NR > 1 && $1 == 5 { s += $6 } END { print s + 0 }' "$tmp/procs-burn")
[ "$total" -ge 80 ] || fail "two busy processes: SM% sums to $total: $(cat "$tmp/procs-burn")"
util=$(sed -n 's/^used_mib=0 procs=2 util=\([0-9]*\) util_rc=0 samples_rc=0$/\1/p' "$tmp/nvml-burn")
[ -n "$util" ] && [ "$util" -ge 80 ] || fail "NVML utilisation of a busy GPU: $(cat "$tmp/nvml-burn")"
smsum=$(awk -F'sm=' '/^pid=/ { s += $2 } END { print s + 0 }' "$tmp/nvml-burn")
[ "$smsum" -ge 80 ] || fail "NVML process utilisation sums to $smsum: $(cat "$tmp/nvml-burn")"

# Queued asynchronously, the two take turns (each stream holds at most 50 ms of work).
# Both start queueing together, once both are set up (a loaded machine may
# take longer than the 0.4 s of work to start a process).
CUDA_SIM_GO_FILE=$tmp/flood-go CUDA_VISIBLE_DEVICES=4 "$drvbin" flood 20000000 20 >"$tmp/flood1" &
f1=$!
CUDA_SIM_GO_FILE=$tmp/flood-go CUDA_VISIBLE_DEVICES=4 "$drvbin" flood 20000000 20 >"$tmp/flood2" &
f2=$!
pids+=($f1 $f2)
for ((i = 0; i < 300; i++)); do grep -qx ready "$tmp/flood1" && grep -qx ready "$tmp/flood2" && break; sleep 0.1; done
touch "$tmp/flood-go"
wait "$f1" || fail "flood 1"
wait "$f2" || fail "flood 2"
for f in flood1 flood2; do
  ns=$(sed -n 's/^elapsed_ns=//p' "$tmp/$f")
  # Alone 0.4 s; turn by turn both end near 0.8 s (one far ahead of the other would end at 0.4 s).
  [ "$ns" -ge 650000000 ] || fail "$f: $ns ns: the other process did not get its turns"
done

# Many short kernels (2000 a second, 250 us each: busy half the time): NVML and
# migkit-sim report the busy share of the window, whatever the kernel rate (a
# simulator that kept only the last 64 intervals reported 4%).
CUDA_VISIBLE_DEVICES=7 "$drvbin" duty 250000 500000 8000 >"$tmp/duty" &
d1=$!
pids+=($d1)
wait_procs 7 1
sleep 0.5
sim cuda-processes --window 400 >"$tmp/procs-duty"
MIGKIT_SIM_UTIL_WINDOW_MS=400 drv nvml 7 >"$tmp/nvml-duty" || fail "NVML queries during the short kernels"
wait "$d1" || fail "duty"
sm=$(awk 'NR > 1 && $1 == 7 { print $6 }' "$tmp/procs-duty")
[ -n "$sm" ] && [ "$sm" -ge 35 ] && [ "$sm" -le 65 ] ||
  fail "2000 kernels/s busy 50%: migkit-sim SM% $sm: $(cat "$tmp/procs-duty")"
util=$(sed -n 's/^used_mib=0 procs=1 util=\([0-9]*\) util_rc=0 samples_rc=0$/\1/p' "$tmp/nvml-duty")
[ -n "$util" ] && [ "$util" -ge 35 ] && [ "$util" -le 65 ] ||
  fail "2000 kernels/s busy 50%: NVML utilisation: $(cat "$tmp/nvml-duty")"
sm=$(sed -n 's/^pid=[0-9]* used_mib=0 sm=//p' "$tmp/nvml-duty")
[ -n "$sm" ] && [ "$sm" -ge 35 ] && [ "$sm" -le 65 ] ||
  fail "2000 kernels/s busy 50%: NVML process utilisation: $(cat "$tmp/nvml-duty")"

# --- the CUDA runtime ----------------------------------------------------------------
# Under a sanitizer build the simulator needs the ASan runtime loaded first
# (the nvcc-built program is not instrumented) and leak checks off (the
# runtime keeps its objects to the end).
asan=$(ldd "$lib/libcuda.so.1" | awk '/libasan/ { print $3 }')
if [ -x "$bin/cuda-sim-runtime" ]; then
  if ! CUDA_VISIBLE_DEVICES=6 LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 \
    "$bin/cuda-sim-runtime" >"$tmp/runtime" 2>&1; then
    fail "CUDA runtime program: $(grep -v '^ok' "$tmp/runtime")"
  fi
  grep -q '^PASSED' "$tmp/runtime" || fail "runtime program did not pass"
else
  echo "note: no nvcc: the CUDA runtime program was not built" >&2
fi

# --- MIG devices -----------------------------------------------------------------
drv mig-setup >"$tmp/mig" || fail "mig-setup"
mig0=$(sed -n 1p "$tmp/mig")
mig1=$(sed -n 2p "$tmp/mig")
CUDA_VISIBLE_DEVICES=$mig1 drv info >"$tmp/info6"
grep -q "^0 name=NVIDIA A100-SXM4-40GB MIG 1g.5gb uuid=${mig1#MIG-} mem_mib=4864 sms=14 " "$tmp/info6" ||
  fail "MIG device by UUID: $(cat "$tmp/info6")"
drv info >"$tmp/info7"
grep -q "^0 name=NVIDIA A100-SXM4-40GB MIG 1g.5gb uuid=${mig0#MIG-} " "$tmp/info7" ||
  fail "without CUDA_VISIBLE_DEVICES a MIG-mode GPU gives its MIG devices: $(head -2 "$tmp/info7")"
[ "$(wc -l <"$tmp/info7")" -eq 9 ] || fail "2 MIG devices + 7 GPUs: $(cat "$tmp/info7")"
CUDA_VISIBLE_DEVICES=$mig1 "$drvbin" hold 1000 60 >"$tmp/hold-mig" &
migholder=$!
pids+=($migholder)
wait_for "$tmp/hold-mig" '^ready'
sim cuda-processes >"$tmp/procs"
grep -Eq "^0 +[0-9]+ +0 +$migholder +1000.0 " "$tmp/procs" || fail "MIG process in migkit-sim: $(cat "$tmp/procs")"
drv nvml 0 >"$tmp/nvml-mig" || fail "NVML queries on a MIG-mode GPU"
grep -q "^used_mib=1000 procs=1 util=0 util_rc=3 samples_rc=3$" "$tmp/nvml-mig" ||
  fail "NVML on a MIG-mode GPU (utilisation NOT_SUPPORTED): $(cat "$tmp/nvml-mig")"
CUDA_VISIBLE_DEVICES=$mig1 drv oom >"$tmp/oom-mig" || fail "OOM on a MIG device: $(cat "$tmp/oom-mig")"
kill -9 "$migholder"
wait "$migholder" 2>/dev/null || true
sim cuda-processes >"$tmp/procs"
[ "$(wc -l <"$tmp/procs")" -eq 1 ] || fail "killed MIG process still listed: $(cat "$tmp/procs")"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "test-cuda-sim: all passed"
