#!/usr/bin/env bash
# The node service end to end, without root or systemd: `migkit service boot`
# (migkit.service's ExecStart) on the simulator, with a fake sysfs and proc
# tree and stand-ins for systemctl, reboot, docker and ctr on PATH that record
# their calls (tests/fixtures/service/). Shows: the selected config re-applied
# at boot; GPU clients stopped in reverse order and started again in order
# (queued, only those that ran); reboot at most once; failures leave the
# clients running and say why; the shipped hooks persist an apply's
# selection; the unit passes `systemd-analyze verify` and installs cleanly.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SIM_SMI:?}" "${MIGKIT_NVML_LIB:?}" "${MIGKIT_SOURCE_DIR:?}" \
  "${MIGKIT_BUILD_DIR:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-service.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$MIGKIT_SOURCE_DIR/tests/integration/python3-lib.sh"
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY MIGKIT_SIM_FAULTS

src=$MIGKIT_SOURCE_DIR
etc=$tmp/etc
state=$tmp/state
mkdir -p "$tmp/bin" "$etc" "$tmp/sys/bus/pci/devices" "$tmp/proc"
for f in systemctl reboot docker ctr; do
  install -m 0755 "$src/tests/fixtures/service/$f" "$tmp/bin/$f"
done
export PATH="$tmp/bin:$PATH"
export STANDIN_LOG=$tmp/calls.log STANDIN_ACTIVE=$tmp/active STANDIN_DOCKER=$tmp/docker STANDIN_CTR=$tmp/ctr
export MIGKIT_ETC_DIR=$etc MIGKIT_STATE_DIR=$state
export MIGKIT_SYSFS_ROOT=$tmp/sys MIGKIT_PROC_ROOT=$tmp/proc MIGKIT_RUN_ROOT=$tmp/run
export MIGKIT_SIM_MACHINE=dgx-a100 MIGKIT_SIM_STATE=$tmp/sim.json
export MIGKIT_NVIDIA_SMI=$MIGKIT_SIM_SMI # GPU resets through the simulator's nvidia-smi
# The nvidia module is "not loaded": only the simulated NVML says otherwise.
printf 'ext4 1032192 2 - Live 0x0000000000000000\nnvidia_uvm 1 0 - Live 0x0\n' >"$tmp/proc/modules"

mk() { "$MIGKIT_BIN" "$@"; }
mkq() { "$MIGKIT_BIN" -q "$@"; }
calls() { cat "$STANDIN_LOG" 2>/dev/null || true; }
# Runs `migkit service boot`, output in $tmp/out, exit status in $rc.
boot() { : >"$STANDIN_LOG"; set +e; mk service boot >"$tmp/out" 2>&1; rc=$?; set -e; }
expect_rc() { [ "$rc" = "$1" ] || fail "$2: exit $rc, want $1; output:"$'\n'"$(cat "$tmp/out")"; }
expect_out() { grep -qF -- "$1" "$tmp/out" || fail "$2: output lacks '$1':"$'\n'"$(cat "$tmp/out")"; }
expect_calls() {
  local got; got=$(calls | grep -E "$1" || true)
  [ "$got" = "$2" ] || fail "$3: calls matching /$1/:"$'\n'"$got"$'\n'"want:"$'\n'"$2"$'\n'"all calls:"$'\n'"$(calls)"
}
assert_applied() { mkq assert -f "$etc/config.yaml" -c "$1" >/dev/null 2>&1 || fail "$2: '$1' is not applied"; }
assert_not_applied() {
  set +e; mkq assert -f "$etc/config.yaml" -c "$1" >/dev/null 2>&1; local r=$?; set -e
  [ "$r" = 1 ] || fail "$2: assert '$1' exit $r, want 1 (not applied)"
}
sorted() { sort "$1" | tr '\n' ' '; }

# The shipped files, as `cmake --install` makes them (hooks.yaml configured
# for this build and these directories).
{ cat "$src/deploy/etc/config-header.yaml"; cat "$src/examples/config.yaml"; } >"$etc/config.yaml"
sed -e "s|@MIGKIT_BINARY@|$MIGKIT_BIN|g" -e "s|@MIGKIT_SYSCONF_DIR@|$etc|g" -e "s|@MIGKIT_STATE_DIR@|$state|g" \
  "$src/deploy/etc/hooks.yaml.in" >"$etc/hooks.yaml"
grep -q @ "$etc/hooks.yaml" && fail "hooks.yaml.in has an unknown placeholder: $(grep @ "$etc/hooks.yaml")"
cp "$src/deploy/etc/service.yaml" "$etc/service.yaml"
set_service() { # reboot=true|false, apply timeout
  sed -e "s|^reboot: .*|reboot: $1|" -e "s|^  apply: .*|  apply: ${2:-10m}|" "$src/deploy/etc/service.yaml" \
    >"$etc/service.yaml"
}

# GPU clients: three listed units active (plus docker, containerd and an
# unlisted one); containers of listed and unlisted images.
reset_clients() {
  printf '%s\n' ssh.service nvidia-dcgm.service docker.service containerd.service dcgm-exporter.service \
    kubelet.service >"$STANDIN_ACTIVE"
  printf '%s\n' "c1 nvcr.io/nvidia/k8s-device-plugin:v0.14.1" "c2 docker.io/library/nginx:latest" \
    "c3 nvcr.io/nvidia/k8s/dcgm-exporter:3.1.7-3.1.4-ubuntu20.04" "c4 example.com/my-dcgm-exporter:1" \
    >"$STANDIN_DOCKER"
  printf '%s\n' "k1 nvcr.io/nvidia/gpu-feature-discovery:v0.8.2 RUNNING" "k2 registry.k8s.io/pause:3.9 RUNNING" \
    "k3 nvcr.io/nvidia/k8s-device-plugin:v0.14.1 STOPPED" >"$STANDIN_CTR"
}
all_active="containerd.service dcgm-exporter.service docker.service kubelet.service nvidia-dcgm.service ssh.service "
stops=$'systemctl stop kubelet.service\nsystemctl stop dcgm-exporter.service\nsystemctl stop nvidia-dcgm.service'
starts=$'systemctl start --no-block nvidia-dcgm.service\nsystemctl start --no-block dcgm-exporter.service\nsystemctl start --no-block kubelet.service'
check_clients_cycled() { # $1: what
  expect_calls '^systemctl (stop|start)' "$stops"$'\n'"$starts" "$1: units stopped in reverse, started in order, queued"
  expect_calls '^(docker rm|ctr .* tasks kill)' $'docker rm -f c1\ndocker rm -f c3\nctr -n k8s.io tasks kill -s SIGKILL k1' \
    "$1: containers of listed images killed"
  [ "$(sorted "$STANDIN_ACTIVE")" = "$all_active" ] || fail "$1: active units afterwards: $(sorted "$STANDIN_ACTIVE")"
}

# ---- usage ----
set +e
mk service >/dev/null 2>&1; [ $? = 2 ] || fail "service without a command should be a usage error"
mk service frobnicate >/dev/null 2>&1; [ $? = 2 ] || fail "unknown service command should be a usage error"
mk service select >/dev/null 2>&1; [ $? = 2 ] || fail "select without a name should be a usage error"
mk service boot extra >/dev/null 2>&1; [ $? = 2 ] || fail "boot takes no argument"
set -e
out=$(mk service --help) || true
grep -q "clear-reboot-marker" <<<"$out" || fail "service --help"

# ---- selection ----
set +e
mk service select no-such-config >"$tmp/out" 2>&1; rc=$?
set -e
expect_rc 1 "select of an unknown config"
expect_out "has no config named 'no-such-config' (it has: all-disabled, all-enabled," "select of an unknown config"
[ ! -e "$state/selected-config" ] || fail "a refused selection was written"
set +e; mk service status >"$tmp/out" 2>&1; rc=$?; set -e
expect_rc 0 "status with no selection (all-disabled is what a fresh simulator has)"
expect_out "Selected config:  none (" "status with no selection"
expect_out "the boot applies 'all-disabled'" "status with no selection"
expect_out "Reboot marker:    none" "status with no selection"

# ---- (a) the selected config is applied at boot, and again after a reboot ----
# A select killed by SIGKILL between its temporary file and the rename left
# one: the next select removes it under the writers' lock.
mkdir -p "$state"
printf 'all-bal' >"$state/selected-config.tmp.4242.deadbeef"
mk service select all-balanced >"$tmp/out" 2>&1 || fail "select: $(cat "$tmp/out")"
[ ! -e "$state/selected-config.tmp.4242.deadbeef" ] || fail "select left a stale temporary file"
[ "$(cat "$state/selected-config")" = all-balanced ] || fail "selected-config: $(cat "$state/selected-config")"
set +e; mk service status >"$tmp/out" 2>&1; rc=$?; set -e
expect_rc 1 "status before the boot applied it"
expect_out "Selected config:  all-balanced ($state/selected-config)" "status"
expect_out "Applied:          no (8 GPUs differ)" "status"
reset_clients
boot
expect_rc 0 "first boot"
expect_out "MIG config 'all-balanced' applied (8 mode change(s), 8 reset(s)" "first boot"
assert_applied all-balanced "first boot"
check_clients_cycled "first boot"
set +e; mk service status -o json >"$tmp/status.json" 2>&1; rc=$?; set -e
[ "$rc" = 0 ] || fail "status after the boot: exit $rc: $(cat "$tmp/status.json")"
python3 - "$tmp/status.json" <<'PY' || fail "status json: $(cat "$tmp/status.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["selected"] == "all-balanced" and d["effective"] == "all-balanced", d
assert d["applied"] is True and d["gpus_differing"] == 0 and d["reboot_marker"] is None, d
PY

"$MIGKIT_SIM_BIN" reboot >/dev/null
assert_not_applied all-balanced "after the reboot (instances never survive it)"
mkq assert -f "$etc/config.yaml" -c all-enabled --mode-only >/dev/null || fail "Ampere MIG mode should survive a reboot"
reset_clients
boot
expect_rc 0 "boot after a reboot"
expect_out "MIG config 'all-balanced' applied (0 mode change(s), 0 reset(s); destroyed 0 GPU and 0 compute instances, created 32 and 32)" \
  "boot after a reboot"
assert_applied all-balanced "boot after a reboot"
check_clients_cycled "boot after a reboot"

# ---- (b) nothing to do: nothing stopped, nothing started ----
reset_clients
boot
expect_rc 0 "boot with nothing to do"
expect_out "MIG config 'all-balanced' already applied, nothing to do" "boot with nothing to do"
expect_calls '^(systemctl|docker|ctr|reboot)' "" "boot with nothing to do touches no client"
[ "$(sorted "$STANDIN_ACTIVE")" = "$all_active" ] || fail "nothing to do: active units changed"

# Without a selection, all-disabled is applied.
mv "$state/selected-config" "$tmp/selection.saved"
reset_clients
boot
expect_rc 0 "boot without a selection"
expect_out "No MIG config selected yet ('$state/selected-config' does not exist): applying 'all-disabled'" \
  "boot without a selection"
assert_applied all-disabled "boot without a selection"
check_clients_cycled "boot without a selection"
mv "$tmp/selection.saved" "$state/selected-config"
# A selection that config.yaml no longer has fails before touching anything.
echo gone >"$state/selected-config"
reset_clients
boot
expect_rc 1 "boot with a vanished selection"
expect_out "The selected MIG config 'gone' (from '$state/selected-config') is not in '$etc/config.yaml'" \
  "boot with a vanished selection"
expect_calls '^(systemctl|docker|ctr|reboot)' "" "boot with a vanished selection touches no client"
echo all-balanced >"$state/selected-config"

# ---- (d) failures leave the clients running and say why ----
# The layout is all-disabled now; all-balanced needs the mode changed back.
reset_clients
boot
expect_rc 0 "boot back to all-balanced"
"$MIGKIT_SIM_BIN" reboot >/dev/null
"$MIGKIT_SIM_BIN" fault set nvmlDeviceCreateGpuInstanceWithPlacement 1 INSUFFICIENT_RESOURCES >/dev/null
reset_clients
boot
expect_rc 1 "boot with an NVML failure"
expect_out "MIG config could not be applied: " "boot with an NVML failure"
expect_out "Insufficient Resources" "boot with an NVML failure"
expect_out "The GPU clients stopped for the change were started again" "boot with an NVML failure"
check_clients_cycled "boot with an NVML failure"
[ ! -e "$state/reboot-attempted" ] || fail "an NVML failure must not create the reboot marker"
"$MIGKIT_SIM_BIN" fault clear >/dev/null
# A re-run repairs it.
reset_clients
boot
expect_rc 0 "boot after the NVML failure"
assert_applied all-balanced "boot after the NVML failure"

# A client that cannot be stopped: no GPU is touched, the ones stopped before it run again.
"$MIGKIT_SIM_BIN" reboot >/dev/null
reset_clients
STANDIN_FAIL_STOP=dcgm-exporter.service boot
expect_rc 1 "boot with a failing stop"
expect_out "Cannot stop the GPU clients, so no GPU was changed: 'systemctl stop dcgm-exporter.service' failed with exit status 1: Job for dcgm-exporter.service failed" \
  "boot with a failing stop"
expect_calls '^systemctl (stop|start)' $'systemctl stop kubelet.service\nsystemctl stop dcgm-exporter.service\nsystemctl start --no-block dcgm-exporter.service\nsystemctl start --no-block kubelet.service' \
  "boot with a failing stop restarts what it stopped (and the one that failed)"
[ "$(sorted "$STANDIN_ACTIVE")" = "$all_active" ] || fail "failing stop: active units afterwards: $(sorted "$STANDIN_ACTIVE")"
"$MIGKIT_SIM_BIN" show --json >"$tmp/show.json"
python3 - "$tmp/show.json" <<'PY' || fail "a failing stop must leave the GPUs untouched: $(cat "$tmp/show.json")"
import json, sys
d = json.load(open(sys.argv[1]))
gpus = d["gpus"] if isinstance(d, dict) else d
assert all(not g.get("gpu_instances") for g in gpus), "instances were created"
PY

# The apply crashes half-way (the process dies): clients run again, the reason is given.
reset_clients
"$MIGKIT_SIM_BIN" fault crash-after 3 >/dev/null
boot
expect_rc 1 "boot whose apply dies"
expect_out "MIG config could not be applied: the apply process exited with status 137 without a result" \
  "boot whose apply dies"
check_clients_cycled "boot whose apply dies"
"$MIGKIT_SIM_BIN" fault clear >/dev/null

# The apply hangs past its timeout: it is killed, the clients run again.
# (8 s: the apply must reach the slow stop, 20 s, on a loaded machine.)
set_service false 8s
reset_clients
STANDIN_SLOW_STOP=dcgm-exporter.service boot
expect_rc 1 "boot whose apply hangs"
expect_out "The apply did not finish within 8 s: killing it" "boot whose apply hangs"
expect_out "the apply did not finish within the apply timeout (8 s; service.yaml timeouts.apply) and was killed" \
  "boot whose apply hangs"
expect_calls '^systemctl (stop|start)' $'systemctl stop kubelet.service\nsystemctl stop dcgm-exporter.service\nsystemctl start --no-block dcgm-exporter.service\nsystemctl start --no-block kubelet.service' \
  "boot whose apply hangs restarts what it stopped"
expect_out "left running by the apply" "boot whose apply hangs kills the hung stop"
# Every process's command line, read by one pgrep (a loop over /proc forked
# twice a process: 11 s on a busy machine), then searched for the stand-in's path.
hung=$(pgrep -af 'systemctl stop' || true)
if grep -F "$tmp/bin/systemctl stop" <<<"$hung"; then
  fail "the hung 'systemctl stop' outlived the killed apply"
fi
set_service false
reset_clients
boot
expect_rc 0 "boot after the failures"
assert_applied all-balanced "boot after the failures"

# An invalid service.yaml stops the boot with its position.
printf 'version: v1\nreboot: maybe\n' >"$etc/service.yaml"
boot
expect_rc 1 "boot with an invalid service.yaml"
expect_out "Invalid service settings: $etc/service.yaml:2:9: must be true or false, not string" \
  "boot with an invalid service.yaml"
set_service false

# ---- (c) reboot at most once ----
# A fresh A100 machine whose GPUs have no sysfs `reset` (passthrough): the
# mode change from disabled to enabled stays pending, only a reboot applies it.
export MIGKIT_SIM_STATE=$tmp/sim-passthrough.json
for bus in 07 0f 47 4e 87 90 b7 bd; do
  d=$tmp/sys/bus/pci/devices/0000:$bus:00.0
  mkdir -p "$d"
  echo 0x10de >"$d/vendor"; echo 0x20b0 >"$d/device"; echo 0x030200 >"$d/class"
  echo 0x10de >"$d/subsystem_vendor"; echo 0x134f >"$d/subsystem_device"
done
mkq assert -f "$etc/config.yaml" -c all-disabled >/dev/null || fail "a fresh simulator should have MIG disabled"
set_service true
reset_clients
boot
expect_rc 0 "first boot needing a reboot"
expect_out "has no sysfs reset (GPU passthrough?): its MIG mode change needs a reboot" "first boot needing a reboot"
expect_out "REBOOTING the node once to apply the MIG mode of config 'all-balanced'" "first boot needing a reboot"
expect_calls '^reboot' "reboot " "first boot needing a reboot calls reboot once"
check_clients_cycled "first boot needing a reboot"
[ -s "$state/reboot-attempted" ] || fail "no reboot marker after the reboot"
grep -q "to apply the MIG mode of config 'all-balanced'" "$state/reboot-attempted" || fail "marker: $(cat "$state/reboot-attempted")"

# The reboot did not help (the node came back with the mode still pending).
reset_clients
boot
expect_rc 1 "second boot, mode still pending"
expect_out "This node already rebooted once to change the MIG mode of config 'all-balanced' (marker '$state/reboot-attempted') and the mode is still not applied: NOT rebooting again" \
  "second boot, mode still pending"
expect_calls '^reboot' "" "second boot must not reboot"
check_clients_cycled "second boot, mode still pending"
[ -e "$state/reboot-attempted" ] || fail "the marker must stay"
set +e; mk service status >"$tmp/out" 2>&1; rc=$?; set -e
expect_rc 1 "status with a pending mode"
expect_out "Reboot marker:    present ($state/reboot-attempted): migkit rebooted this node at " "status with the marker"
reset_clients
boot
expect_rc 1 "third boot"
expect_calls '^reboot' "" "third boot must not reboot either"

# Clearing the marker allows exactly one more reboot.
mk service clear-reboot-marker >"$tmp/out" 2>&1
expect_out "Removed the reboot marker '$state/reboot-attempted'" "clear-reboot-marker"
[ ! -e "$state/reboot-attempted" ] || fail "clear-reboot-marker left the marker"
mk service clear-reboot-marker >"$tmp/out" 2>&1
expect_out "No reboot marker" "clear-reboot-marker without a marker"
reset_clients
boot
expect_rc 0 "boot after clearing the marker"
expect_calls '^reboot' "reboot " "boot after clearing the marker reboots once more"
[ -e "$state/reboot-attempted" ] || fail "marker after the second allowed reboot"

# This time the reboot applies the mode: the boot succeeds and clears the marker.
"$MIGKIT_SIM_BIN" reboot >/dev/null
reset_clients
boot
expect_rc 0 "boot after a reboot that applied the mode"
expect_out "removed the reboot marker '$state/reboot-attempted'" "boot after a reboot that applied the mode"
expect_calls '^reboot' "" "boot after a reboot that applied the mode"
assert_applied all-balanced "boot after a reboot that applied the mode"
[ ! -e "$state/reboot-attempted" ] || fail "success must remove the marker"

# With rebooting disabled: no reboot, no marker, exit 1 with the reason.
export MIGKIT_SIM_STATE=$tmp/sim-noreboot.json
set_service false
reset_clients
boot
expect_rc 1 "boot needing a reboot, rebooting disabled"
expect_out "A reboot is needed to change the MIG mode of config 'all-balanced' (no GPU reset is possible on this node), and rebooting is disabled ('reboot: false' in '$etc/service.yaml')" \
  "boot needing a reboot, rebooting disabled"
expect_calls '^reboot' "" "rebooting disabled"
check_clients_cycled "rebooting disabled"
[ ! -e "$state/reboot-attempted" ] || fail "rebooting disabled must not create a marker"
rm -rf "$tmp/sys/bus/pci/devices/"*
export MIGKIT_SIM_STATE=$tmp/sim.json

# ---- (e) an interactive apply with the shipped hooks persists its selection ----
mk apply -f "$etc/config.yaml" -c all-1g.5gb -k "$etc/hooks.yaml" >"$tmp/out" 2>&1 || fail "apply with hooks: $(cat "$tmp/out")"
[ "$(cat "$state/selected-config")" = all-1g.5gb ] || fail "the apply-start hook did not persist: $(cat "$state/selected-config")"
assert_applied all-1g.5gb "apply with hooks"
"$MIGKIT_SIM_BIN" reboot >/dev/null
reset_clients
boot
expect_rc 0 "boot after an interactive apply"
assert_applied all-1g.5gb "boot after an interactive apply"
# Another config file: refused by the hook, so the apply changes nothing.
cp "$etc/config.yaml" "$tmp/other.yaml"
set +e
mk apply -f "$tmp/other.yaml" -c all-balanced -k "$etc/hooks.yaml" >"$tmp/out" 2>&1; rc=$?
set -e
expect_rc 1 "apply of another config file with the service's hooks"
expect_out "but the node service applies '$etc/config.yaml' at boot: 'all-balanced' is not persisted" \
  "apply of another config file with the service's hooks"
[ "$(cat "$state/selected-config")" = all-1g.5gb ] || fail "the refused apply changed the selection"
assert_applied all-1g.5gb "the refused apply"

# ---- (g) no driver at boot: the MIG mode through PCI BAR0 ----
# No NVML, no nvidia module; an A100 whose resource0 is a fixture file. The
# fixture cannot emulate the reset, so the mode stays pending: reboot once;
# then "after the reboot" (mode register set by hand) the boot succeeds.
python3 - "$tmp/sys" <<'PY'
import os, struct, sys
d = os.path.join(sys.argv[1], "bus/pci/devices/0000:07:00.0")
os.makedirs(d)
for k, v in (("vendor", "0x10de"), ("device", "0x20b0"), ("class", "0x030200"),
             ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x145f")):
    open(os.path.join(d, k), "w").write(v + "\n")
open(os.path.join(d, "resource"), "w").write("0x00000000e0000000 0x00000000e0ffffff 0x0000000000040200\n")
with open(os.path.join(d, "resource0"), "wb") as f:
    f.truncate(0x120000)
    for off, val in ((0x0, 0x170000A1), (0x4, 0), (0x118234, 0x3ff), (0x1404, 0), (0x118F78, 0)):
        f.seek(off); f.write(struct.pack("<I", val))
open(os.path.join(d, "reset"), "w").close()
PY
echo all-enabled >"$state/selected-config"
set_service true
reset_clients
MIGKIT_NVML_LIB=$tmp/no-such-libnvidia-ml.so.1 boot
expect_rc 0 "driverless boot needing a reboot"
expect_out "changing MIG mode through PCI" "driverless boot needing a reboot"
expect_out "still disabled after the reset; a reboot is needed" "driverless boot needing a reboot"
expect_calls '^reboot' "reboot " "driverless boot reboots once"
check_clients_cycled "driverless boot needing a reboot"
[ "$(cat "$tmp/sys/bus/pci/devices/0000:07:00.0/reset")" = 1 ] || fail "driverless boot did not reset the GPU"
python3 -c 'import struct,sys; f=open(sys.argv[1],"r+b"); f.seek(0x1404); f.write(struct.pack("<I", 0x8000))' \
  "$tmp/sys/bus/pci/devices/0000:07:00.0/resource0"
reset_clients
MIGKIT_NVML_LIB=$tmp/no-such-libnvidia-ml.so.1 boot
expect_rc 0 "driverless boot after the reboot"
expect_out "MIG mode of config 'all-enabled' set through PCI (the NVIDIA driver is not loaded)" \
  "driverless boot after the reboot"
expect_out "removed the reboot marker" "driverless boot after the reboot"
expect_calls '^(systemctl (stop|start)|reboot)' "" "driverless boot with nothing to do"
rm -rf "$tmp/sys/bus/pci/devices/"*
set_service false
echo all-1g.5gb >"$state/selected-config"

# ---- (f) the unit: systemd-analyze verify, install rules ----
if ! command -v systemd-analyze >/dev/null 2>&1; then
  fail "systemd-analyze not found: scripts/install-deps installs systemd (needed to verify the shipped unit)"
fi
unit=$MIGKIT_BUILD_DIR/deploy/test/migkit.service
[ -f "$unit" ] || fail "no build-tree copy of the unit at $unit"
grep -qxF "ExecStart=$MIGKIT_BIN service boot" "$unit" || fail "build-tree unit ExecStart: $(grep ExecStart "$unit")"
systemd-analyze verify "$unit" >"$tmp/verify.out" 2>&1 || fail "systemd-analyze verify $unit: $(cat "$tmp/verify.out")"
[ ! -s "$tmp/verify.out" ] || fail "systemd-analyze verify warns: $(cat "$tmp/verify.out")"
grep -Eq '^(Wants|Requires|BindsTo|Requisite)=' "$unit" && fail "the unit must not pull in other units"
for want in Type=oneshot RemainAfterExit=yes DefaultDependencies=no Conflicts=shutdown.target TimeoutStartSec=15min \
  WantedBy=multi-user.target; do
  grep -qxF "$want" "$unit" || fail "unit lacks $want"
done
grep -q '^Before=.*kubelet.service' "$unit" || fail "unit must be ordered before kubelet.service"
grep -q '^After=.*nvidia-persistenced.service' "$unit" || fail "unit must be ordered after nvidia-persistenced"
# A broken unit fails verify (the check can fail).
sed 's|^ExecStart=.*|ExecStart=/nonexistent/migkit service boot|' "$unit" >"$tmp/broken.service"
systemd-analyze verify "$tmp/broken.service" >/dev/null 2>&1 && fail "verify accepted a unit with a missing binary"

# cmake --install into a DESTDIR: unit, the files users edit, the state dir;
# a second install keeps edited files.
dest=$tmp/dest
DESTDIR=$dest cmake --install "$MIGKIT_BUILD_DIR" >"$tmp/install.out" 2>&1 || fail "cmake --install: $(cat "$tmp/install.out")"
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$MIGKIT_BUILD_DIR/CMakeCache.txt")
sysconf=$(sed -n 's/^MIGKIT_SYSCONF_DIR:PATH=//p' "$MIGKIT_BUILD_DIR/CMakeCache.txt")
statedir=$(sed -n 's/^MIGKIT_STATE_DIR:PATH=//p' "$MIGKIT_BUILD_DIR/CMakeCache.txt")
unitdir=$(sed -n 's/^MIGKIT_SYSTEMD_UNIT_DIR:PATH=//p' "$MIGKIT_BUILD_DIR/CMakeCache.txt")
unitdir=${unitdir:-$prefix/lib/systemd/system}
for f in "$unitdir/migkit.service" "$prefix/bin/migkit" "$sysconf/config.yaml" "$sysconf/hooks.yaml" \
  "$sysconf/service.yaml"; do
  [ -f "$dest$f" ] || fail "cmake --install did not install $f: $(cat "$tmp/install.out")"
done
[ -d "$dest$statedir" ] || fail "cmake --install did not create $statedir"
grep -qxF "ExecStart=$prefix/bin/migkit service boot" "$dest$unitdir/migkit.service" || fail "installed ExecStart"
grep -qxF "Environment=MIGKIT_ETC_DIR=$sysconf" "$dest$unitdir/migkit.service" || fail "installed MIGKIT_ETC_DIR"
grep -qF "command: $prefix/bin/migkit" "$dest$sysconf/hooks.yaml" || fail "installed hooks.yaml command"
systemd-analyze verify --root="$dest" "$dest$unitdir/migkit.service" >"$tmp/verify.out" 2>&1 ||
  fail "systemd-analyze verify of the installed unit: $(cat "$tmp/verify.out")"
# The installed files are valid: the config and hooks parse, service.yaml too.
mkq assert -f "$dest$sysconf/config.yaml" -c all-balanced --valid-config >/dev/null || fail "installed config.yaml"
MIGKIT_ETC_DIR=$dest$sysconf MIGKIT_STATE_DIR=$tmp/state-installed "$MIGKIT_BIN" service select all-balanced >/dev/null ||
  fail "select against the installed config.yaml"
echo "# edited by the admin" >>"$dest$sysconf/config.yaml"
echo "# edited" >>"$dest$sysconf/service.yaml"
DESTDIR=$dest cmake --install "$MIGKIT_BUILD_DIR" >"$tmp/install.out" 2>&1 || fail "second cmake --install"
tail -n 1 "$dest$sysconf/config.yaml" | grep -qx "# edited by the admin" || fail "cmake --install overwrote config.yaml"
tail -n 1 "$dest$sysconf/service.yaml" | grep -qx "# edited" || fail "cmake --install overwrote service.yaml"
grep -qF "Kept (exists, not overwritten): $dest$sysconf/config.yaml" "$tmp/install.out" || fail "install output: $(cat "$tmp/install.out")"

echo "test-service: OK"
