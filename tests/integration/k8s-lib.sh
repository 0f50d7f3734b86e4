# Sourced by integration tests that need the k8s-testenv's kube-apiserver
# only in a later step (test-device-plugin.sh, test-gpu-operator.sh,
# test-manifests.sh): it takes 5-25 s to come up, mostly the apiserver's own
# start, so it is started in the background first and the test's other steps
# run meanwhile.
#
# k8s_start_early DIR [ARG...]: `k8s-testenv start DIR --no-build --owner-pid $$
# ARG...` in the background (its output in DIR.start.out and DIR.start.err).
# k8s_env_early: waits for that start and evals its environment lines
# (KUBECONFIG, MIGKIT_K8S_KUBECTL...); returns 1, with its error on stderr,
# when it failed. k8s_stop_early: for the test's cleanup: waits for a start
# still under way (bounded by the k8s-testenv's own timeouts), then stops it
# with SIGKILL (nothing of a throw-away control plane is kept: a graceful stop
# only costs seconds).
k8s_early_dir=
k8s_early_pid=
k8s_start_early() {
  k8s_early_dir=$1
  shift
  "$MIGKIT_K8S_TESTENV" start "$k8s_early_dir" --no-build --owner-pid $$ "$@" \
    >"$k8s_early_dir.start.out" 2>"$k8s_early_dir.start.err" &
  k8s_early_pid=$!
}
k8s_env_early() {
  local rc=0
  [ -n "$k8s_early_pid" ] || { echo "k8s_env_early: no k8s_start_early" >&2; return 1; }
  wait "$k8s_early_pid" || rc=$?
  k8s_early_pid=
  if [ "$rc" != 0 ]; then
    echo "k8s-testenv start exited $rc: $(tail -n 20 "$k8s_early_dir.start.err")" >&2
    return 1
  fi
  eval "$(cat "$k8s_early_dir.start.out")"
}
k8s_stop_early() {
  [ -n "$k8s_early_dir" ] || return 0
  [ -z "$k8s_early_pid" ] || wait "$k8s_early_pid" 2>/dev/null || true
  "$MIGKIT_K8S_TESTENV" stop "$k8s_early_dir" --kill >/dev/null 2>&1 || true
}
