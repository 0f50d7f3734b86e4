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
# sched_start_k8s (then kc, api, kwait, sim, ann), fake_gpu_node, wait_bound,
# wait_devices, wait_inventory and wait_pending.
#
# Waits are for the event itself, polled with a bounded deadline, never a
# fixed sleep; a poll costs one process at most (kwait polls the apiserver
# from one python), as tests share 2 cores with the control plane they wait on.
if [ -z "${MIGKIT_K8S_TESTENV:-}" ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset (no test kube-apiserver)"
  exit 0
fi
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh" # grpc_python for the stand-in kubelet
# python3 looked up once, not through a version manager's shim (python3-lib.sh);
# every python3 of these tests (and $PY) runs it directly.
# shellcheck source=python3-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/python3-lib.sh"
test_name=$(basename "$0" .sh)
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/$test_name.XXXXXX")
pids=()
fail_logs=(ext.log k8s/kube-scheduler.log)
sched_cleanup_hook() { :; }
# Everything is signalled first, then waited for: each daemon takes up to a
# second to stop. The control plane is thrown away: killed, not stopped.
cleanup() {
  sched_cleanup_hook
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$MIGKIT_K8S_TESTENV" stop "$tmp/k8s" --kill >/dev/null 2>&1 || true
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
# A pod that failed waits 1 s before its next try, not 1 s doubling up to 10 s
# (the defaults): the tests' pods that wait for room are retried as soon as a
# change moves them back (nothing here depends on the backoff's length).
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
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
# node_inv NODE: the Node's migkit.io/mig-inventory ("" when none).
node_inv() { kwait 10 "/api/v1/nodes/$1" 'o' 'ann(o, "mig-inventory")'; }
# pods_json: the pods of default, as a JSON list (items).
pods_json() { kwait 10 /api/v1/namespaces/default/pods 'o'; }
# ann POD KEY: the pod's migkit.io/KEY annotation ("" when none).
ann() { kwait 10 "/api/v1/namespaces/default/pods/$1" 'o' "ann(o, '$2')"; }
# gpu_pod NAME LIMITS [ANNOTATIONS]: creates the pod NAME in default, one
# container asking LIMITS (a JSON object), with ANNOTATIONS (a JSON object).
# (curl, not kubectl: a kubectl call costs seconds of CPU on a busy machine.)
gpu_pod() {
  local out a=${3:-}
  [ -n "$a" ] || a='{}'
  out=$(api POST /api/v1/namespaces/default/pods -H 'Content-Type: application/json' -w '\n%{http_code}' \
    --data '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'"$1"'","annotations":'"$a"'},"spec":{"containers":[{"name":"c","image":"example.invalid/none:1","resources":{"limits":'"$2"'}}]}}')
  [ "${out##*$'\n'}" = 201 ] || fail "creating pod $1: $out"
}
# del_pod NAME: deletes the pod at once (grace period 0, as --force).
del_pod() {
  api DELETE "/api/v1/namespaces/default/pods/$1" -H 'Content-Type: application/json' -o /dev/null -f \
    --data '{"gracePeriodSeconds":0}' || fail "delete $1"
}

# kwait SECONDS PATH EXPR [SHOW [DEFS]]: GETs PATH from the apiserver every
# $KWAIT_INTERVAL s (0.1; one python, one kept connection) until the python
# expression EXPR holds of the object `o` (None while PATH is 404); then
# prints SHOW evaluated (default, or ''): the object's JSON) and returns 0.
# After SECONDS it prints the last object (and the expression's error, if
# any) to stderr and returns 1. DEFS: python run once first, defining what
# the expressions call. Defined for them: ann(o, KEY), o's migkit.io/KEY
# annotation ("" when none); inv(o), a Node's parsed inventory (None when
# none); cond(o, TYPE), o's status condition of that type ({} when none).
kwait() {
  python3 - "$@" <<'PY'
import http.client, json, os, ssl, sys, time, urllib.parse
limit, path, expr = float(sys.argv[1]), sys.argv[2], sys.argv[3]
show = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else "json.dumps(o)"
interval = float(os.environ.get("KWAIT_INTERVAL") or 0.1)
server = urllib.parse.urlsplit(os.environ["MIGKIT_K8S_SERVER"])
ctx = ssl.create_default_context(cafile=os.environ["MIGKIT_K8S_CA"])
headers = {"Authorization": "Bearer " + os.environ["MIGKIT_K8S_TOKEN"]}
def ann(o, key):
    return ((o or {}).get("metadata", {}).get("annotations") or {}).get("migkit.io/" + key, "")
def inv(o):
    a = ann(o, "mig-inventory")
    return json.loads(a) if a else None
def cond(o, kind):
    return next((c for c in (o or {}).get("status", {}).get("conditions") or [] if c["type"] == kind), {})
if len(sys.argv) > 5:
    exec(sys.argv[5])
end, conn, o, err = time.monotonic() + limit, None, None, None
while True:
    try:
        if conn is None:
            conn = http.client.HTTPSConnection(server.hostname, server.port, context=ctx, timeout=10)
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        if r.status not in (200, 404):
            raise OSError("HTTP %d: %s" % (r.status, body[:200]))
        o = json.loads(body) if r.status == 200 else None
        err = None
        if eval(expr):
            print(eval(show))
            sys.exit(0)
    except (OSError, http.client.HTTPException) as e:  # a dropped connection: a new one
        err, conn = e, None
    except Exception as e:  # the expression on an object not complete yet
        err = e
    if time.monotonic() > end:
        print("kwait %s: never %s (%r); last: %s" % (path, expr, err, json.dumps(o)[:4000]), file=sys.stderr)
        sys.exit(1)
    time.sleep(interval)
PY
}

# fake_gpu_node NAME GPUS: a Ready Node with 64 CPUs, 512Gi and GPUS
# nvidia.com/gpu (the apiserver gives a new Node the not-ready taint, which no
# kubelet clears here).
fake_gpu_node() {
  local out
  out=$(api POST /api/v1/nodes -H 'Content-Type: application/json' \
    --data '{"apiVersion":"v1","kind":"Node","metadata":{"name":"'"$1"'","labels":{"kubernetes.io/hostname":"'"$1"'"}}}' \
    -w '%{http_code}') && [ "${out: -3}" = 201 ] || fail "create node $1: $out"
  out=$(api PATCH "/api/v1/nodes/$1/status" -H 'Content-Type: application/merge-patch+json' -f \
    --data '{"status":{"capacity":{"cpu":"64","memory":"512Gi","pods":"110","nvidia.com/gpu":"'"$2"'"},"allocatable":{"cpu":"64","memory":"512Gi","pods":"110","nvidia.com/gpu":"'"$2"'"},"conditions":[{"type":"Ready","status":"True","reason":"Test","message":"test","lastHeartbeatTime":"2024-01-01T00:00:00Z","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}') \
    || fail "node $1 status: $out"
  out=$(api PATCH "/api/v1/nodes/$1" -H 'Content-Type: application/merge-patch+json' -f \
    --data '{"spec":{"taints":null}}') || fail "untaint $1: $out"
}

# wait_bound POD [SECONDS]: its node, once bound (within SECONDS, 60).
wait_bound() {
  kwait "${2:-60}" "/api/v1/namespaces/default/pods/$1" 'o["spec"].get("nodeName")' 'o["spec"]["nodeName"]' ||
    fail "pod $1 not bound: $(kc get pod "$1" -o 'jsonpath={.status.conditions}')"
}
# wait_bound_retried POD: wait_bound for a pod kube-scheduler may have found
# unschedulable before the extender saw the room it needs (the extender's
# informer and kube-scheduler see a change apart): kube-scheduler 1.20 tries
# such a pod again only on a change it watches (a Node's annotations are not
# one) or after 60 s; a label set every 3 s stands for that retry (60 s at most).
wait_bound_retried() {
  local k n
  for ((k = 1; k <= 20; k++)); do
    n=$(kwait 3 "/api/v1/namespaces/default/pods/$1" 'o["spec"].get("nodeName")' 'o["spec"]["nodeName"]' \
      2>/dev/null) && { echo "$n"; return 0; }
    kc label pod "$1" --overwrite "migkit-test-retry=$k" >/dev/null || fail "labelling $1"
  done
  fail "pod $1 not bound: $(kc get pod "$1" -o 'jsonpath={.status.conditions}')"
}
# wait_devices POD: its migkit.io/mig-devices, once the agent wrote it (60 s at most).
wait_devices() {
  kwait 60 "/api/v1/namespaces/default/pods/$1" 'ann(o, "mig-devices")' 'ann(o, "mig-devices")' ||
    fail "pod $1: no devices recorded"
}
# wait_inventory NODE [EXPR]: NODE's migkit.io/mig-inventory once published
# and, with EXPR (python), once EXPR holds of it as `i`, the parsed inventory
# (60 s at most).
wait_inventory() {
  kwait 60 "/api/v1/nodes/$1" "(lambda i: i is not None and (${2:-True}))(inv(o))" 'ann(o, "mig-inventory")' ||
    fail "the inventory of $1 never had: ${2:-a value}"
}
# wait_pending POD: its PodScheduled message once kube-scheduler found it
# unschedulable (60 s at most); fails when the pod is bound.
wait_pending() {
  local msg
  msg=$(kwait 60 "/api/v1/namespaces/default/pods/$1" \
    'o["spec"].get("nodeName") or cond(o, "PodScheduled").get("message")' \
    '"bound to " + o["spec"]["nodeName"] if o["spec"].get("nodeName") else cond(o, "PodScheduled")["message"]') &&
    [ "${msg#bound to }" = "$msg" ] || fail "$1 was not left Pending: ${msg:-no PodScheduled message}"
  echo "$msg"
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
