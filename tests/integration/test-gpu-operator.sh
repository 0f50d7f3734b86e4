#!/usr/bin/env bash
# The GPU Operator's executable names (docs/gpu-operator.md, src/cli/upstream.c)
# resolve to the right migkit command, with upstream's flags and variables:
# nvidia-mig-parted apply/assert, gpu-feature-discovery --oneshot and its loop,
# nvidia-device-plugin serving (no kubelet), nvidia-mig-manager's flags,
# and `cmake --install` creating the links.
# It runs in a PID namespace of its own where it may (root, or user
# namespaces): config-manager signals a process by name, and must never reach
# one of the host's.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}" "${MIGKIT_BUILD_DIR:?}"
pidns_args=(--pid --fork --mount-proc --kill-child)
[ "$(id -u)" = 0 ] || pidns_args=(--user --map-current-user "${pidns_args[@]}")
if [ -z "${MIGKIT_TEST_OWN_PIDNS:-}" ] && unshare "${pidns_args[@]}" true 2>/dev/null; then
  MIGKIT_TEST_OWN_PIDNS=1 exec unshare "${pidns_args[@]}" bash "$0" "$@"
fi
if [ "${MIGKIT_TEST_OWN_PIDNS:-}" = 1 ]; then
  echo "in a PID namespace of its own (pid $$)"
else
  echo "note: unshare --pid is not permitted here: running in the caller's PID namespace"
fi
# Unix socket paths are short (108 bytes): a short temp dir.
tmp=$(mktemp -d /tmp/mk-gpuop.XXXXXX)
pids=()
. "$MIGKIT_SOURCE_DIR/tests/integration/k8s-lib.sh"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  k8s_stop_early
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# named PID NAME: waits (10 s at most) until process PID runs as NAME (argv[0]).
named() {
  local i
  for ((i = 0; i < 200; i++)); do
    [ "$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -1)" = "$2" ] && return 0
    sleep 0.05
  done
  return 1
}
# The apiserver for config-manager's last part starts now, and comes up while
# the other parts run.
cache=$("${MIGKIT_K8S_TESTENV:-/nonexistent}" path 2>/dev/null || true)
k8s=
if [ -n "${MIGKIT_K8S_TESTENV:-}" ] && [ -x "$cache/bin/kube-apiserver" ] && [ "${MIGKIT_SKIP_K8S:-}" != 1 ]; then
  k8s=1
  k8s_start_early "$tmp/k8s"
fi
unset MIG_PARTED_DEBUG MIGKIT_LIBEXEC_DIR MIG_STRATEGY GFD_MIG_STRATEGY CONFIG_FILE GFD_CONFIG_FILE NODE_NAME \
  KUBECONFIG GFD_OUTPUT_FILE GFD_ONESHOT GFD_SLEEP_INTERVAL GFD_NO_TIMESTAMP WITH_REBOOT
bindir=$(dirname "$MIGKIT_BIN")
config=$MIGKIT_SOURCE_DIR/examples/config.yaml
export MIGKIT_SIM_STATE=$tmp/dgx-a100.json MIGKIT_SIMULATE=dgx-a100
# expect RC CMD...: runs CMD, output in $tmp/out, fails unless it exits RC.
expect() {
  local want=$1 rc=0; shift
  "$@" >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(tail -5 "$tmp/out")"
}

for n in nvidia-mig-parted nvidia-mig-manager nvidia-device-plugin gpu-feature-discovery config-manager; do
  [ -L "$bindir/$n" ] && [ "$(readlink "$bindir/$n")" = migkit ] || fail "$bindir/$n is not a link to migkit"
  expect 0 "$bindir/$n" --version
  grep -q "^$n (migkit [0-9]" "$tmp/out" || [ "$n" = nvidia-mig-parted ] || fail "$n --version: $(cat "$tmp/out")"
done

# ---- nvidia-mig-parted: migkit's command line ----
P=$bindir/nvidia-mig-parted
expect 0 "$P" --simulate dgx-a100 apply -f "$config" -c all-disabled
expect 0 "$P" --simulate dgx-a100 apply -f "$config" -c all-balanced
expect 0 "$P" --simulate dgx-a100 assert -f "$config" -c all-balanced
expect 1 "$P" --simulate dgx-a100 assert -f "$config" -c all-disabled
MIG_PARTED_CONFIG_FILE=$config MIG_PARTED_SELECTED_CONFIG=all-balanced expect 0 "$P" --simulate dgx-a100 assert
expect 0 "$P" version
grep -q '^migkit [0-9]' "$tmp/out" || fail "nvidia-mig-parted version: $(cat "$tmp/out")"

# ---- gpu-feature-discovery ----
G=$bindir/gpu-feature-discovery
"$MIGKIT_BIN" --simulate dgx-a100 labels --no-timestamp --mig-strategy mixed >"$tmp/want"
grep -q '^nvidia.com/gpu.count=8$' "$tmp/want" || fail "migkit labels: $(head -3 "$tmp/want")"
expect 0 "$G" --oneshot --output-file "$tmp/gfd" --no-timestamp --mig-strategy=mixed
cmp -s "$tmp/want" "$tmp/gfd" || fail "gpu-feature-discovery --oneshot differs from migkit labels: $(diff "$tmp/want" "$tmp/gfd" | head)"
[ "$(stat -c %a "$tmp/gfd")" = 644 ] || fail "output file mode $(stat -c %a "$tmp/gfd")"
# The same through upstream's variables and the -o alias.
GFD_ONESHOT=true GFD_NO_TIMESTAMP=true GFD_MIG_STRATEGY=mixed expect 0 "$G" -o "$tmp/gfd2"
cmp -s "$tmp/want" "$tmp/gfd2" || fail "GFD_* variables: $(diff "$tmp/want" "$tmp/gfd2" | head)"
GFD_ONESHOT=1 GFD_OUTPUT_FILE="$tmp/gfd3" GFD_MIG_STRATEGY=mixed expect 0 "$G"
grep -q '^nvidia.com/gfd.timestamp=[0-9]*$' "$tmp/gfd3" || fail "no timestamp label: $(cat "$tmp/gfd3")"
GFD_ONESHOT=1 expect 0 "$G" --output-file= --no-timestamp
grep -q '^nvidia.com/gpu.count=8$' "$tmp/out" || fail "--output-file= prints to stdout: $(head -3 "$tmp/out")"
expect 2 "$G" --oneshot --frobnicate
grep -q 'flag provided but not defined: -frobnicate' "$tmp/out" || fail "unknown flag: $(cat "$tmp/out")"
expect 2 "$G" --oneshot --use-node-feature-api
expect 2 "$G" --oneshot --sleep-interval=soon
expect 2 "$G" --oneshot --device-discovery-strategy=tegra
expect 0 "$G" --oneshot --output-file "$tmp/gfd4" --device-discovery-strategy=nvml --kubeconfig /nonexistent --node-name n1
grep -q 'kubeconfig is ignored' "$tmp/out" || fail "ignored --kubeconfig not logged: $(cat "$tmp/out")"
# Without --oneshot: relabels every --sleep-interval; SIGTERM removes the file, exit 0.
"$G" --sleep-interval=1s --output-file "$tmp/loop" >"$tmp/loop.log" 2>&1 &
gfd_pid=$!
pids+=("$gfd_pid")
for _ in $(seq 200); do [ -s "$tmp/loop" ] && break; sleep 0.1; done
[ -s "$tmp/loop" ] || fail "the GFD loop wrote no $tmp/loop: $(cat "$tmp/loop.log")"
first=$(stat -c %Y.%i "$tmp/loop")
for _ in $(seq 300); do [ "$(stat -c %Y.%i "$tmp/loop" 2>/dev/null)" != "$first" ] && break; sleep 0.1; done
[ "$(stat -c %Y.%i "$tmp/loop")" != "$first" ] || fail "the GFD loop did not relabel within 30 s"
# SIGHUP relabels at once (a long interval would not).
kill -TERM "$gfd_pid"; wait "$gfd_pid" || true
"$G" --sleep-interval=1h --output-file "$tmp/loop" >"$tmp/loop.log" 2>&1 &
gfd_pid=$!
pids+=("$gfd_pid")
for _ in $(seq 200); do [ -s "$tmp/loop" ] && break; sleep 0.1; done
first=$(stat -c %i "$tmp/loop")
kill -HUP "$gfd_pid"
for _ in $(seq 200); do [ "$(stat -c %i "$tmp/loop" 2>/dev/null)" != "$first" ] && break; sleep 0.1; done
[ "$(stat -c %i "$tmp/loop")" != "$first" ] || fail "SIGHUP did not relabel: $(tail -3 "$tmp/loop.log")"
kill -TERM "$gfd_pid"
rc=0; wait "$gfd_pid" || rc=$?
[ "$rc" = 0 ] || fail "gpu-feature-discovery exited $rc after SIGTERM: $(tail -3 "$tmp/loop.log")"
[ ! -e "$tmp/loop" ] || fail "the output file is left after SIGTERM"

# ---- nvidia-device-plugin ----
D=$bindir/nvidia-device-plugin
expect 0 "$D" --help
grep -q '^nvidia-device-plugin: migkit' "$tmp/out" && grep -q '^Usage: migkit device-plugin' "$tmp/out" \
  || fail "nvidia-device-plugin --help: $(head -4 "$tmp/out")"
expect 2 "$D" --frobnicate
expect 2 "$D" --pass-device-specs=maybe
# A string slice upstream: repeated flags join; migkit's parser checks the list.
expect 2 "$D" --device-list-strategy envvar --device-list-strategy bogus
grep -q 'bogus' "$tmp/out" || fail "repeated --device-list-strategy: $(cat "$tmp/out")"
# Serving without a kubelet (KUBELET_SOCKET empty), with upstream's flags,
# ignored ones included, as the operator's DaemonSet sets them.
mkdir -p "$tmp/dp"
PASS_DEVICE_SPECS=true FAIL_ON_INIT_ERROR=true DEVICE_LIST_STRATEGY=envvar DEVICE_ID_STRATEGY=uuid \
  MPS_ROOT=/run/nvidia/mps DEVICE_PLUGIN_PATH=$tmp/dp KUBELET_SOCKET= \
  "$D" --mig-strategy=mixed --restart-on-device-unhealthy --nvidia-ctk-path /usr/bin/nvidia-ctk \
  >"$tmp/dp.log" 2>&1 &
dp_pid=$!
pids+=("$dp_pid")
# all-balanced is applied: mixed strategy, one socket per MIG profile.
sock=$tmp/dp/nvidia-mig-1g.5gb.sock
for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || fail "nvidia-device-plugin serves no $sock: $(ls "$tmp/dp"; tail -5 "$tmp/dp.log")"
for w in 'restart-on-device-unhealthy is ignored' 'nvidia-ctk-path is ignored'; do
  grep -q -- "$w" "$tmp/dp.log" || fail "device plugin log lacks '$w': $(head -5 "$tmp/dp.log")"
done
grep -q 'migkit-device-p' "/proc/$dp_pid/comm" \
  || fail "nvidia-device-plugin does not run in migkit-device-plugin: $(cat "/proc/$dp_pid/comm")"
# argv[0] stays what the operator's script ran: config-manager signals the process by it.
[ "$(tr '\0' '\n' <"/proc/$dp_pid/cmdline" | head -1)" = "$D" ] \
  || fail "argv[0] of the device plugin: $(tr '\0' ' ' <"/proc/$dp_pid/cmdline")"
kill -TERM "$dp_pid"
rc=0; wait "$dp_pid" || rc=$?
[ "$rc" = 0 ] || fail "nvidia-device-plugin exited $rc after SIGTERM: $(tail -3 "$tmp/dp.log")"

# ---- nvidia-mig-manager ----
M=$bindir/nvidia-mig-manager
expect 0 "$M" --help
grep -q '^Usage: migkit manager' "$tmp/out" || fail "nvidia-mig-manager --help: $(head -4 "$tmp/out")"
expect 2 "$M" --frobnicate
expect 2 "$M" -f "$config"
grep -q 'invalid -n <node-name> flag' "$tmp/out" || fail "nvidia-mig-manager without -n: $(cat "$tmp/out")"
# Upstream's -k is the kubelet unit (ignored), not migkit's --hooks-file; the
# run stops at the kubeconfig, after the flags were taken.
expect 1 "$M" -n node1 -f "$config" -k kubelet.service -s /usr/bin/reconfigure-mig.sh -p gpu-operator \
  --cdi-enabled=false --with-reboot=false --kubeconfig "$tmp/none"
for w in 'host-kubelet-systemd-service is ignored' 'reconfigure-script is ignored' \
         'default-gpu-clients-namespace is ignored' "$tmp/none"; do
  grep -q -- "$w" "$tmp/out" || fail "nvidia-mig-manager: output lacks '$w': $(cat "$tmp/out")"
done
grep -q 'kubelet.service' "$tmp/out" && fail "nvidia-mig-manager passed -k on as a hooks file: $(cat "$tmp/out")"

# ---- config-manager: upstream's flags; against a real apiserver when the k8s-testenv is built ----
C=$bindir/config-manager
expect 0 "$C" --help
grep -q 'CONFIG_FILE_SRCDIR' "$tmp/out" || fail "config-manager --help: $(head -3 "$tmp/out")"
NODE_NAME=n1 CONFIG_FILE_DST=$tmp/x expect 2 "$C" --oneshot
grep -q 'invalid <config-file-srcdir>: must not be empty string' "$tmp/out" || fail "config-manager: $(cat "$tmp/out")"
expect 0 "$C" -v
grep -q '^config-manager (migkit [0-9]' "$tmp/out" || fail "config-manager -v: $(cat "$tmp/out")"
expect 0 "$MIGKIT_BIN" config-manager --version
grep -q '^config-manager (migkit [0-9]' "$tmp/out" || fail "migkit config-manager --version: $(cat "$tmp/out")"

# The signal reaches only a process of config-manager's own PID namespace: a
# process of the same name in another one (a container's, seen in the host's
# /proc), started first so that it has the lower pid, is left alone.
. "$MIGKIT_SOURCE_DIR/tests/integration/stub-apiserver.sh"
mkdir -p "$tmp/stub" "$tmp/sig-avail" "$tmp/sig-cfg"
stub_apiserver_start "$tmp/stub" --node n1 || fail "the stub apiserver did not start: $(cat "$tmp/stub/api.log")"
pids+=("$stub_api_pid")
printf 'version: v1\nflags:\n  migStrategy: mixed\n' >"$tmp/sig-avail/a100"
decoy= decoy_pid=
if unshare "${pidns_args[@]}" true 2>/dev/null; then
  # The decoy is its namespace's pid 2: pid 1 (the namespace's init) ignores a
  # signal it has no handler for, so a SIGHUP sent to it by mistake would not show.
  unshare "${pidns_args[@]}" bash -c '(exec -a nvidia-device-plugin sleep 120) & wait' &
  decoy=$!
  pids+=("$decoy")
  for _ in $(seq 100); do
    init=$(pgrep -P "$decoy") && decoy_pid=$(pgrep -P "$init" -f '^nvidia-device-plugin ') && break
    sleep 0.05
  done
  [ -n "$decoy_pid" ] || fail "the decoy nvidia-device-plugin of another PID namespace did not start"
else
  echo "SKIP (other PID namespace part): unshare --pid is not permitted here"
fi
(exec -a nvidia-device-plugin sleep 120) &
target=$!
pids+=("$target")
named "$target" nvidia-device-plugin || fail "the process named nvidia-device-plugin did not start"
NODE_NAME=n1 CONFIG_FILE_SRCDIR=$tmp/sig-avail CONFIG_FILE_DST=$tmp/sig-cfg/config.yaml DEFAULT_CONFIG=a100 \
  ONESHOT=true SEND_SIGNAL=true SIGNAL=1 PROCESS_TO_SIGNAL=nvidia-device-plugin KUBECONFIG=$tmp/stub/kubeconfig \
  expect 0 "$C"
[ "$(readlink "$tmp/sig-cfg/config.yaml")" = "$tmp/sig-avail/a100" ] || fail "oneshot link: $(ls -l "$tmp/sig-cfg")"
rc=0; wait "$target" || rc=$?
[ "$rc" = $((128 + 1)) ] || fail "the process of this namespace did not get SIGHUP (exit $rc): $(cat "$tmp/out")"
if [ -n "$decoy" ]; then
  kill -0 "$decoy_pid" 2>/dev/null || fail "config-manager signalled a process of another PID namespace: $(cat "$tmp/out")"
  # KILL, not TERM: unshare --fork ignores TERM while it waits for its child,
  # so the wait lasted the decoy's whole sleep (119 of the test's 145 s in CI);
  # --kill-child then takes the decoy down with it.
  kill -KILL "$decoy"; wait "$decoy" 2>/dev/null || true
fi
grep -q "Sent signal 1 to 'nvidia-device-plugin' (pid $target)" "$tmp/out" || fail "config-manager: $(cat "$tmp/out")"
kill "$stub_api_pid" 2>/dev/null || true
echo "ok: config-manager signals the process of its own PID namespace${decoy:+, not the one of another}"

if [ -z "$k8s" ]; then
  echo "SKIP: config-manager against an apiserver (k8s-testenv not built: scripts/k8s-testenv build)"
else
  k8s_env_early || fail "k8s-testenv start failed"
  kc() { "$MIGKIT_K8S_KUBECTL" --kubeconfig "$KUBECONFIG" --request-timeout=20s "$@"; }
  kc create -f - >/dev/null <<'EOF2' || fail "create the node"
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"nvidia.com/device-plugin.config": "a100"}}}
EOF2
  mkdir -p "$tmp/avail" "$tmp/cfg"
  printf 'version: v1\nflags:\n  migStrategy: mixed\n' >"$tmp/avail/a100"
  printf 'version: v1\nflags:\n  migStrategy: single\n' >"$tmp/avail/h100"
  export NODE_NAME=n1 NODE_LABEL=nvidia.com/device-plugin.config CONFIG_FILE_SRCDIR=$tmp/avail \
    CONFIG_FILE_DST=$tmp/cfg/config.yaml DEFAULT_CONFIG= SEND_SIGNAL=false SIGNAL= PROCESS_TO_SIGNAL= ONESHOT=true
  expect 0 "$C"
  [ "$(readlink "$tmp/cfg/config.yaml")" = "$tmp/avail/a100" ] || fail "oneshot link: $(ls -l "$tmp/cfg")"
  # The sidecar: follows the label and sends SIGHUP to the process named nvidia-device-plugin.
  (exec -a nvidia-device-plugin sleep 120) &
  victim=$!
  pids+=("$victim")
  named "$victim" nvidia-device-plugin || fail "the process named nvidia-device-plugin did not start"
  ONESHOT=false SEND_SIGNAL=true SIGNAL=1 PROCESS_TO_SIGNAL=nvidia-device-plugin "$C" >"$tmp/cm.log" 2>&1 &
  cm_pid=$!
  pids+=("$cm_pid")
  # The label changes once the sidecar has acted on its first value (a100,
  # already linked): the change comes to it as a watch event.
  for _ in $(seq 200); do grep -q 'Already configured with a100' "$tmp/cm.log" && break; sleep 0.1; done
  grep -q 'Already configured with a100' "$tmp/cm.log" || fail "config-manager did not read the label: $(cat "$tmp/cm.log")"
  kc label node n1 --overwrite nvidia.com/device-plugin.config=h100 >/dev/null
  for _ in $(seq 200); do [ "$(readlink "$tmp/cfg/config.yaml")" = "$tmp/avail/h100" ] && break; sleep 0.1; done
  [ "$(readlink "$tmp/cfg/config.yaml")" = "$tmp/avail/h100" ] || fail "label change not followed: $(cat "$tmp/cm.log")"
  rc=0; wait "$victim" || rc=$?
  [ "$rc" = $((128 + 1)) ] || fail "the process named nvidia-device-plugin did not get SIGHUP (exit $rc): $(cat "$tmp/cm.log")"
  kill -TERM "$cm_pid"
  rc=0; wait "$cm_pid" || rc=$?
  [ "$rc" = 0 ] || fail "config-manager exited $rc after SIGTERM: $(tail -3 "$tmp/cm.log")"
  k8s_stop_early
  unset NODE_NAME NODE_LABEL CONFIG_FILE_SRCDIR CONFIG_FILE_DST DEFAULT_CONFIG SEND_SIGNAL SIGNAL PROCESS_TO_SIGNAL ONESHOT
fi

# ---- cmake --install creates the links and the daemon executables ----
if DESTDIR=$tmp/root cmake --install "$MIGKIT_BUILD_DIR" --prefix /usr >"$tmp/install.log" 2>&1; then
  for n in nvidia-mig-parted nvidia-mig-manager nvidia-device-plugin gpu-feature-discovery; do
    [ "$(readlink "$tmp/root/usr/bin/$n")" = migkit ] || fail "installed $n is not a link to migkit"
  done
  # config-manager: only with the image's component, not on a host's PATH.
  [ ! -e "$tmp/root/usr/bin/config-manager" ] && [ ! -L "$tmp/root/usr/bin/config-manager" ] ||
    fail "cmake --install (no component) installed /usr/bin/config-manager"
  DESTDIR=$tmp/root cmake --install "$MIGKIT_BUILD_DIR" --prefix /usr --component image >>"$tmp/install.log" 2>&1 ||
    fail "cmake --install --component image failed: $(tail -5 "$tmp/install.log")"
  [ "$(readlink "$tmp/root/usr/bin/config-manager")" = migkit ] || fail "component image: config-manager is not a link to migkit"
  for d in manager device-plugin scheduler config-manager; do
    [ -x "$tmp/root/usr/lib/migkit/migkit-$d" ] || fail "installed tree lacks /usr/lib/migkit/migkit-$d"
  done
  expect 0 "$tmp/root/usr/bin/nvidia-device-plugin" --help
  grep -q '^Usage: migkit device-plugin' "$tmp/out" || fail "installed nvidia-device-plugin --help: $(head -3 "$tmp/out")"
else
  fail "cmake --install to a DESTDIR failed: $(tail -5 "$tmp/install.log")"
fi
echo PASS
