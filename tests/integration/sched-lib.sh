# Sourced by tests/integration/test-scheduler*.sh: the common setup of the
# scheduler's end-to-end tests with the real kube-scheduler 1.20 from
# scripts/k8s-testenv. Skips (exit 0) without MIGKIT_K8S_TESTENV. Sets tmp
# (removed on exit, with every pid in pids killed, sched_cleanup_hook run
# first and the test env stopped), fail() (prints the last lines of each
# file of fail_logs under $tmp), step(), port (the extender's) and hport,
# writes $tmp/kube-scheduler.yaml (the extender at 127.0.0.1:$port, HAMi's
# resources) and $tmp/sched-config.yaml (the extender's config: the A100
# profiles allowed; a test appends its nodeconfig), sets mig_config
# (examples/config.yaml: all-enabled, MIG on and no instances), and defines
# sched_start_k8s (then kc, api, sim, ann), fake_gpu_node, wait_bound and
# wait_devices.
if [ -z "${MIGKIT_K8S_TESTENV:-}" ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset (no test kube-apiserver)"
  exit 0
fi
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh" # grpc_python for the stand-in kubelet
test_name=$(basename "$0" .sh)
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/$test_name.XXXXXX")
pids=()
fail_logs=(ext.log k8s/kube-scheduler.log)
sched_cleanup_hook() { :; }
cleanup() {
  sched_cleanup_hook
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  done
  "$MIGKIT_K8S_TESTENV" stop "$tmp/k8s" >/dev/null 2>&1 || true
  [ -n "${MIGKIT_KEEP_TEST_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "${fail_logs[@]}"; do
    echo "--- $f (last 30 lines):" >&2
    tail -n 30 "$tmp/$f" >&2 2>/dev/null || true
  done
  exit 1
}
step() { echo "--- $* ($SECONDS s)"; }
unset MIGKIT_SIM_FAULTS NODE_NAME MIGKIT_SCHEDULER_CONFIG

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
hport=$(free_port)

# Scheduler config: v1beta1 for kube-scheduler 1.20. --config makes it ignore
# --kubeconfig, so the client connection is given here (the file exists once
# the apiserver is up, before the scheduler starts).
cat >"$tmp/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $tmp/k8s/kubeconfig
leaderElection:
  leaderElect: false
# The insecure port defaults to 0.0.0.0:10251, which parallel tests would share.
healthzBindAddress: 127.0.0.1:$hport
metricsBindAddress: 127.0.0.1:$hport
extenders:
- urlPrefix: http://127.0.0.1:$port
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 1
  nodeCacheCapable: true
  httpTimeout: 30s
  managedResources:
  - name: nvidia.com/gpu
    ignoredByScheduler: false
  - name: nvidia.com/gpumem
    ignoredByScheduler: true
  - name: nvidia.com/gpumem-percentage
    ignoredByScheduler: true
  - name: nvidia.com/gpucores
    ignoredByScheduler: true
EOF

cat >"$tmp/sched-config.yaml" <<EOF
version: v1
allowedProfiles:
  - models: ["A100-SXM4-40GB"]
    profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
EOF
mig_config=$MIGKIT_SOURCE_DIR/examples/config.yaml

sched_start_k8s() {
  "$MIGKIT_K8S_TESTENV" build >/dev/null || fail "k8s-testenv build failed"
  local envlines
  envlines=$("$MIGKIT_K8S_TESTENV" start "$tmp/k8s" --owner-pid $$ --scheduler \
    --scheduler-arg "--config=$tmp/kube-scheduler.yaml") || fail "k8s-testenv start failed"
  eval "$envlines"
}
kc() { "$MIGKIT_K8S_KUBECTL" "$@"; }
wait_ready() { # wait_ready PORT [TRIES]: until the extender on PORT answers /readyz (TRIES x 0.1 s, 100)
  for ((i = 0; i < ${2:-100}; i++)); do
    curl -sf "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 0 # the caller's next check says what is wrong
}
api() { # METHOD PATH [curl args...]
  curl -sS --cacert "$MIGKIT_K8S_CA" -H "Authorization: Bearer $MIGKIT_K8S_TOKEN" -X "$1" \
    "$MIGKIT_K8S_SERVER$2" "${@:3}"
}
sim() { MIGKIT_SIM_STATE=$tmp/sim-$1.json "$MIGKIT_BIN" -q --simulate dgx-a100 "${@:2}"; }
ann() { kc get pod "$1" -o "jsonpath={.metadata.annotations.migkit\\.io/$2}"; }

# fake_gpu_node NAME GPUS: a Ready Node with 64 CPUs, 512Gi and GPUS nvidia.com/gpu.
fake_gpu_node() {
  kc create -f - >/dev/null <<EOF || fail "create node $1"
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/hostname: $1}
EOF
  local out
  out=$(api PATCH "/api/v1/nodes/$1/status" -H 'Content-Type: application/merge-patch+json' \
    --data '{"status":{"capacity":{"cpu":"64","memory":"512Gi","pods":"110","nvidia.com/gpu":"'"$2"'"},"allocatable":{"cpu":"64","memory":"512Gi","pods":"110","nvidia.com/gpu":"'"$2"'"},"conditions":[{"type":"Ready","status":"True","reason":"Test","message":"test","lastHeartbeatTime":"2024-01-01T00:00:00Z","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}') \
    || fail "node $1 status: $out"
  kc taint node "$1" node.kubernetes.io/not-ready:NoSchedule- >/dev/null || fail "untaint $1"
}

# wait_bound POD: its node, once bound.
wait_bound() { # wait_bound POD [TRIES]: its node, polled TRIES (200) times
  local n=""
  for ((i = 0; i < ${2:-200}; i++)); do
    n=$(kc get pod "$1" -o 'jsonpath={.spec.nodeName}')
    [ -z "$n" ] || break
    sleep 0.2
  done
  [ -n "$n" ] || fail "pod $1 not bound: $(kc get pod "$1" -o 'jsonpath={.status.conditions}')"
  echo "$n"
}
# wait_devices POD: its migkit.io/mig-devices, once the agent wrote it.
wait_devices() {
  local d=""
  for ((i = 0; i < 200; i++)); do
    d=$(ann "$1" mig-devices)
    [ -z "$d" ] || break
    sleep 0.2
  done
  [ -n "$d" ] || fail "pod $1: no devices recorded"
  echo "$d"
}

# standin_start DIR: the stand-in kubelet (kubelet_standin.py, python3-grpcio)
# serving DIR/dp (DIR short: Unix socket paths are at most 108 bytes), its
# events in DIR/events.jsonl, commands on fd 7; sets standin_pid and defines
# wait_ev EXPR (up to $standin_wait_s seconds, default 30) and dcmd VERB
# ARGS... (the reply's JSON line; fail() when none). Returns 1 when python3-grpcio, python3-protobuf or protoc is
# missing.
standin_start() {
  grpc_python || return 1
  standin_dir=$1
  mkdir -p "$standin_dir/dp"
  : >"$standin_dir/events.jsonl"
  mkfifo "$standin_dir/cmd"
  "$PY" "$MIGKIT_SOURCE_DIR/tests/integration/kubelet_standin.py" serve --dir "$standin_dir/dp" \
    --out "$standin_dir/events.jsonl" --proto "$MIGKIT_SOURCE_DIR/proto/deviceplugin.proto" \
    <"$standin_dir/cmd" 2>>"$tmp/standin.log" &
  standin_pid=$!
  exec 7>"$standin_dir/cmd"
  echo 0 >"$standin_dir/cmd-no"
  wait_ev "e['event'] == 'listening'" >/dev/null || fail "the stand-in kubelet did not start"
}
wait_ev() {
  "$PY" "$MIGKIT_SOURCE_DIR/tests/integration/kubelet_standin.py" wait --out "$standin_dir/events.jsonl" \
    --expr "$1" --timeout "${standin_wait_s:-30}" 2>/dev/null
}
dcmd() { # called in $(...): the command counter is a file
  local cmd_no
  cmd_no=$(($(cat "$standin_dir/cmd-no") + 1))
  echo "$cmd_no" >"$standin_dir/cmd-no"
  echo "c$cmd_no $*" >&7
  wait_ev "e['event'] == 'reply' and e['id'] == 'c$cmd_no'" || fail "no reply to '$*'"
}
