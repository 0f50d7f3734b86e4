#!/usr/bin/env bash
# `apply --mode-only` with no driver: MIG mode through PCI BAR0 on a fixture
# sysfs tree (resource0 is a regular file holding A100 register values), the
# sysfs reset, an unknown chip refused untouched, and full apply refused.
set -euo pipefail
: "${MIGKIT_BIN:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-driverless.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIGKIT_NVIDIA_SMI MIGKIT_SIM_STATE
export MIGKIT_NVML_LIB=$tmp/no-such-libnvidia-ml.so.1 MIGKIT_SYSFS_ROOT=$tmp/sys MIGKIT_PROC_ROOT=$tmp/proc
mkdir -p "$tmp/proc"
printf 'nvidia_uvm 1234 0 - Live 0x0\n' >"$tmp/proc/modules"

# GPU 0 and 1: A100 (GA100), MIG off; GPU 2: unknown chip. GPU 1 has no reset file.
python3 - "$tmp/sys" <<'PY'
import os, struct, sys
root = sys.argv[1]
def gpu(addr, boot0, reset=True, mode=0, request=0):
    d = os.path.join(root, "bus/pci/devices", addr)
    os.makedirs(d)
    for k, v in (("vendor", "0x10de"), ("device", "0x20b0"), ("class", "0x030200"),
                 ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x145f")):
        open(os.path.join(d, k), "w").write(v + "\n")
    size = 0x1000000
    open(os.path.join(d, "resource"), "w").write("0x00000000e0000000 0x%016x 0x0000000000040200\n" % (0xe0000000 + size - 1))
    with open(os.path.join(d, "resource0"), "wb") as f:
        f.truncate(0x120000)
        for off, val in ((0x0, boot0), (0x4, 0), (0x118234, 0x3ff), (0x1404, mode), (0x118F78, request)):
            f.seek(off); f.write(struct.pack("<I", val))
    if reset:
        open(os.path.join(d, "reset"), "w").close()
gpu("0000:07:00.0", 0x170000A1)
gpu("0000:0f:00.0", 0x170000A1, reset=False)
gpu("0000:47:00.0", 0x180000A1)
PY
reg() { python3 -c 'import struct,sys; f=open(sys.argv[1],"rb"); f.seek(int(sys.argv[2],0)); print(hex(struct.unpack("<I", f.read(4))[0]))' "$tmp/sys/bus/pci/devices/$1/resource0" "$2"; }

cat >"$tmp/config.yaml" <<'YAML'
version: v1
mig-configs:
  gpu0-on:
    - devices: [0]
      mig-enabled: true
      mig-devices: {}
  gpu1-on:
    - devices: [1]
      mig-enabled: true
      mig-devices: {}
  unknown-on:
    - devices: [2]
      mig-enabled: true
      mig-devices: {}
  all-on:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
YAML
cfg=$tmp/config.yaml

# Full apply needs the driver.
set +e
"$MIGKIT_BIN" apply -f "$cfg" -c gpu0-on >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "only --mode-only works without the driver" "$tmp/err" || fail "full apply without driver: $(cat "$tmp/err")"

# --mode-only: the request bits are written, the reset file gets "1"; the
# fixture cannot emulate the reset, so the mode stays pending: a reboot is needed.
set +e
"$MIGKIT_BIN" apply -f "$cfg" -c gpu0-on --mode-only >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$(reg 0000:07:00.0 0x118F78)" = 0xc000 ] || fail "request bits: $(reg 0000:07:00.0 0x118F78)"
[ "$(cat "$tmp/sys/bus/pci/devices/0000:07:00.0/reset")" = 1 ] || fail "reset not triggered"
[ "$rc" -eq 1 ] && grep -q "still disabled after the reset; a reboot is needed" "$tmp/err" || fail "after reset: $(cat "$tmp/err")"

# Emulate the reset having applied the mode: now it is applied, nothing to do.
python3 -c 'import struct,sys; f=open(sys.argv[1],"r+b"); f.seek(0x1404); f.write(struct.pack("<I", 0x8000))' \
  "$tmp/sys/bus/pci/devices/0000:07:00.0/resource0"
"$MIGKIT_BIN" apply -f "$cfg" -c gpu0-on --mode-only -o json >"$tmp/out.json"
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert d["event"] == "done" and d["success"] and d["nothing_to_do"], d' "$tmp/out.json"

# No reset file (passthrough): refused before writing? No: requested, then a reboot is needed.
set +e
"$MIGKIT_BIN" apply -f "$cfg" -c gpu1-on --mode-only >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "has no sysfs reset (GPU passthrough?)" "$tmp/err" || fail "no reset: $(cat "$tmp/err")"
# --skip-reset succeeds and leaves it pending (as upstream).
"$MIGKIT_BIN" apply -f "$cfg" -c gpu1-on --mode-only --skip-reset >/dev/null 2>&1 || fail "skip-reset"

# An unknown chip is never written.
cp "$tmp/sys/bus/pci/devices/0000:47:00.0/resource0" "$tmp/before"
set +e
"$MIGKIT_BIN" apply -f "$cfg" -c unknown-on --mode-only >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "not MIG-capable" "$tmp/err" || fail "unknown chip: $(cat "$tmp/err")"
cmp -s "$tmp/before" "$tmp/sys/bus/pci/devices/0000:47:00.0/resource0" || fail "unknown chip was written"
# ... nor under `devices: all`, which leaves it alone.
"$MIGKIT_BIN" apply -f "$cfg" -c all-on --mode-only --skip-reset >/dev/null 2>&1 || fail "all-on mode-only"
cmp -s "$tmp/before" "$tmp/sys/bus/pci/devices/0000:47:00.0/resource0" || fail "unknown chip was written under all"

# Crash convergence without the driver: the same flow as with NVML, killed
# after every mutating PCI call (a BAR0 mode request, a sysfs reset) by the
# preload shim, then re-run: it must reach the target. The shim also makes
# the fixture's reset apply the requested mode, as a GA100 does.
: "${MIGKIT_TEST_PRELOAD_PCISIM:?}"
rm -rf "$tmp/sys"
python3 - "$tmp/sys" <<'PY'
import os, struct, sys
root = sys.argv[1]
for i, bus in enumerate((0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd)):
    d = os.path.join(root, "bus/pci/devices", "0000:%02x:00.0" % bus)
    os.makedirs(d)
    for k, v in (("vendor", "0x10de"), ("device", "0x20b0"), ("class", "0x030200"),
                 ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x145f")):
        open(os.path.join(d, k), "w").write(v + "\n")
    size = 0x1000000
    open(os.path.join(d, "resource"), "w").write("0x00000000e0000000 0x%016x 0x0000000000040200\n" % (0xe0000000 + size - 1))
    with open(os.path.join(d, "resource0"), "wb") as f:
        f.truncate(0x120000)
        # GPUs 0-3 MIG on, 4-7 off.
        for off, val in ((0x0, 0x170000A1), (0x4, 0), (0x118234, 0x3ff), (0x1404, 0x8000 if i < 4 else 0), (0x118F78, 0)):
            f.seek(off); f.write(struct.pack("<I", val))
    open(os.path.join(d, "reset"), "w").close()
PY
cat >"$tmp/flip.yaml" <<'YAML'
version: v1
mig-configs:
  flip:
    - devices: [0, 1, 2, 3]
      mig-enabled: false
    - devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices: {}
YAML
# od, not python: this runs 50 times and python starts slowly on a loaded machine.
modes() { for d in "$tmp"/sys/bus/pci/devices/*; do od -An -tx4 -j $((0x1404)) -N4 "$d/resource0" | tr -d ' \n'; echo -n ' '; done; }
want="00000000 00000000 00000000 00000000 00008000 00008000 00008000 00008000 "
cp -a "$tmp/sys" "$tmp/sys.from"
pcisim() { env LD_PRELOAD="$MIGKIT_TEST_PRELOAD_PCISIM" MIGKIT_PCISIM_RESET=1 \
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$MIGKIT_BIN" "$@"; }
pcisim apply -f "$tmp/flip.yaml" --mode-only -o json >"$tmp/count.json" 2>"$tmp/err" || fail "driverless flip: $(cat "$tmp/err")"
[ "$(modes)" = "$want" ] || fail "driverless flip: modes $(modes)"
total=$(python3 -c 'import json,sys; ev=[json.loads(l) for l in open(sys.argv[1])]; d=ev[-1]
assert ev[0]["backend"] == "pci" and d["event"] == "done" and d["driverless"] and d["resets"] == 8, ev
print(d["mutations"])' "$tmp/count.json")
[ "$total" -eq 16 ] || fail "driverless flip: $total mutations, expected 8 mode requests + 8 resets"
for n in $(seq 1 "$total"); do
  rm -rf "$tmp/sys"; cp -a "$tmp/sys.from" "$tmp/sys"
  set +e
  MIGKIT_PCISIM_CRASH_AFTER=$n pcisim apply -f "$tmp/flip.yaml" --mode-only >/dev/null 2>&1; rc=$?
  set -e
  [ "$rc" -eq 137 ] || fail "crash-after $n: apply did not die (exit $rc)"
  pcisim apply -f "$tmp/flip.yaml" --mode-only >/dev/null 2>"$tmp/err" || fail "re-run after crash at $n: $(cat "$tmp/err")"
  [ "$(modes)" = "$want" ] || fail "not converged after crash at $n: $(modes)"
  pcisim apply -f "$tmp/flip.yaml" --mode-only -o json >"$tmp/again.json" 2>"$tmp/err"
  grep -Eq '"nothing_to_do": ?true' "$tmp/again.json" || fail "third run after crash at $n did something: $(cat "$tmp/again.json")"
done
echo "driverless crash test: $total crash points, all converged"
