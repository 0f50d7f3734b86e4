#!/usr/bin/env bash
# The device plugin's CDI spec file (docs/device-plugin.md, "CDI spec file")
# on a simulated dgx-h100 (GPUs 0-1 whole, 2-7 with MIG devices): written at
# start with a cdi-* device-list strategy, none without; valid per the CDI
# reference library (Debian's golang-github-container-orchestrated-devices-
# container-device-interface-dev, built into tests/integration/cdi-check with
# Debian's Go, offline) and every name resolved and injected as a container
# engine does; rewritten after a new MIG layout and SIGHUP; removed at exit.
# Then Podman's own CDI support (podman from Debian) resolves a device name
# into the OCI spec it hands its runtime (a stub runtime records it): the same
# edits as the reference library's; it refuses a name the spec does not have;
# and a container runs with the device where podman can start one.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}" "${MIGKIT_BUILD_DIR:?}"
WAIT=${MIGKIT_DP_TEST_WAIT:-30}
fail() { echo "FAIL: $*" >&2; [ -n "${plog:-}" ] && [ -f "$plog" ] && tail -n 20 "$plog" >&2; exit 1; }
unset MIG_STRATEGY DEVICE_LIST_STRATEGY DEVICE_ID_STRATEGY NVIDIA_DRIVER_ROOT NVIDIA_DEV_ROOT CONFIG_FILE \
  MIGKIT_CDI_SPEC_DIR DEVICE_PLUGIN_PATH

# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh"
cdi_src=/usr/share/gocode/src/github.com/container-orchestrated-devices/container-device-interface
command -v go >/dev/null && [ -d "$cdi_src" ] ||
  missing "golang-go or golang-github-container-orchestrated-devices-container-device-interface-dev" scripts/install-deps

plugin_tmp mk-cdi
# shellcheck source=python3-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/python3-lib.sh"
podman_spec=
podman_image=
plugin_cleanup_hook() {
  [ -z "$podman_spec" ] || rm -f "$podman_spec"
  [ -z "$podman_image" ] || podman rmi -f "$podman_image" >/dev/null 2>&1 || true
}

# ---- the checker, built offline from Debian's Go packages ----
checker=$MIGKIT_BUILD_DIR/test-tmp/cdi-check
mkdir -p "$MIGKIT_BUILD_DIR/test-tmp"
if [ ! -x "$checker" ] || [ "$MIGKIT_SOURCE_DIR/tests/integration/cdi-check/main.go" -nt "$checker" ]; then
  # Go's own build cache where there is one (~/.cache/go-build): the strict and
  # the sanitizer build trees then compile the CDI library once (~13 s of CPU),
  # not once each; else one in the build tree.
  gocache=$(GOFLAGS= go env GOCACHE 2>/dev/null || true)
  case $gocache in "" | off) gocache=$MIGKIT_BUILD_DIR/test-tmp/go-cache ;; esac
  (cd "$MIGKIT_SOURCE_DIR/tests/integration/cdi-check" &&
    GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOPROXY=off GOCACHE=$gocache \
      go build -o "$checker" .) || fail "cannot build the CDI checker"
fi

# ---- a host: driver root with the driver's files, a dev root with device nodes ----
root=$tmp/root
ver=550.54.15 # the simulator's driver version
mkdir -p "$root/usr/lib/x86_64-linux-gnu" "$root/usr/bin"
for f in libcuda.so.$ver libnvidia-ml.so.$ver libnvidia-ptxjitcompiler.so.$ver libcuda.so.535.104.05; do
  : >"$root/usr/lib/x86_64-linux-gnu/$f"
done
ln -s libcuda.so.$ver "$root/usr/lib/x86_64-linux-gnu/libcuda.so.1"
: >"$root/usr/bin/nvidia-smi"
chmod +x "$root/usr/bin/nvidia-smi"
devroot=$tmp/devroot
mkdir -p "$devroot/dev/nvidia-caps"
# nvidiactl, nvidia-uvm, nvidia0-7 and the access caps of mig-minors
# (tests/fixtures/plugin/proc: every GPU, GI and CI: 1,080), made by one
# process (a mknod each took 1-3 minutes on a loaded machine); exit 1 when
# any mknod is refused.
nodes=yes
python3 - "$devroot/dev" "$MIGKIT_SOURCE_DIR/tests/fixtures/plugin/proc/driver/nvidia-caps/mig-minors" <<'EOF' || nodes=
import os, re, stat, sys
dev, minors = sys.argv[1], sys.argv[2]
want = [("nvidiactl", 195, 255), ("nvidia-uvm", 511, 0)] + [("nvidia%d" % i, 195, i) for i in range(8)]
for line in open(minors):
    name, minor = line.split()
    if re.fullmatch(r"gpu[0-7]/gi[^/]*/(ci[^/]*/)?access", name):
        want.append(("nvidia-caps/nvidia-cap" + minor, 237, int(minor)))
refused = 0
for path, major, minor in want:
    try:
        os.mknod(os.path.join(dev, path), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except OSError:
        refused += 1
sys.exit(1 if refused else 0)
EOF
[ -n "$nodes" ] || echo "NOTE: cannot create device nodes here (mknod refused): validation only, no injection"
export MIGKIT_PROC_ROOT=$MIGKIT_SOURCE_DIR/tests/fixtures/plugin/proc

state=$tmp/state.json
MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c mixed-3 >/dev/null || fail "apply"

cdi=$tmp/cdi
spec=$cdi/k8s.device-plugin.nvidia.com-gpu.json
plog=
start_plugin() {
  plog=$tmp/plugin-$((++plugin_no)).log
  MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --device-plugin-path "$tmp/dp" \
    --kubelet-socket '' --cdi-spec-dir "$cdi" --nvidia-driver-root "$root" --dev-root "$devroot" "$@" 2>"$plog" &
  plugin_pid=$!
  pids+=("$plugin_pid")
}
plugin_no=0
mkdir -p "$tmp/dp"
wait_for() { # wait_for CMD...: until it succeeds, WAIT seconds
  local i
  for ((i = 0; i < WAIT * 10; i++)); do "$@" && return 0; sleep 0.1; done
  return 1
}
stop_plugin() {
  kill -TERM "$plugin_pid"
  wait "$plugin_pid" || fail "the plugin exited $? after SIGTERM"
}

# ---- no CDI strategy: no spec ----
start_plugin --mig-strategy mixed
wait_for grep -q "Serving 'nvidia.com/gpu'" "$plog" || fail "the plugin did not start"
stop_plugin
[ ! -e "$spec" ] || fail "a spec was written without a CDI strategy"

# ---- cdi-cri: the spec, valid, every device resolvable ----
start_plugin --mig-strategy mixed --device-list-strategy cdi-cri
wait_for test -s "$spec" || fail "no CDI spec at '$spec'"
grep -q "Wrote the CDI spec '$spec': 52 devices, 4 driver files" "$plog" || fail "log: $(grep -i cdi "$plog")"
out=$("$checker" "$cdi") || fail "the CDI reference library rejects the spec: $out"
echo "$out"
# 8 GPUs + 6 x 3 MIG devices, by UUID and by index
[ "$out" = "spec k8s.device-plugin.nvidia.com-gpu.json kind k8s.device-plugin.nvidia.com/gpu devices 52" ] \
  || fail "checker: $out"
gpu0=$(grep -o '"name": "GPU-[^"]*"' "$spec" | head -1 | cut -d'"' -f4)
mig=$(grep -o '"name": "MIG-[^"]*"' "$spec" | head -1 | cut -d'"' -f4)
[ -n "$gpu0" ] && [ -n "$mig" ] || fail "no GPU or MIG device names in the spec"
if [ -n "$nodes" ]; then
  out=$("$checker" "$cdi" "k8s.device-plugin.nvidia.com/gpu=$gpu0" "k8s.device-plugin.nvidia.com/gpu=2:0" \
    "k8s.device-plugin.nvidia.com/gpu=$mig") || fail "injection failed: $out"
  echo "$out"
  want_gpu="device k8s.device-plugin.nvidia.com/gpu=$gpu0
  env NVIDIA_VISIBLE_DEVICES=void
  mount /usr/bin/nvidia-smi $root/usr/bin/nvidia-smi
  mount /usr/lib/x86_64-linux-gnu/libcuda.so.$ver $root/usr/lib/x86_64-linux-gnu/libcuda.so.$ver
  mount /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.$ver $root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.$ver
  mount /usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.$ver $root/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.$ver
  node /dev/nvidia-uvm c 511:0
  node /dev/nvidia0 c 195:0
  node /dev/nvidiactl c 195:255"
  got=$(echo "$out" | sed -n 2,10p)
  [ "$got" = "$want_gpu" ] || fail "GPU 0 injected as: $got"
  # MIG device 2:0 with its GI and CI access caps of GPU 2 from mig-minors
  caps=$(echo "$out" | sed -n '/gpu=2:0$/,/^device/p' | sed -n 's|.*node /dev/nvidia-caps/nvidia-cap\([0-9]*\) c 237:.*|\1|p')
  names=$(for c in $caps; do awk -v c="$c" '$2==c{print $1}' "$MIGKIT_PROC_ROOT/driver/nvidia-caps/mig-minors"; done | tr '\n' ' ')
  [[ $names =~ ^gpu2/gi[0-9]+/access\ gpu2/gi[0-9]+/ci[0-9]+/access\ $ ]] || fail "2:0 caps are '$names'"
  gi=${names#gpu2/gi}; gi=${gi%%/*}
  [[ $names == "gpu2/gi$gi/access gpu2/gi$gi/ci"* ]] || fail "2:0 caps of two GPU instances: '$names'"
  echo "$out" | sed -n '/gpu=2:0$/,/^device/p' | grep -q "node /dev/nvidia2 c 195:2" || fail "2:0 lacks /dev/nvidia2"
fi
rc=0
"$checker" "$cdi" "k8s.device-plugin.nvidia.com/gpu=99" >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "an unknown device: checker status $rc, not 2 (unresolvable)"

# ---- a new MIG layout, SIGHUP: rewritten; unchanged: not rewritten ----
ino=$(stat -c %i "$spec")
kill -HUP "$plugin_pid"
wait_for grep -q "Reloading" "$plog" || fail "no reload"
# The reload writes the spec, when it does, before it serves again: once the
# second "Serving" line is there, an unchanged spec rewritten would show.
serving_twice() { [ "$(grep -c "Serving 'nvidia.com/mig-3g.40gb'" "$plog")" -ge 2 ]; }
wait_for serving_twice || fail "no restart after SIGHUP"
[ "$(stat -c %i "$spec")" = "$ino" ] || fail "the unchanged spec was rewritten"
MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c mixed-4 >/dev/null || fail "apply mixed-4"
kill -HUP "$plugin_pid"
wait_for grep -q "Wrote the CDI spec '$spec': 64 devices" "$plog" || fail "no rewrite after the new layout: $(grep -i cdi "$plog")"
out=$("$checker" "$cdi") || fail "the rewritten spec is rejected: $out"
[ "$out" = "spec k8s.device-plugin.nvidia.com-gpu.json kind k8s.device-plugin.nvidia.com/gpu devices 64" ] || fail "$out"
ls "$cdi" | grep -q '\.tmp\.' && fail "temporary files left: $(ls "$cdi")"

# ---- exit: removed ----
stop_plugin
[ ! -e "$spec" ] || fail "the spec outlived the plugin"
echo "ok: CDI spec written, validated by the CDI reference library, rewritten on a new layout, removed at exit"

# ---- Podman's CDI support ----
# Podman 4.3 reads only /etc/cdi and /var/run/cdi: a copy of the spec goes
# there under a kind of this test's own (no clash with a real spec), and is
# removed at exit.
command -v podman >/dev/null || missing "podman (the podman part)" scripts/install-deps
if ! mkdir -p /var/run/cdi 2>/dev/null || [ ! -w /var/run/cdi ]; then
  echo "SKIP (podman part): /var/run/cdi is not writable here (podman 4.3 reads specs only there and in /etc/cdi)"
  exit 0
fi
start_plugin --mig-strategy mixed --device-list-strategy cdi-annotations
wait_for test -s "$spec" || fail "no CDI spec"
kind=test-$$.migkit.io/gpu
podman_spec=/var/run/cdi/migkit-test-$$.json
sed "s|\"kind\": \"k8s.device-plugin.nvidia.com/gpu\"|\"kind\": \"$kind\"|" "$spec" >"$podman_spec"
stop_plugin
[ -n "$nodes" ] || { echo "SKIP (podman part): no device nodes here to inject"; exit 0; }
# What the CDI reference library injects for the device: the expected edits.
mkdir -p "$tmp/podman-cdi"
cp "$podman_spec" "$tmp/podman-cdi/"
want=$("$checker" "$tmp/podman-cdi" "$kind=2:0" | sed 1,2d) || fail "checker on the podman copy: $want"
# An empty image of our own, imported offline: podman 4.3 drops every
# --device (CDI or not) of a container made with --rootfs.
rootfs=$tmp/rootfs
mkdir -p "$rootfs"
podman_image=localhost/migkit-test-cdi-$$:latest
tar -C "$rootfs" -c . | podman import -q - "$podman_image" >/dev/null || fail "podman import of an empty image"
# Podman resolves the CDI names when it builds the container's OCI spec,
# before the runtime starts: an unknown name fails there ("unresolvable CDI
# devices"). A stub OCI runtime (--runtime) records the spec Podman hands it
# and refuses to create the container, so the resolution is checked without
# running anything (this VM's crun cannot: setrlimit of RLIMIT_NOFILE refused).
stub=$tmp/stub-runtime
printf '%s\n' '#!/bin/sh' 'prev=' 'for a in "$@"; do' \
  '  [ "$prev" = --bundle ] && cp "$a/config.json" "$MK_STUB_OUT"' 'prev=$a' 'done' \
  'echo "stub runtime: not running containers" >&2' 'exit 1' | sed "s|\$MK_STUB_OUT|$tmp/oci.json|" >"$stub"
chmod +x "$stub"
podman_stub() {
  timeout 120 podman --log-level=error --runtime "$stub" run --rm --network=none --device "$1" "$podman_image" \
    /nonexistent 2>&1
}
bad=$(podman_stub "$kind=99" || true)
echo "podman, unknown device: $bad"
echo "$bad" | grep -qi "unresolvable CDI devices" || fail "podman did not refuse an unknown CDI device: $bad"
[ ! -e "$tmp/oci.json" ] || fail "podman reached the runtime with an unknown CDI device"
good=$(podman_stub "$kind=2:0" || true)
[ -s "$tmp/oci.json" ] || fail "podman did not reach the runtime with '$kind=2:0': $good"
got=$("$checker" --oci "$tmp/oci.json") || fail "cannot read podman's OCI spec: $got"
while IFS= read -r line; do
  grep -qxF -- "$line" <<<"$got" || fail "podman's OCI spec for '$kind=2:0' lacks '$line'; it has:
$got"
done <<<"$want"
[ "$(grep -i nvidia <<<"$got")" = "$(grep -i nvidia <<<"$want")" ] ||
  fail "podman's OCI spec holds other NVIDIA edits than the spec's '$kind=2:0':
$(grep -i nvidia <<<"$got")"
echo "ok: podman resolves '$kind=2:0' into its OCI spec as the CDI reference library does ($(wc -l <<<"$want") edits) and refuses '$kind=99'"

# A full container run, where this machine lets podman start one: can it
# (its error for a missing command names the command)? Inside a restricted
# container it cannot (crun: setrlimit of RLIMIT_NOFILE refused).
podman_run() { timeout 120 podman --log-level=error run --rm --network=none "$@" "$podman_image" /nonexistent 2>&1; }
probe=$(podman_run || true)
if ! echo "$probe" | grep -q "/nonexistent"; then
  echo "SKIP (podman run): podman cannot start containers on this machine: $probe"
  exit 0
fi
good=$(podman_run --device "$kind=2:0" || true)
echo "podman run, known device: $good"
echo "$good" | grep -qi "CDI" && fail "podman could not resolve '$kind=2:0': $good"
echo "ok: podman runs a container with '$kind=2:0'"
