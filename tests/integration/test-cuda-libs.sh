#!/usr/bin/env bash
# NVIDIA's libraries on the CUDA driver simulator (docs/simulator.md, "NVIDIA's
# libraries on the simulator"): the private export tables they need, checked
# through the driver API (cuda-lib-tables), and one program per toolkit library
# (tests/cuda-libs: cuBLAS, cuBLASLt, cuDNN, cuFFT, cuRAND, cuSOLVER, cuSPARSE,
# NVRTC, NCCL with two GPUs in one process, in a graph capture, and as two
# processes), each on a fresh simulated machine with two H100s, each checking
# its calls' status codes and that what the library allocates is charged to the
# device (NVML's process list). Then all of them again with the soft slicing
# library (libmigkit-vgpu.so) preloaded under a memory cap large enough for
# them: they must still succeed, and see the cap as their device's memory.
# Last, cuBLAS and NCCL under a cap smaller than what they take: a call fails
# with the library's out-of-memory status and the program ends cleanly. Prints
# each program's run time. Skips (exit 0, "SKIP") without the simulator or the
# toolkit's libraries; a program whose library the toolkit lacks is skipped
# with a note.
set -euo pipefail
: "${MIGKIT_BUILD_DIR:?}"
lib=$MIGKIT_BUILD_DIR/sim/lib
progs=$MIGKIT_BUILD_DIR/tests/cuda-libs
vgpu=$MIGKIT_BUILD_DIR/lib/libmigkit-vgpu.so
if [ ! -e "$lib/libcuda.so.1" ] || [ ! -d "$progs" ]; then
  echo "SKIP: CUDA driver simulator or toolkit library tests not built (no /usr/local/cuda)"
  exit 0
fi
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-cuda-libs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset MIGKIT_SIM_MACHINE MIGKIT_SIM_FAULTS CUDA_VISIBLE_DEVICES MIGKIT_SIM_CUDA_CTX_MIB MIGKIT_SIM_KERNEL_NS \
  MIGKIT_SIM_CUDA_TRACE LD_PRELOAD
# The toolkit's lib64 after the simulator: cuDNN and NVRTC load their parts from it.
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NCCL between processes on one host: bootstrap over loopback.
export NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN
# Sanitizer build: the NVIDIA libraries keep their objects to the end.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:verify_asan_link_order=0
sim=$MIGKIT_BUILD_DIR/sim/bin/migkit-sim
cap_gib=16
oom_mib=32 # less than a cuBLAS handle (64 MiB) or an NCCL communicator (40 MiB) takes
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run PASS NAME ARGS...: the program on a fresh machine; PASS is "plain" or "vgpu".
run() {
  local pass=$1 name=$2
  shift 2
  local exe=$progs/cuda-lib-$name out=$tmp/$pass-$name${1:+-$1}
  if [ ! -x "$exe" ]; then
    echo "note: cuda-lib-$name not built (the toolkit lacks its library)"
    return 0
  fi
  mkdir -p "$out.d"
  export MIGKIT_SIM_STATE=$out.d/state.json
  "$sim" create 'h100-80gb*2' >/dev/null
  local envs=()
  if [ "$pass" = vgpu ]; then
    envs=(LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_LIMIT=${cap_gib}g CUDA_DEVICE_MEMORY_SHARED_CACHE="$out.d/region")
  elif [ "$pass" = oom ]; then
    # Contexts free, so the library's own allocation is what meets the cap.
    envs=(LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_LIMIT=${oom_mib}m CUDA_DEVICE_MEMORY_SHARED_CACHE="$out.d/region"
      MIGKIT_SIM_CUDA_CTX_MIB=0)
  fi
  local t0 t1 rc=0
  t0=$(date +%s%N)
  env "${envs[@]}" timeout 120 "$exe" "$@" >"$out" 2>&1 || rc=$?
  t1=$(date +%s%N)
  printf '%-6s %-16s %6d ms\n' "$pass" "$name $*" $(((t1 - t0) / 1000000))
  if [ "$pass" = oom ]; then
    # Under a cap too small for it: a call fails with its library's out-of-memory status, and
    # the program ends cleanly (no crash, no hang).
    [ "$rc" -eq 0 ] && grep -q '^OOM ' "$out" ||
      fail "oom $name $*: exit $rc, expected the library's out-of-memory status: $(grep -v '^ok ' "$out" | tail -20)"
    return 0
  fi
  if [ "$rc" -ne 0 ] || ! grep -q '^PASSED$' "$out"; then
    fail "$pass $name $*: exit $rc: $(grep -v '^ok ' "$out" | tail -20)"
    return 0
  fi
  # Every device the program used reported its memory: the cap under the library, else the GPU's.
  local want=$((81559 * 1048576))
  [ "$pass" = vgpu ] && want=$((cap_gib * 1073741824))
  local totals
  totals=$(sed -n 's/^mem device [0-9]* total: //p' "$out" | sort -u)
  [ "$totals" = "$want" ] || fail "$pass $name $*: device memory '$totals', expected $want"
}

for pass in plain vgpu; do
  if [ "$pass" = vgpu ] && [ ! -e "$vgpu" ]; then
    echo "note: no $vgpu: the pass with the soft slicing library is skipped"
    continue
  fi
  for name in tables cublas cublaslt cudnn cufft curand cusolver cusparse nvrtc; do
    run "$pass" "$name"
  done
  run "$pass" nccl graph # allreduce, then the same captured in a CUDA graph
  run "$pass" nccl ranks
done
if [ -e "$vgpu" ]; then
  run oom cublas oom
  run oom nccl all oom
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "test-cuda-libs: all passed"
