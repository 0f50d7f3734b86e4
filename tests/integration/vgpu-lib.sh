# Sourced by tests/integration/test-vgpu-*.sh: the common setup of the tests
# of libmigkit-vgpu.so on the CUDA driver simulator. Sets simlib, vgpu, prog,
# tmp (removed on exit, with every pid in pids killed), the simulator's
# environment, failures and fail(); exits 77 (skipped) when the simulator or
# the library is not built. finish prints the verdict and exits.
: "${MIGKIT_BUILD_DIR:?}" "${MIGKIT_TEST_PROG_VGPU:?}"
simlib=$MIGKIT_BUILD_DIR/sim/lib
vgpu=$MIGKIT_BUILD_DIR/lib/libmigkit-vgpu.so
if [ ! -e "$simlib/libcuda.so.1" ] || [ ! -e "$vgpu" ]; then
  echo "SKIP: no CUDA driver simulator ($simlib/libcuda.so.1) or no $vgpu"
  exit 77
fi
test_name=$(basename "$0" .sh)
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/$test_name.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
export LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# In the sanitizer build the test programs carry ASan, and the library (never
# instrumented) is preloaded ahead of its runtime: allowed, since the library
# intercepts no allocator. Leaks are the simulator's business, not checked here.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=0
export MIGKIT_SIM_MACHINE=dgx-a100 MIGKIT_SIM_STATE=$tmp/state.json
# The simulator charges a model's context size (A100: 400 MiB) by default; these
# tests' figures assume none unless a test sets its own.
export MIGKIT_SIM_CUDA_CTX_MIB=${MIGKIT_SIM_CUDA_CTX_MIB:-0}
prog=$MIGKIT_TEST_PROG_VGPU
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# finish [NOTE]: exit 1 when a check failed, else say all passed.
finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
  fi
  echo "$test_name: all checks passed${1:+ ($1)}"
}
