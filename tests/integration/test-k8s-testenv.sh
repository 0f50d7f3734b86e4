#!/usr/bin/env bash
# Smoke test of scripts/k8s-testenv, the real control plane later tests use:
# start etcd + kube-apiserver + kube-scheduler on loopback, check that they
# listen on 127.0.0.1 only, /readyz with the token (curl) and with kubectl,
# RBAC and authentication, create and read a Node, schedule a Pod on it,
# compact etcd and see 410 Gone, restart the apiserver, then stop. A start
# that fails must take down what it started and say why.
#
# An environment that cannot start FAILS this test. Only MIGKIT_SKIP_K8S=1
# (for developer machines without the build) turns it into a skip.
set -euo pipefail
if [ "${MIGKIT_SKIP_K8S:-}" = 1 ]; then
  echo "SKIP: MIGKIT_SKIP_K8S=1"
  exit 0
fi
testenv=$(cd "$(dirname "$0")/../.." && pwd)/scripts/k8s-testenv
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-k8s-testenv.XXXXXX" 2>/dev/null || mktemp -d)
dir=$tmp/env
cleanup() {
  "$testenv" stop "$dir" >/dev/null 2>&1 || true
  "$testenv" stop "$tmp/bad" >/dev/null 2>&1 || true
  "$testenv" stop "$tmp/bad2" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }

# Build (a no-op when cached) apart from start, so start's time shows alone.
"$testenv" build || fail "k8s-testenv build failed"

step "start"
t0=$SECONDS
envlines=$("$testenv" start "$dir" --scheduler --owner-pid $$) || fail "k8s-testenv start failed"
echo "started in $((SECONDS - t0))s"
eval "$envlines"
for v in KUBECONFIG MIGKIT_K8S_SERVER MIGKIT_K8S_TOKEN MIGKIT_K8S_CA MIGKIT_K8S_KUBECTL; do
  [ -n "${!v:-}" ] || fail "start printed no $v: $envlines"
done
[ "$("$testenv" env "$dir")" = "$envlines" ] || fail "env DIR differs from what start printed"
[[ $MIGKIT_K8S_SERVER == https://127.0.0.1:* ]] || fail "server is $MIGKIT_K8S_SERVER"
kc() { "$MIGKIT_K8S_KUBECTL" --kubeconfig "$KUBECONFIG" --request-timeout=20s "$@"; }
api() { # METHOD PATH [curl args...]: prints the body, then the HTTP status on a line
  local m=$1 p=$2; shift 2
  curl -sS --max-time 20 --cacert "$MIGKIT_K8S_CA" -H "Authorization: Bearer $MIGKIT_K8S_TOKEN" \
    -X "$m" -w '\n%{http_code}' "$@" "$MIGKIT_K8S_SERVER$p"
}
status_of() { tail -n 1 <<<"$1"; }

step "everything listens on 127.0.0.1 only"
pids=()
for c in etcd kube-apiserver kube-scheduler; do
  [ -s "$dir/$c.pid" ] || fail "no pid file for $c"
  pids+=("$(cat "$dir/$c.pid")")
done
listening=$(ss -Hltnp)
n=0
for pid in "${pids[@]}"; do
  while read -r addr; do
    n=$((n + 1))
    [[ $addr == 127.0.0.1:* ]] || fail "pid $pid listens on $addr"
  done < <(grep "pid=$pid," <<<"$listening" | awk '{print $4}')
done
[ "$n" -ge 4 ] || fail "expected at least 4 listening sockets (etcd x2, apiserver, scheduler), saw $n: $listening"

step "readyz, with the token and with kubectl"
out=$(api GET /readyz)
[ "$out" = $'ok\n200' ] || fail "GET /readyz: $out"
out=$(kc get --raw /readyz) || fail "kubectl get --raw /readyz failed"
[ "$out" = ok ] || fail "kubectl /readyz: $out"
"$testenv" status "$dir" || fail "status reports a problem"
out=$(kc version -o json) || fail "kubectl version failed"
grep -q '"gitVersion": "v1.20' <<<"$out" || fail "server is not 1.20: $out"
# The beta versions that have a v1 beside them are not served (start's
# --runtime-config); their v1 is.
out=$(api GET /apis/batch/v1beta1)
[ "$(status_of "$out")" = 404 ] || fail "batch/v1beta1 is served: $out"
out=$(api GET /apis/batch/v1)
[ "$(status_of "$out")" = 200 ] || fail "batch/v1 is not served: $out"

step "authentication and RBAC"
out=$(curl -sS --max-time 20 --cacert "$MIGKIT_K8S_CA" -H "Authorization: Bearer wrong" \
  -o /dev/null -w '%{http_code}' "$MIGKIT_K8S_SERVER/api/v1/nodes")
[ "$out" = 401 ] || fail "a wrong token got HTTP $out, expected 401"
out=$(curl -sS --max-time 20 --cacert "$MIGKIT_K8S_CA" -H "Authorization: Bearer $MIGKIT_K8S_USER_TOKEN" \
  -o /dev/null -w '%{http_code}' "$MIGKIT_K8S_SERVER/api/v1/nodes")
[ "$out" = 403 ] || fail "the unprivileged user got HTTP $out listing nodes, expected 403"

step "create and read a Node"
kc create -f - <<'EOF' >/dev/null || fail "kubectl create node failed"
apiVersion: v1
kind: Node
metadata:
  name: testenv-node-1
  labels:
    nvidia.com/mig.config: all-disabled
EOF
out=$(kc get node testenv-node-1 -o 'jsonpath={.metadata.labels.nvidia\.com/mig\.config}')
[ "$out" = all-disabled ] || fail "node label read back as '$out'"
out=$(api GET /api/v1/nodes/testenv-node-1)
[ "$(status_of "$out")" = 200 ] || fail "GET node: $out"
grep -q '"name": *"testenv-node-1"' <<<"$out" || fail "GET node body: $out"
out=$("$MIGKIT_K8S_KUBECTL" --kubeconfig "$MIGKIT_K8S_CERT_KUBECONFIG" get node testenv-node-1 -o name) \
  || fail "the client-certificate kubeconfig does not work"
[ "$out" = node/testenv-node-1 ] || fail "client-certificate get node: $out"

step "the scheduler binds a Pod to the Node"
out=$(api PATCH /api/v1/nodes/testenv-node-1/status -H 'Content-Type: application/merge-patch+json' \
  --data '{"status":{"capacity":{"cpu":"8","memory":"32Gi","pods":"110"},"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"},"conditions":[{"type":"Ready","status":"True","reason":"Test","message":"test","lastHeartbeatTime":"2024-01-01T00:00:00Z","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}')
[ "$(status_of "$out")" = 200 ] || fail "PATCH node status: $out"
# The apiserver taints new Nodes not-ready; without a node controller the
# test removes the taint itself.
kc taint node testenv-node-1 node.kubernetes.io/not-ready:NoSchedule- >/dev/null || fail "untaint failed"
kc create -f - <<'EOF' >/dev/null || fail "kubectl create pod failed"
apiVersion: v1
kind: Pod
metadata:
  name: testenv-pod
  namespace: default
spec:
  containers:
  - name: c
    image: example.invalid/none:1
EOF
node=""
for ((i = 0; i < 120; i++)); do
  node=$(kc get pod testenv-pod -o 'jsonpath={.spec.nodeName}')
  [ -z "$node" ] || break
  sleep 0.25
done
[ "$node" = testenv-node-1 ] || { tail -n 20 "$dir/kube-scheduler.log" >&2; fail "pod not scheduled within 30 s (nodeName '$node')"; }

step "compact: an old resource version is 410 Gone"
old_rv=$(kc get node testenv-node-1 -o 'jsonpath={.metadata.resourceVersion}')
kc label node testenv-node-1 nvidia.com/mig.config=all-1g.5gb --overwrite >/dev/null
rev=$("$testenv" compact "$dir") || fail "compact failed"
[ "$rev" -gt "$old_rv" ] || fail "compacted to $rev, not past $old_rv"
out=$(api GET "/api/v1/nodes?resourceVersion=$old_rv&resourceVersionMatch=Exact")
[ "$(status_of "$out")" = 410 ] || fail "list at compacted rv $old_rv: $out"
grep -q '"reason": *"Expired"' <<<"$out" || fail "410 without reason Expired: $out"

step "restart the apiserver: state persists"
# --kill: the scheduler's open watches would hold a graceful shutdown for 60 s.
"$testenv" restart "$dir" kube-apiserver --kill || fail "restart kube-apiserver failed"
out=$(kc get node testenv-node-1 -o 'jsonpath={.metadata.labels.nvidia\.com/mig\.config}')
[ "$out" = all-1g.5gb ] || fail "after the restart the label is '$out'"

step "a second start in the same DIR is refused"
if "$testenv" start "$dir" >/dev/null 2>"$tmp/err"; then fail "start on a used DIR succeeded"; fi
grep -q 'not empty' "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"

step "stop"
"$testenv" stop "$dir" || fail "stop failed"
# A stopped component may stay a zombie until its reaper (init here) waits for
# it, and may be reaped between two reads: a stat that is gone counts as gone.
for pid in "${pids[@]}"; do
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || state=gone
  case $state in gone|Z|X) ;; *) fail "pid $pid still runs after stop (state $state)" ;; esac
done
if "$testenv" status "$dir" >/dev/null; then fail "status says ready after stop"; fi
"$testenv" stop "$dir" || fail "a second stop is not a no-op"

# failed_start SUBDIR WHAT PATTERN PATTERN -- START-ARGS...: start must fail,
# its stderr must match both patterns, and nothing it started may still run.
failed_start() {
  local d=$tmp/$1 what=$2 p1=$3 p2=$4 rc
  shift 5
  set +e
  "$testenv" start "$d" "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "start with $what succeeded"
  if ! grep -q -- "$p1" "$tmp/err" || ! grep -q -- "$p2" "$tmp/err"; then
    fail "the error after $what does not show the complaint: $(cat "$tmp/err")"
  fi
  for c in etcd kube-apiserver; do
    [ ! -s "$d/$c.pid" ] || fail "$c pid file left after a start with $what"
  done
  ! pgrep -f -- "--data-dir $d/etcd" >/dev/null || fail "etcd of the start with $what still runs"
  ! pgrep -f -- "--cert-dir=$d/pki" >/dev/null || fail "the apiserver of the start with $what still runs"
}

step "a start that fails stops what it started and shows the log"
failed_start bad "a bad apiserver flag" kube-apiserver no-such-flag -- -- --no-such-flag=1

step "a start whose etcd fails says so and stops the apiserver started beside it"
failed_start bad2 "a bad etcd flag" 'etcd did not start' no-such-etcd-flag -- --etcd-arg --no-such-etcd-flag

echo "test-k8s-testenv: all checks passed"
