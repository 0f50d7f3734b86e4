#!/usr/bin/env bash
# The simulator's interconnect and lost GPUs from the outside: migkit-sim's
# catalog and `lose` / `recover` commands, and the topology calls through an
# NVML client that does not use our header (Python ctypes, with the struct
# layout and constants written from nvml.h), as pynvml or go-nvml would call
# them. NVML-level details: tests/unit/test-sim.c; the snapshot matrices:
# tests/unit/test-nvml.c.
set -euo pipefail
: "${MIGKIT_SIM_BIN:?}" "${MIGKIT_NVML_LIB:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sim-topology.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset MIGKIT_SIM_MACHINE MIGKIT_SIM_FAULTS
export MIGKIT_SIM_STATE=$tmp/state.json

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
run() {
  local want=$1 rc=0
  shift
  "$MIGKIT_SIM_BIN" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "migkit-sim $* exited $rc, expected $want: $(cat "$tmp/out" "$tmp/err")"
    return 1
  fi
}
# Python loading the library: a sanitizer build needs its runtime first.
asan=$(ldd "$MIGKIT_NVML_LIB" 2>/dev/null | awk '/libasan/ { print $3 }')
pynvml() {
  if [ -n "$asan" ]; then
    LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0 python3 "$@"
  else
    python3 "$@"
  fi
}
has() { grep -Eq -e "$2" "$tmp/$1" || fail "$3: no '$2' in: $(cat "$tmp/$1")"; }
hasnt() { ! grep -Eq -e "$2" "$tmp/$1" || fail "$3: unexpected '$2' in: $(cat "$tmp/$1")"; }

# --- catalog -------------------------------------------------------------------
run 0 machines
has out '^h100-nvl-pairs +4 x NVIDIA H100 NVL, NVLink bridges \(0,1\) and \(2,3\)$' "machines lists h100-nvl-pairs"
has out '^dgx-a100 +DGX A100: .*NVSwitch \(12 NvLinks per GPU\)$' "dgx-a100 says NVSwitch"
run 0 models
has out '^h100-nvl +NVIDIA H100 NVL$' "models lists h100-nvl"

# --- lose / recover ---------------------------------------------------------------
run 0 create dgx-h100
run 2 lose || true
has err 'lose: --gpu I is required' "lose without --gpu"
run 2 recover --gpu x || true
has err "recover: invalid GPU index 'x'" "recover bad index"
run 2 lose --gpu 1 extra || true
has err "unexpected argument 'extra'" "lose extra argument"
run 1 lose --gpu 8 || true
has err 'no GPU 8' "lose a GPU the machine lacks"
run 0 lose --gpu 3
has out '^GPU 3 lost$' "lose"
run 0 show
has out '^GPU 3: .* LOST \(fallen off the bus\)$' "show marks the lost GPU"
hasnt out '^GPU [0-24-7]: .*LOST' "only GPU 3 is lost"
run 0 show --json
python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]; sys.exit(0 if g[3].get("lost") is True and "lost" not in g[2] else 1)' "$tmp/out" ||
  fail "show --json: 'lost' only on GPU 3: $(cat "$tmp/out")"

# A raw NVML client sees NVML_ERROR_GPU_IS_LOST (15) for it, success for others.
cat >"$tmp/lost.py" <<'EOF'
import ctypes, sys
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
print(nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(3), ctypes.byref(dev)),
      nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(2), ctypes.byref(dev)))
nvml.nvmlShutdown()
EOF
[ "$(pynvml "$tmp/lost.py" "$MIGKIT_NVML_LIB")" = "15 0" ] || fail "GPU 3 lost for NVML: $(pynvml "$tmp/lost.py" "$MIGKIT_NVML_LIB" 2>&1)"
run 0 recover --gpu 3
has out '^GPU 3 recovered$' "recover"
[ "$(pynvml "$tmp/lost.py" "$MIGKIT_NVML_LIB")" = "0 0" ] || fail "GPU 3 back for NVML"
# The state file's flag is validated like every other field.
python3 -c 'import json,sys; p=sys.argv[1]; s=json.load(open(p)); s["gpus"][1]["lost"]=1; json.dump(s, open(p, "w"))' \
  "$MIGKIT_SIM_STATE"
run 1 show || true
has err "gpus\[1\]: 'lost' must be true or false" "a non-boolean 'lost' is refused"
run 0 create dgx-h100 --force
run 0 lose --gpu 0
run 0 reboot
run 0 show
hasnt out 'LOST' "a reboot brings lost GPUs back"

# --- topology through ctypes -----------------------------------------------------
cat >"$tmp/topo.py" <<'EOF'
import ctypes, sys

# nvml.h (CUDA 12.x): nvmlPciInfo_t, NVML_NVLINK_MAX_LINKS, the level and
# remote device type enums.
class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
assert ctypes.sizeof(PciInfo) == 68
MAX_LINKS, NOT_SUPPORTED, SWITCH, GPU = 18, 3, 2, 0

nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
n = ctypes.c_uint()
assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
devs = []
for i in range(n.value):
    d = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(d)) == 0
    devs.append(d)
bus = []
for d in devs:
    p = PciInfo()
    assert nvml.nvmlDeviceGetPciInfo_v3(d, ctypes.byref(p)) == 0
    bus.append(p.busId.decode())

# Per GPU: "<links to switches>s" or the peers' indices per direct link, as
# go-gpuallocator counts them (remote bus id equal to the peer's).
for i, d in enumerate(devs):
    sw, peers = 0, {}
    for l in range(MAX_LINKS):
        st = ctypes.c_uint()
        r = nvml.nvmlDeviceGetNvLinkState(d, ctypes.c_uint(l), ctypes.byref(st))
        if r == NOT_SUPPORTED:
            continue
        assert r == 0, r
        if st.value != 1:
            continue
        t = ctypes.c_uint()
        assert nvml.nvmlDeviceGetNvLinkRemoteDeviceType(d, ctypes.c_uint(l), ctypes.byref(t)) == 0
        p = PciInfo()
        assert nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(d, ctypes.c_uint(l), ctypes.byref(p)) == 0
        if t.value == SWITCH:
            sw += 1
        elif p.busId.decode() in bus:
            j = bus.index(p.busId.decode())
            peers[j] = peers.get(j, 0) + 1
    levels = []
    for e in devs:
        lv = ctypes.c_uint()
        assert nvml.nvmlDeviceGetTopologyCommonAncestor(d, e, ctypes.byref(lv)) == 0
        levels.append(str(lv.value))
    print(i, "%ds" % sw, ",".join("%d:%d" % kv for kv in sorted(peers.items())) or "-", " ".join(levels))
nvml.nvmlShutdown()
EOF

# check MACHINE EXPECTED: the table above for MACHINE equals EXPECTED.
check() {
  "$MIGKIT_SIM_BIN" create "$1" --force >/dev/null
  pynvml "$tmp/topo.py" "$MIGKIT_NVML_LIB" >"$tmp/topo" 2>&1 || true
  printf '%s\n' "$2" >"$tmp/want"
  diff -u "$tmp/want" "$tmp/topo" >"$tmp/diff" || fail "topology of $1: $(cat "$tmp/diff")"
}

check dgx-a100 "0 12s - 0 20 40 40 50 50 50 50
1 12s - 20 0 40 40 50 50 50 50
2 12s - 40 40 0 20 50 50 50 50
3 12s - 40 40 20 0 50 50 50 50
4 12s - 50 50 50 50 0 20 40 40
5 12s - 50 50 50 50 20 0 40 40
6 12s - 50 50 50 50 40 40 0 20
7 12s - 50 50 50 50 40 40 20 0"
check dgx-b200 "0 18s - 0 10 40 40 50 50 50 50
1 18s - 10 0 40 40 50 50 50 50
2 18s - 40 40 0 10 50 50 50 50
3 18s - 40 40 10 0 50 50 50 50
4 18s - 50 50 50 50 0 10 40 40
5 18s - 50 50 50 50 10 0 40 40
6 18s - 50 50 50 50 40 40 0 10
7 18s - 50 50 50 50 40 40 10 0"
check h100-nvl-pairs "0 0s 1:12 0 10 40 40
1 0s 0:12 10 0 40 40
2 0s 3:12 40 40 0 10
3 0s 2:12 40 40 10 0"
check 'h100-nvl*3,t4' "0 0s 1:12 0 10 40 40
1 0s 0:12 10 0 40 40
2 0s - 40 40 0 10
3 0s - 40 40 10 0"
check t4 "0 0s - 0"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "test-sim-topology: OK"
