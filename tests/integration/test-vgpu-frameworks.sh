#!/usr/bin/env bash
# libmigkit-vgpu.so where frameworks go (issue 26), on the CUDA driver
# simulator: VMM allocations charged for the physical allocation's lifetime
# in every order (released while mapped, unmapped first, retained handles,
# one unmap over two mappings, from a thread with no current context, host
# locations not charged, refusal at the cap, a handle imported by a second
# process charged once); contexts charged and shown in the views;
# HAMi-core's value syntax; the caps following CUDA_VISIBLE_DEVICES (indices
# and UUIDs) and nothing else; NVML's process list limited to the
# container's processes with their charge; pinned host memory not charged;
# CUDA graphs' memory charged; a tensor-parallel NCCL pair near its share.
# Exit 77 (skipped) when the simulator is not built.
set -euo pipefail
. "$(dirname "$0")/vgpu-lib.sh"
GIB=1073741824
MIB=1048576
vg() {
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" "${envs[@]}" "$prog" "$@"
}
total_of() { sed -n 's/^cuMemGetInfo total \([0-9]*\) .*/\1/p'; }

# VMM in every order: the charge lives from create to the last release
# after the last unmap.
for order in release-mapped unmap-first retain thread host range export; do
  rc=0
  vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym vmm "$order" 64 >"$tmp/out" 2>"$tmp/err" || rc=$?
  case $rc in
    0) grep -q "^vmm $order ok$" "$tmp/out" || fail "vmm $order: $(cat "$tmp/out")" ;;
    77) echo "note: vmm $order not available on this simulator: $(grep '^note' "$tmp/out" || true)" ;;
    *) fail "vmm $order (exit $rc): $(cat "$tmp/out" "$tmp/err")" ;;
  esac
done
# Refused at the cap with CUDA_ERROR_OUT_OF_MEMORY, never over it.
vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym vmm cap 64 >"$tmp/out" 2>/dev/null || fail "vmm cap: $(cat "$tmp/out")"
grep -q "^vmm cap result 2 created $GIB$" "$tmp/out" || fail "vmm cap: $(cat "$tmp/out")"

# Stream-ordered pools: what the pool keeps reserved past a free is charged;
# trimming gives it back.
rc=0
vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym pool 256 >"$tmp/out" 2>"$tmp/err" || rc=$?
case $rc in
  0) grep -q "^pool ok$" "$tmp/out" || fail "pool: $(cat "$tmp/out")" ;;
  77) echo "note: pool reservation not modelled by this simulator: $(grep '^note' "$tmp/out" || true)" ;;
  *) fail "pool (exit $rc): $(cat "$tmp/out" "$tmp/err")" ;;
esac

# CUDA graphs' memory: allocation nodes (added, captured from cuMemAllocAsync,
# or in a child graph moved into its node) charged from the launch that makes
# the graph pool reserve them, not at capture nor instantiation; a launch past the cap refused with
# CUDA_ERROR_OUT_OF_MEMORY before the driver reserves; given back by
# cuDeviceGraphMemTrim. Through dlsym and cuGetProcAddress (the runtime's way).
for mode in dlsym procaddr; do
  rc=0
  vg CUDA_DEVICE_MEMORY_LIMIT=1g -- $mode graph 256 >"$tmp/out" 2>"$tmp/err" || rc=$?
  case $rc in
    0) grep -q "^graph ok$" "$tmp/out" || fail "graph memory ($mode): $(cat "$tmp/out")" ;;
    77) echo "note: graph memory nodes not available on this simulator" ;;
    *) fail "graph memory ($mode, exit $rc): $(cat "$tmp/out" "$tmp/err")" ;;
  esac
done

# Contexts: 300 MiB each on this simulated GPU, charged and shown.
export MIGKIT_SIM_CUDA_CTX_MIB=300
ctx=$((300 * MIB))
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym ctx 2>&1)
grep -q "^ctx primary $ctx created $ctx destroyed $ctx$" <<<"$out" || fail "contexts: $out"
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym info 2>&1)
grep -q "^cuMemGetInfo total $GIB free $((GIB - ctx))$" <<<"$out" || fail "context not in cuMemGetInfo: $out"
grep -q "^nvmlDeviceGetMemoryInfo total $GIB used $ctx " <<<"$out" || fail "context not in NVML's view: $out"
# A 1 GiB container holds 1 GiB with its context, not 1.3.
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym fill 100 0 2>/dev/null)
grep -q "^filled $((700 * MIB)) result 2$" <<<"$out" || fail "fill beside a context: $out"

# NVML's process list: the container's processes with their charge, not
# the node's (a process outside the container holds memory on the GPU).
"$prog" dlsym hold 100 4 >"$tmp/outside" 2>&1 &
pids+=($!)
# env execs the program: $! is its pid, not a subshell's.
env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" CUDA_DEVICE_MEMORY_LIMIT=1g \
  "$prog" dlsym hold 200 4 >"$tmp/inside" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do grep -q ready "$tmp/outside" && grep -q ready "$tmp/inside" && break; sleep 0.1; done
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym procs 2>/dev/null)
inside=${pids[1]} outside=${pids[0]}
for v in 1 2 3; do
  grep -q "^procs v$v pid $inside used $((200 * MIB + ctx))$" <<<"$out" || fail "procs v$v: the container's holder missing: $out"
  ! grep -q "^procs v$v pid $outside " <<<"$out" || fail "procs v$v: a process outside the container listed: $out"
done
# Without the library, NVML lists every process.
out=$("$prog" dlsym procs)
grep -q "^procs v3 pid $outside " <<<"$out" || fail "the simulator does not list the outside process: $out"
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true
pids=()
export MIGKIT_SIM_CUDA_CTX_MIB=0  # vgpu-lib.sh's: no context in the checks below

# HAMi-core's value syntax, with HAMi-core's values.
for spec in "0x40000000:$GIB" " 1g:$GIB" "1.5g:$GIB" "+1g:$GIB" "2048m:$((2 * GIB))" "010m:$((8 * MIB))"; do
  value=${spec%:*} want=${spec##*:}
  out=$(vg "CUDA_DEVICE_MEMORY_LIMIT_0=$value" -- dlsym info 2>&1)
  [ "$(total_of <<<"$out")" = "$want" ] || fail "CUDA_DEVICE_MEMORY_LIMIT_0='$value': $out"
  grep -q "limits read: device 0 $want bytes .* from CUDA_DEVICE_MEMORY_LIMIT_0='$value'" <<<"$out" ||
    fail "no start-up line for '$value': $out"
done
# A per-device 0 falls back to the all-devices value (HAMi-core's order).
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=2g CUDA_DEVICE_MEMORY_LIMIT_0=0 -- dlsym info 2>/dev/null)
[ "$(total_of <<<"$out")" = $((2 * GIB)) ] || fail "CUDA_DEVICE_MEMORY_LIMIT_0=0 beside 2g: $out"

# CUDA_VISIBLE_DEVICES=2,3: NVML devices 2 and 3 are CUDA's 0 and 1, capped;
# 0 and 1 are not the container's. Before any CUDA process (the variable
# says it) and after one recorded the UUIDs; by index and by UUID.
uuid2=$("$MIGKIT_BUILD_DIR/sim/bin/nvidia-smi" -L | sed -n 's/^GPU 2: .*(UUID: \(GPU-[^)]*\)).*/\1/p')
uuid3=$("$MIGKIT_BUILD_DIR/sim/bin/nvidia-smi" -L | sed -n 's/^GPU 3: .*(UUID: \(GPU-[^)]*\)).*/\1/p')
[ -n "$uuid2" ] && [ -n "$uuid3" ] || fail "no UUIDs from the simulator's nvidia-smi -L"
# The recorded UUIDs are the run's: "after" holds the recording CUDA process
# alive (a region no process lives in forgets them, region.h).
for cvd in 2,3 "$uuid2,$uuid3" "${uuid2:0:12},${uuid3:0:12}"; do
  rm -f "$tmp/region"
  for step in before after; do
    if [ $step = after ]; then
      env LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" CUDA_VISIBLE_DEVICES="$cvd" \
        CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g "$prog" dlsym hold 1 10 >"$tmp/holder" 2>/dev/null &
      pids+=($!)
      for _ in $(seq 100); do grep -q ready "$tmp/holder" && break; sleep 0.1; done
    fi
    out=$(vg CUDA_VISIBLE_DEVICES="$cvd" CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g -- dlsym nvml-totals 4 2>/dev/null)
    grep -q "^nvml 2 total $GIB$" <<<"$out" && grep -q "^nvml 3 total $((2 * GIB))$" <<<"$out" &&
      ! grep -q "^nvml [01] total [0-9]\{1,10\}$" <<<"$out" ||
      fail "CUDA_VISIBLE_DEVICES=$cvd ($step a CUDA process): $out"
  done
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
done

# Tensor parallelism: two processes of the container, one GPU each, under
# CUDA_DEVICE_SM_LIMIT=40 (HAMi-core's vLLM TP>1 hang), each round a 2 ms
# kernel, then a real NCCL allreduce between them (cuda-lib-nccl tp: rank 0's
# unique id through a pipe, ncclCommInitRank, the bootstrap over loopback),
# then a synchronise: both finish, no deadlock, each near its share (the
# simulator's GPUs are idle otherwise, so policy force). Without NCCL in the
# toolkit, the same rounds exchange a byte through fifos (prog-vgpu
# exchange). Deliberately in the region the cases above used, whose last run
# recorded other devices (CUDA_VISIBLE_DEVICES=2,3) as CUDA's 0 and 1: a
# library that took that record for its own devices measured the wrong GPU,
# never corrected its estimates and ran at 61-76 % (cuda-needs.md, 23:00).
nccl=$MIGKIT_BUILD_DIR/tests/cuda-libs/cuda-lib-nccl
# exchange NAME ENV...: runs the pair; "NAME: share0 share1" in $tmp/NAME.share.
exchange() {
  local name=$1 dev in out
  shift
  if [ -x "$nccl" ]; then
    timeout -s KILL 120 env NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN LD_LIBRARY_PATH="$simlib:/usr/local/cuda/lib64" \
      "$@" "$nccl" tp 300 >"$tmp/$name.out" 2>&1 || true
    for dev in 0 1; do sed -n "s/^tp rank $dev rounds 300 share \([0-9.]*\)$/\1/p" "$tmp/$name.out"; done >"$tmp/$name.share"
    return
  fi
  rm -f "$tmp/a2b" "$tmp/b2a"
  mkfifo "$tmp/a2b" "$tmp/b2a"
  for dev in 0 1; do
    if [ $dev = 0 ]; then in=$tmp/b2a out=$tmp/a2b; else in=$tmp/a2b out=$tmp/b2a; fi
    timeout -s KILL 60 env "$@" PROG_VGPU_DEVICE=$dev "$prog" dlsym exchange 300 "$in" "$out" >"$tmp/$name$dev" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
  cat "$tmp/${name}0" "$tmp/${name}1" >"$tmp/$name.out"
  sed -n 's/^exchange done 300 share \([0-9.]*\)$/\1/p' "$tmp/${name}0" "$tmp/${name}1" >"$tmp/$name.share"
}
[ -x "$nccl" ] || echo "note: cuda-lib-nccl not built (no NCCL in the toolkit): the exchange goes through fifos"
# Each within 5 points of 40 (the issue's aim). Measured here, 300 rounds:
# 39.1-40.4 under a load average of 17-19, 87-88 % without the library (a
# round's own CPU time, ~0.3 ms, fits in the 3 ms the limit leaves, so the
# share holds until a round's overhead nears 3 ms). A machine so loaded that
# the pair without the library stays under 55 % cannot tell a limit from
# none: the pair is run again once, then the case fails saying so.
for try in 1 2; do
  exchange free
  exchange tp LD_PRELOAD="$vgpu" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/region" CUDA_DEVICE_SM_LIMIT=40 \
    GPU_CORE_UTILIZATION_POLICY=force
  awk 'NF && $1 < 55 { low = 1 } END { exit !(NR == 2 && !low) }' "$tmp/free.share" && break
done
[ "$(wc -l <"$tmp/free.share")" = 2 ] || fail "exchange without the library did not finish: $(cat "$tmp/free.out")"
awk 'NF && $1 < 55 { low = 1 } END { exit low }' "$tmp/free.share" ||
  fail "without the library the pair reached only $(tr '\n' ' ' <"$tmp/free.share")%: too loaded to check a 40 % share"
[ "$(wc -l <"$tmp/tp.share")" = 2 ] || fail "tensor-parallel exchange: both ranks must finish: $(cat "$tmp/tp.out")"
dev=0
while read -r share; do
  awk -v s="$share" 'BEGIN { exit !(s >= 35 && s <= 45) }' ||
    fail "tensor-parallel exchange, rank $dev: share $share, want 40 +- 5"
  echo "tensor-parallel exchange, rank $dev: share $share (without the library: $(sed -n "$((dev + 1))p" "$tmp/free.share"))"
  dev=$((dev + 1))
done <"$tmp/tp.share"

# Pinned host memory is host memory: not refused when the device is at its cap.
out=$(vg CUDA_DEVICE_MEMORY_LIMIT=1g -- dlsym pinned 64 2>/dev/null)
grep -q "^pinned 0$" <<<"$out" || fail "pinned host memory at a full device: $out"

finish
