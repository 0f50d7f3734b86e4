#!/usr/bin/env bash
# `migkit labels` on simulated machines against golden files
# tests/fixtures/labels/<machine>-<strategy>[-<variant>].txt, plus the flag,
# environment and config-file precedence and the error exits.
#
# Determinism: goldens are made with --no-timestamp (nvidia.com/gfd.timestamp
# is the only label that varies between runs) and --machine-type-file
# pointing at a fixed file (nvidia.com/gpu.machine would otherwise describe
# the build host). MIGKIT_UPDATE_GOLDEN=1 rewrites the goldens instead of
# comparing.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-labels.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_STRATEGY GFD_MIG_STRATEGY CONFIG_FILE GFD_CONFIG_FILE GFD_NO_TIMESTAMP GFD_MACHINE_TYPE_FILE \
  MIG_PARTED_DEBUG MIG_PARTED_OUTPUT_FORMAT MIG_PARTED_CONFIG_LABEL
golden=$MIGKIT_SOURCE_DIR/tests/fixtures/labels
config=$MIGKIT_SOURCE_DIR/examples/config.yaml
printf 'NVIDIA DGX (simulated)\n' >"$tmp/product_name"

# labels MACHINE ARGS... with this machine's state file.
labels() {
  local machine=$1; shift
  MIGKIT_SIM_STATE=$tmp/$machine.json "$MIGKIT_BIN" --simulate "$machine" labels --no-timestamp \
    --machine-type-file "$tmp/product_name" "$@"
}
apply() {
  MIGKIT_SIM_STATE=$tmp/$1.json "$MIGKIT_BIN" -q --simulate "$1" apply -f "$config" -c "$2" >/dev/null \
    || fail "apply $2 on $1"
}
# check NAME MACHINE ARGS...: labels against tests/fixtures/labels/NAME.txt.
check() {
  local name=$1 machine=$2; shift 2
  labels "$machine" "$@" >"$tmp/$name.txt" || fail "$name: labels exited $?"
  if [ "${MIGKIT_UPDATE_GOLDEN:-}" = 1 ]; then
    cp "$tmp/$name.txt" "$golden/$name.txt"
    return
  fi
  diff -u "$golden/$name.txt" "$tmp/$name.txt" || fail "$name differs from its golden file"
  LC_ALL=C sort -c "$tmp/$name.txt" || fail "$name: not sorted"
}

# DGX A100 as shipped (MIG off), then all-1g.5gb (single), then all-balanced (mixed).
check dgx-a100-none dgx-a100
check dgx-a100-single-none dgx-a100 --mig-strategy single
apply dgx-a100 all-1g.5gb
check dgx-a100-single dgx-a100 --mig-strategy single
check dgx-a100-none-mig dgx-a100
apply dgx-a100 all-balanced
check dgx-a100-mixed dgx-a100 --mig-strategy mixed
check dgx-a100-single-invalid dgx-a100 --mig-strategy single
check dgx-h100-none dgx-h100
check dgx-h100-none-shared dgx-h100 --config-file "$golden/sharing.yaml"
apply dgx-h100 all-1g.10gb
check dgx-h100-mixed-shared dgx-h100 --mig-strategy mixed --config-file "$golden/sharing.yaml"
# A +me profile: resource and product names use '.' for '+' (as the device plugin).
cat >"$tmp/me.yaml" <<'YAML'
version: v1
mig-configs:
  me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb+me": 1
        "1g.10gb": 2
YAML
MIGKIT_SIM_STATE=$tmp/hgx-h200.json "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$tmp/me.yaml" -c me >/dev/null \
  || fail "apply me"
MIGKIT_SIM_STATE=$tmp/hgx-h200.json "$MIGKIT_BIN" --simulate dgx-h100 labels --no-timestamp \
  --machine-type-file "$tmp/product_name" --mig-strategy mixed >"$tmp/me.txt" || fail "labels with +me"
grep -q '^nvidia.com/mig-1g.10gb.me.count=8$' "$tmp/me.txt" || fail "+me resource: $(grep me "$tmp/me.txt")"
grep -q '^nvidia.com/mig-1g.10gb.me.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me$' "$tmp/me.txt" \
  || fail "+me product: $(grep 'me.product' "$tmp/me.txt")"
! grep -q '+' "$tmp/me.txt" || fail "a '+' in the labels: $(grep + "$tmp/me.txt")"
check mixed-a100-none mixed-a100
check t4-none t4
[ "${MIGKIT_UPDATE_GOLDEN:-}" = 1 ] && exit 0

# The strategy: flag over environment over config file.
labels dgx-a100 >"$tmp/default.txt"
MIG_STRATEGY=mixed labels dgx-a100 >"$tmp/env.txt"
diff -q "$golden/dgx-a100-mixed.txt" "$tmp/env.txt" >/dev/null || fail "MIG_STRATEGY=mixed not honoured"
GFD_MIG_STRATEGY=mixed MIG_STRATEGY=single labels dgx-a100 >"$tmp/env2.txt"
diff -q "$golden/dgx-a100-mixed.txt" "$tmp/env2.txt" >/dev/null || fail "GFD_MIG_STRATEGY does not win"
printf 'version: v1\nflags:\n  migStrategy: mixed\n' >"$tmp/mixed.yaml"
CONFIG_FILE=$tmp/mixed.yaml labels dgx-a100 >"$tmp/cfg.txt"
diff -q "$golden/dgx-a100-mixed.txt" "$tmp/cfg.txt" >/dev/null || fail "CONFIG_FILE migStrategy not honoured"
labels dgx-a100 --config-file "$tmp/mixed.yaml" --mig-strategy none >"$tmp/flag.txt"
diff -q "$tmp/default.txt" "$tmp/flag.txt" >/dev/null || fail "--mig-strategy does not override the config file"
MIG_STRATEGY=none labels dgx-a100 --config-file "$tmp/mixed.yaml" >"$tmp/flag2.txt"
diff -q "$tmp/default.txt" "$tmp/flag2.txt" >/dev/null || fail "MIG_STRATEGY does not override the config file"

# JSON: the same labels as an object.
labels dgx-a100 --mig-strategy mixed -o json >"$tmp/labels.json"
python3 - "$tmp/labels.json" "$golden/dgx-a100-mixed.txt" <<'PY' || fail "JSON output differs from the text output"
import json, sys
got = json.load(open(sys.argv[1]))
want = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]))
sys.exit(0 if got == want else 1)
PY

# The timestamp: present unless --no-timestamp or GFD_NO_TIMESTAMP=true.
MIGKIT_SIM_STATE=$tmp/t4.json "$MIGKIT_BIN" --simulate t4 labels >"$tmp/ts.txt"
grep -Eq '^nvidia.com/gfd.timestamp=[0-9]{10,}$' "$tmp/ts.txt" || fail "no timestamp: $(cat "$tmp/ts.txt")"
grep -q '^nvidia.com/gpu.machine=' "$tmp/ts.txt" || fail "no gpu.machine label by default"
GFD_NO_TIMESTAMP=true MIGKIT_SIM_STATE=$tmp/t4.json "$MIGKIT_BIN" --simulate t4 labels >"$tmp/nots.txt"
! grep -q gfd.timestamp "$tmp/nots.txt" || fail "GFD_NO_TIMESTAMP=true ignored"
# An unreadable machine-type file gives "unknown", as GFD.
labels t4 --machine-type-file /nonexistent >"$tmp/unk.txt"
grep -qx 'nvidia.com/gpu.machine=unknown' "$tmp/unk.txt" || fail "unreadable machine type: $(cat "$tmp/unk.txt")"

# Errors: usage 2, failures 1 with file:line:column.
set +e
labels t4 --mig-strategy double >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "bad strategy: exit $rc"
grep -q "unknown MIG strategy 'double'" "$tmp/err" || fail "bad strategy message: $(cat "$tmp/err")"
labels t4 -o yaml >/dev/null 2>&1; rc=$?
[ "$rc" -eq 2 ] || fail "bad -o: exit $rc"
printf 'version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n' >"$tmp/bad.yaml"
labels t4 --config-file "$tmp/bad.yaml" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "bad config: exit $rc"
grep -q "bad.yaml:5:29: replicas must be at least 2" "$tmp/err" || fail "bad config message: $(cat "$tmp/err")"
labels t4 --config-file "$tmp/missing.yaml" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "missing config: exit $rc"
set -e

# Issue 16: the cases where upstream GFD (v0.16.2) answered otherwise, on
# simulated machines, with upstream's answers.
want() { # want FILE KEY=VALUE...
  local f=$1; shift
  for kv in "$@"; do grep -qx -- "$kv" "$f" || fail "want '$kv' in $f: $(grep -- "${kv%%=*}=" "$f" || echo none)"; done
}
# 1: strategy none, every GPU MIG-enabled: gpu.replicas=0.
want "$golden/dgx-a100-none-mig.txt" nvidia.com/gpu.replicas=0 nvidia.com/gpu.sharing-strategy=none
# 2: two 1c.3g.20gb per GPU under mixed: labelled by the CI profile, count 16.
apply dgx-a100 all-1c.3g.20gb
labels dgx-a100 --mig-strategy mixed >"$tmp/c2.txt" || fail "mixed with 1c.3g.20gb failed"
want "$tmp/c2.txt" nvidia.com/mig-1c.3g.20gb.count=16 nvidia.com/mig-1c.3g.20gb.slices.ci=1 \
  nvidia.com/mig-1c.3g.20gb.slices.gi=3 nvidia.com/mig-1c.3g.20gb.product=NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb
# 3: A100 40GB and 80GB, 1g.10gb on both: the node's 44 under mixed; single: MIG-INVALID (upstream's plugin).
cat >"$tmp/two.yaml" <<'YAML'
version: v1
mig-configs:
  one10:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 4}
    - devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
YAML
MIGKIT_SIM_STATE=$tmp/mixed-a100.json "$MIGKIT_BIN" -q --simulate mixed-a100 apply -f "$tmp/two.yaml" -c one10 \
  >/dev/null || fail "apply one10"
labels mixed-a100 --mig-strategy mixed >"$tmp/c3.txt" || fail "mixed on two models failed"
want "$tmp/c3.txt" nvidia.com/mig-1g.10gb.count=44 nvidia.com/mig-1g.10gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.10gb
labels mixed-a100 --mig-strategy single >"$tmp/c3s.txt" || fail "single on two models failed"
want "$tmp/c3s.txt" nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID nvidia.com/gpu.count=0
# 4: gpu.mode from the PCI class of the simulated host tree (3D controllers), no vGPU.
want "$tmp/c3.txt" nvidia.com/gpu.mode=compute nvidia.com/vgpu.present=false
MIGKIT_SYSFS_ROOT=$tmp/nosys labels t4 >"$tmp/c4.txt"
want "$tmp/c4.txt" nvidia.com/gpu.mode=unknown
! grep -q vgpu.present "$tmp/c4.txt" || fail "vgpu.present without a readable sysfs"
echo "test-labels: all passed"
