#!/usr/bin/env bash
# libmigkit-vgpu.so on the CUDA driver simulator (sim/cuda), memory side:
# the three ways a program reaches the driver (direct linking, dlsym,
# cuGetProcAddress), with and without the library; caps per device in all
# three views (cuMemGetInfo, cuDeviceTotalMem, NVML); every allocation path;
# processes and threads racing to the cap (never above, never a false OOM);
# kill -9 in the middle of allocation storms (nothing left charged); fork;
# unknown symbols; CUDA_DISABLE_CONTROL; a region file of another version.
# Exit 77 (skipped) when the simulator is not built (no CUDA toolkit).
set -euo pipefail
. "$(dirname "$0")/vgpu-lib.sh"
GIB=1073741824
MIB=1048576
# vg [VAR=VALUE...] -- ARGS: the program with the library and a region of this test.
vg() {
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" "${envs[@]}" "$prog" "$@"
}
val() { sed -n "s/^$1 .*$2 \([0-9]*\).*/\1 \3/p" | awk '{print $2}'; }

# A preload library, never linked against: no SONAME (docs/vgpu.md, docs/deploy.md).
if command -v readelf >/dev/null; then
  ! readelf -d "$vgpu" | grep -q SONAME || fail "$vgpu has a SONAME: $(readelf -d "$vgpu" | grep SONAME)"
fi

modes=(direct dlsym procaddr)
if ! "$prog" direct info >/dev/null 2>&1; then
  echo "note: prog-vgpu is not linked to the simulator; the direct mode is not tested"
  modes=(dlsym procaddr)
fi

# Without the library: the simulated A100's 40 GiB.
physical=$("$prog" dlsym info | sed -n 's/^cuDeviceTotalMem //p')
[ "$physical" -gt $((4 * GIB)) ] || fail "the simulator reports $physical bytes"

for m in "${modes[@]}"; do
  # Caps per device, in the three views.
  for dev in 0 1; do
    out=$(vg CUDA_DEVICE_MEMORY_LIMIT=2g CUDA_DEVICE_MEMORY_LIMIT_1=3000m PROG_VGPU_DEVICE=$dev -- "$m" info)
    want=$((2 * GIB)); [ $dev = 1 ] && want=$((3000 * MIB))
    total=$(sed -n 's/^cuMemGetInfo total \([0-9]*\) .*/\1/p' <<<"$out")
    tm=$(sed -n 's/^cuDeviceTotalMem //p' <<<"$out")
    nv=$(sed -n 's/^nvmlDeviceGetMemoryInfo total \([0-9]*\) .*/\1/p' <<<"$out")
    [ "$total" = "$want" ] || fail "$m device $dev: cuMemGetInfo total $total, want $want"
    [ "$tm" = "$want" ] || fail "$m device $dev: cuDeviceTotalMem $tm, want $want"
    [ "$nv" = "$want" ] || fail "$m device $dev: NVML total '$nv', want $want"
  done

  # Every allocation path charged and given back exactly, with and without us.
  "$prog" "$m" paths 8 >"$tmp/out" || fail "$m paths without the library: $(cat "$tmp/out")"
  vg CUDA_DEVICE_MEMORY_LIMIT=1g -- "$m" paths 8 >"$tmp/out" || fail "$m paths: $(cat "$tmp/out")"
  [ "$(grep -c '^path .* charged' "$tmp/out")" = 6 ] || fail "$m paths: $(cat "$tmp/out")"

  # Over the cap: CUDA_ERROR_OUT_OF_MEMORY (2), one line naming the cap.
  vg CUDA_DEVICE_MEMORY_LIMIT_0=1g -- "$m" fill 100 0 >"$tmp/out" 2>"$tmp/err" || fail "$m fill: $(cat "$tmp/out" "$tmp/err")"
  grep -q "^filled $((1000 * MIB)) result 2$" "$tmp/out" || fail "$m fill: $(cat "$tmp/out")"
  [ "$(grep -c 'out of memory.*CUDA_DEVICE_MEMORY_LIMIT_0' "$tmp/err")" = 1 ] || fail "$m: refusal log: $(cat "$tmp/err")"
  # The cap read, once, at start.
  [ "$(grep -c "limits read: device 0 $GIB bytes (1024 MiB) from CUDA_DEVICE_MEMORY_LIMIT_0='1g'" "$tmp/err")" = 1 ] ||
    fail "$m: start-up line: $(cat "$tmp/err")"
  grep -q "cap is $GIB bytes" "$tmp/err" || fail "$m: the log line does not name the cap: $(cat "$tmp/err")"

  # Unknown symbols, cuGetExportTable, RTLD_NEXT/RTLD_DEFAULT.
  vg CUDA_DEVICE_MEMORY_LIMIT=1g -- "$m" symbols >"$tmp/out" 2>&1 || fail "$m symbols: $(cat "$tmp/out")"
  # fork before and after cuInit.
  vg CUDA_DEVICE_MEMORY_LIMIT=1g -- "$m" fork 64 >"$tmp/out" 2>&1 || fail "$m fork: $(cat "$tmp/out")"
done

# Processes racing to the cap: never above, and refused only when less
# than a chunk is left.
for round in 1 2 3; do
  : >"$tmp/race"
  for i in 1 2 3 4 5 6; do
    vg CUDA_DEVICE_MEMORY_LIMIT=2g -- dlsym fill 30 3 >>"$tmp/race" 2>>"$tmp/race.err" &
    pids+=($!)
  done
  wait
  pids=()
  sum=$(awk '/^filled/ {s += $2} END {print s + 0}' "$tmp/race")
  [ "$(grep -c '^filled' "$tmp/race")" = 6 ] || fail "race: $(cat "$tmp/race" "$tmp/race.err")"
  [ "$sum" -le $((2 * GIB)) ] || fail "race round $round: $sum bytes charged over a cap of $((2 * GIB))"
  [ $((2 * GIB - sum)) -lt $((30 * MIB)) ] || fail "race round $round: false OOM, $((2 * GIB - sum)) bytes left"
done

# Threads racing to the cap.
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym threads 8 10 2>/dev/null)
sum=$(sed -n 's/^filled //p' <<<"$out")
[ "$sum" -le "$GIB" ] && [ $((GIB - sum)) -lt $((10 * MIB)) ] || fail "threads: $out"

# kill -9 at random points of allocation storms on every path: once they
# are gone, nothing is charged, in our views and in the simulator's.
for round in 1 2 3 4 5; do
  for i in 1 2 3 4; do
    # env execs the program: $! is its pid, not a subshell's.
    env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" CUDA_DEVICE_MEMORY_LIMIT=3g \
      "$prog" "${modes[$((i % ${#modes[@]}))]}" storm 30 $((round * 10 + i)) >/dev/null 2>&1 &
    pids+=($!)
  done
  sleep "0.$((RANDOM % 9 + 1))"
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; sleep 0.0$((RANDOM % 5)); done
  wait 2>/dev/null || true
  for p in "${pids[@]}"; do ! kill -0 "$p" 2>/dev/null || fail "storm process $p survived kill -9"; done
  pids=()
  out=$(vg CUDA_DEVICE_MEMORY_LIMIT=3g -- dlsym info)
  grep -q "^cuMemGetInfo total $((3 * GIB)) free $((3 * GIB))$" <<<"$out" || fail "after kill -9 round $round: $out"
  grep -q "^nvmlDeviceGetMemoryInfo total $((3 * GIB)) used 0 " <<<"$out" || fail "after kill -9 round $round (NVML): $out"
  truth=$("$prog" dlsym info | sed -n 's/^nvmlDeviceGetMemoryInfo total [0-9]* used \([0-9]*\) .*/\1/p')
  [ "$truth" = 0 ] || fail "after kill -9 round $round the simulator still has $truth bytes used"
done

# CUDA_DISABLE_CONTROL=true: everything passes through.
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DISABLE_CONTROL=true -- dlsym info)
grep -q "^cuDeviceTotalMem $physical$" <<<"$out" || fail "CUDA_DISABLE_CONTROL: $out"

# A region file of another version: refused with a message, caps per process.
head -c 4096 /dev/zero >"$tmp/old-region"
out=$(env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/old-region" CUDA_DEVICE_MEMORY_LIMIT=1g \
  "$prog" dlsym fill 100 0 2>&1) || fail "old region: $out"
grep -q "region file .* is 4096 bytes" <<<"$out" || fail "old region: no message: $out"
grep -q "^filled $((1000 * MIB)) result 2$" <<<"$out" || fail "old region: the cap did not hold: $out"

# The CUDA 13 runtime (a .cu program built with nvcc -cudart shared; it
# reaches the driver through cuGetProcAddress only): a 1 GiB container.
rt=$MIGKIT_BUILD_DIR/sim/bin/cuda-sim-runtime
if [ -x "$rt" ]; then
  if ! env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" CUDA_DEVICE_MEMORY_LIMIT=1g \
      CUDA_DEVICE_SM_LIMIT=50 GPU_CORE_UTILIZATION_POLICY=force "$rt" >"$tmp/runtime" 2>&1; then
    fail "CUDA runtime program with the library: $(grep -v '^ok' "$tmp/runtime")"
  fi
  grep -q '^PASSED' "$tmp/runtime" || fail "runtime program did not pass with the library"
  grep -q '^ok   free memory back to 1024 MiB' "$tmp/runtime" || fail "the runtime does not see the cap: $(cat "$tmp/runtime")"
  grep -q 'out of memory: .*CUDA_DEVICE_MEMORY_LIMIT_0' "$tmp/runtime" || fail "no refusal line from the runtime's big allocation"
  # The runtime retains its primary context through the CUDART export table,
  # never through cuDevicePrimaryCtxRetain: the context (400 MiB here) is
  # charged all the same, on first use. Under a cap it does not fit in, the
  # first allocation fails; under 1 GiB the process sees 624 MiB free.
  env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region-ctx-small" CUDA_DEVICE_MEMORY_LIMIT=64m \
    MIGKIT_SIM_CUDA_CTX_MIB=400 "$rt" >"$tmp/runtime-ctx-small" 2>&1 || true
  grep -q '^FAIL cudaMalloc(&d, 64 << 20) -> cudaErrorMemoryAllocation$' "$tmp/runtime-ctx-small" ||
    fail "a runtime context of 400 MiB fitted under a 64 MiB cap: $(grep -v '^ok' "$tmp/runtime-ctx-small")"
  grep -q "out of memory: allocation of $((400 * MIB)) bytes on device 0" "$tmp/runtime-ctx-small" ||
    fail "no refusal of the runtime's context: $(grep -v '^ok' "$tmp/runtime-ctx-small")"
  if ! env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region-ctx" CUDA_DEVICE_MEMORY_LIMIT=1g \
      MIGKIT_SIM_CUDA_CTX_MIB=400 "$rt" >"$tmp/runtime-ctx" 2>&1; then
    fail "CUDA runtime program with a 400 MiB context under 1 GiB: $(grep -v '^ok' "$tmp/runtime-ctx")"
  fi
  grep -q '^ok   cudaMemGetInfo total 1024 MiB, free 624 MiB$' "$tmp/runtime-ctx" ||
    fail "the runtime's context is not charged: $(grep 'MemGetInfo total\|free memory' "$tmp/runtime-ctx")"
  grep -q '^ok   free memory back to 624 MiB$' "$tmp/runtime-ctx" ||
    fail "the runtime's context is not charged once: $(grep 'free memory' "$tmp/runtime-ctx")"
else
  echo "note: no nvcc: the CUDA runtime program was not built"
fi

finish "modes: ${modes[*]}"
