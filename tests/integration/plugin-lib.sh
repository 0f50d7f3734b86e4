# Sourced by the device plugin's integration tests (test-device-plugin*.sh,
# test-cdi.sh, test-mps.sh, test-vgpu-path.sh): what they all need.
# mig_configs: tests/fixtures/plugin/dgx-h100-mig.yaml, their MIG layouts.
mig_configs=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fixtures/plugin" && pwd)/dgx-h100-mig.yaml

# missing WHAT HOW: WHAT is not installed or built (HOW gets it): the test
# FAILS under CI=true (CI has everything), else it is skipped (exit 0).
missing() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL: $1 missing ($2)" >&2
    exit 1
  fi
  echo "SKIP: $1 missing ($2)"
  exit 0
}

# need_harness: sets $harness, the kubelet's own device manager
# (kubelet-harness, built by `scripts/k8s-testenv build` into the cache's
# bin/; $MIGKIT_KUBELET_HARNESS overrides), or missing().
need_harness() {
  harness=${MIGKIT_KUBELET_HARNESS:-}
  if [ -z "$harness" ] && [ -n "${MIGKIT_K8S_TESTENV:-}" ]; then
    local cache
    cache=$("$MIGKIT_K8S_TESTENV" path 2>/dev/null || true)
    [ -z "$cache" ] || harness=$cache/bin/kubelet-harness
  fi
  [ -n "$harness" ] && [ -x "$harness" ] || missing "kubelet-harness ('${harness:-unset}')" "scripts/k8s-testenv build"
}

# grpc_python: sets $PY to a python with grpcio and protobuf (the image's
# python3 may be another interpreter than Debian's); returns 1 when there is
# none or no protoc (the stand-in kubelet needs both).
grpc_python() {
  PY=
  local p
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import grpc, google.protobuf' 2>/dev/null; then PY=$p; break; fi
  done
  [ -n "$PY" ] && command -v protoc >/dev/null
}

# plugin_tmp NAME: tmp, a new directory under /tmp (short: a unix socket path
# has 108 bytes at most), removed on exit after every pid in pids is killed
# and plugin_cleanup_hook has run.
plugin_tmp() {
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  pids=()
  trap plugin_cleanup EXIT
}
plugin_cleanup_hook() { :; }
plugin_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  plugin_cleanup_hook || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}

# jline FILE EXPR: the first JSON line of FILE for which EXPR (python, `e`)
# holds, or exit 1.
jline() {
  "${PY:-python3}" - "$1" "$2" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    e = json.loads(line)
    if eval(sys.argv[2], {}, {"e": e}):
        print(line)
        sys.exit(0)
sys.exit(1)
PY
}

# standin_cmd VERB ARGS...: sends a command to the stand-in kubelet (its
# stdin on fd 7) and prints its reply (JSON line), waited for with the
# caller's wait_ev; fails without one. Called in $(...) subshells, so the
# command counter lives in $tmp/cmd-no.
standin_cmd() {
  local cmd_no r
  cmd_no=$(($(cat "$tmp/cmd-no" 2>/dev/null || echo 0) + 1))
  echo "$cmd_no" >"$tmp/cmd-no"
  echo "c$cmd_no $*" >&7
  r=$(wait_ev "e['event'] == 'reply' and e['id'] == 'c$cmd_no'") || fail "no reply to '$*'"
  echo "$r"
}
