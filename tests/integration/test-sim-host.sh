#!/usr/bin/env bash
# The simulated machine's host tree holds what upstream tools read from sysfs
# (issue 28): go-nvlib's PCI enumeration (GFD, mig-parted) requires vendor,
# class, device, numa_node and a `resource` file of exactly three values per
# line; it follows the `driver` link when there is one. A tree written by an
# older simulator (no `resource`) is replaced when the state is loaded. And
# the simulator's files stay small on disk: the 32 MiB live region is a
# sparse file until CUDA processes use it.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sim-host.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIGKIT_SIM_MACHINE MIGKIT_SYSFS_ROOT MIGKIT_PROC_ROOT XDG_STATE_HOME
export MIGKIT_SIM_STATE=$tmp/m.json

"$MIGKIT_SIM_BIN" create dgx-h100 >/dev/null
root=$("$MIGKIT_SIM_BIN" host-root)
[ "$root" = "$tmp/m.json.host" ] || fail "host-root: $root"

echo "--- every GPU: the files go-nvlib's nvpci reads, parsed as it parses them"
python3 - "$root/sys/bus/pci/devices" <<'PY'
import os, sys
top = sys.argv[1]
def fail(msg):
    sys.exit("FAIL: " + msg)
gpus = sorted(os.listdir(top))
if len(gpus) != 8:
    fail(f"{len(gpus)} devices, want 8: {gpus}")
bars = set()
for a in gpus:
    d = os.path.join(top, a)
    rd = lambda f: open(os.path.join(d, f)).read().strip()
    if int(rd("vendor"), 0) != 0x10de or int(rd("class"), 0) != 0x030200:
        fail(f"{a}: vendor {rd('vendor')} class {rd('class')}")
    int(rd("device"), 0); int(rd("numa_node"), 0)
    drv = os.path.realpath(os.path.join(d, "driver"))
    if os.path.basename(drv) != "nvidia" or not os.path.isdir(drv):
        fail(f"{a}: driver link resolves to {drv}")
    lines = rd("resource").split("\n")
    if len(lines) != 13:
        fail(f"{a}: {len(lines)} resource lines, want 13 (6 BARs, ROM, 6 IOV BARs)")
    res = {}
    for i, line in enumerate(lines):
        v = line.split(" ")
        if len(v) != 3 or not all(x.startswith("0x") and len(x) == 18 for x in v):
            fail(f"{a}: resource line {i}: '{line}'")
        start, end, flags = (int(x, 0) for x in v)
        if end != start:
            res[i] = (start, end, flags)
    if sorted(res) != [0, 1, 3]:
        fail(f"{a}: BARs {sorted(res)}, want 0, 1, 3")
    size1 = res[1][1] - res[1][0] + 1
    if size1 < 80 << 30 or size1 & (size1 - 1) or res[1][0] % size1:
        fail(f"{a}: BAR1 of {size1} bytes at {res[1][0]:#x}: not a power of two above 80 GiB, aligned")
    if res[0][1] - res[0][0] + 1 != 16 << 20 or not res[1][2] & 0x2000:  # IORESOURCE_PREFETCH
        fail(f"{a}: BAR0 {res[0]}, BAR1 flags {res[1][2]:#x}")
    for r in res.values():
        if r in bars:
            fail(f"{a}: {r} used by two GPUs")
        bars.add(r)
PY

echo "--- a tree without resource files (an older simulator) is rewritten when the state is loaded"
dev=$root/sys/bus/pci/devices/$(ls "$root/sys/bus/pci/devices" | head -1)
rm "$dev/resource" "$root/version"
"$MIGKIT_SIM_BIN" show >/dev/null
[ -s "$dev/resource" ] || fail "the older tree was kept: no $dev/resource"

echo "--- disk: the live region is sparse"
"$MIGKIT_BIN" -q --simulate dgx-h100 profiles >/dev/null
"$MIGKIT_SIM_BIN" process add --gpu 0 --memory 100 >/dev/null
"$MIGKIT_BIN" -q --simulate dgx-h100 export >/dev/null
size=$(stat -c %s "$tmp/m.json.live")
kib=$(( $(stat -c '%b * %B' "$tmp/m.json.live") / 1024 ))
[ "$size" -gt $((30 << 20)) ] || fail "live region of $size bytes (the layout changed?)"
[ "$kib" -le 1024 ] || fail "the ${size}-byte live region occupies $kib KiB on disk, want at most 1 MiB"
total=$(du -sk "$tmp" | cut -f1)
echo "machine files: $total KiB on disk (live region: $size bytes, $kib KiB used)"
[ "$total" -le 2048 ] || fail "a simulated machine takes $total KiB on disk"
echo "OK"
