# Sourced by the tests that drive the kubelet's own device manager
# (kubelet-harness, built by `scripts/k8s-testenv build`): sets $harness, or
# skips the test (exit 0) when it is not built — a failure under CI=true.
# Needs fail() defined by the caller.
harness=${MIGKIT_KUBELET_HARNESS:-}
if [ -z "$harness" ] && [ -n "${MIGKIT_K8S_TESTENV:-}" ]; then
  cache=$("$MIGKIT_K8S_TESTENV" path 2>/dev/null || true)
  [ -n "$cache" ] && harness=$cache/bin/kubelet-harness
fi
if [ -z "$harness" ] || [ ! -x "$harness" ]; then
  [ "${CI:-}" = true ] && fail "kubelet-harness not found ('${harness:-unset}'): run scripts/k8s-testenv build"
  echo "SKIP: kubelet-harness not built ('${harness:-unset}'; scripts/k8s-testenv build)"
  exit 0
fi
