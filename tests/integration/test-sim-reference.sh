#!/usr/bin/env bash
# The simulator against the reference tables, through the raw NVML ABI only
# (prog-raw-nvml declares NVML itself and includes nothing of ours):
#  - A100-40GB and H100-80GB GPU-instance profiles: enum, driver id, slices,
#    max count, memory, SMs, engines and placements
#    (MIG user guide, supported profiles; k8s-test-infra profiles/mig, placements MIG user guide, placements), and the
#    compute-instance placements inside each GI (MIG user guide, placements);
#  - creations that hardware refuses, with the NVML error hardware returns
#    (NVML API reference, nvmlDeviceCreateGpuInstance*, nvmlGpuInstanceDestroy);
#  - the driver's own placement choice, and a full GI+CI round trip.
# A '-' in an expected table means "not recorded in the reference": not checked.
set -euo pipefail
: "${MIGKIT_TEST_PROG_RAW_NVML:?}" "${MIGKIT_NVML_LIB:?}" "${MIGKIT_SIM_SMI:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sim-reference.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export MIGKIT_NVML_LIB
unset MIGKIT_SIM_STATE MIGKIT_SIM_MACHINE

# Failures are counted in a file: checks also run in subshells.
fail() { echo "FAIL: $*" >&2; echo x >>"$tmp/failures"; }
die() { echo "FAIL: $*" >&2; exit 1; }
raw() { "$MIGKIT_TEST_PROG_RAW_NVML" "$@"; }

# A fresh simulated machine in its own state file.
machine() {
  export MIGKIT_SIM_MACHINE=$1
  export MIGKIT_SIM_STATE=$tmp/$1.json
  rm -f "$MIGKIT_SIM_STATE"
}

# ok ARGS...: the raw program must succeed; its stdout is printed.
ok() {
  local out rc=0
  out=$(raw "$@" 2>"$tmp/stderr") || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "'$*' exited $rc: $(cat "$tmp/stderr")"
    return 1
  fi
  printf '%s\n' "$out"
}

# refused NAME CODE ARGS...: the raw program must fail with that NVML error.
refused() {
  local name=$1 code=$2 rc=0
  shift 2
  raw "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  if [ "$rc" -ne 3 ]; then
    fail "'$*' should fail with $name ($code), exited $rc: $(cat "$tmp/stdout" "$tmp/stderr")"
  elif ! grep -q "^error: $name ($code)" "$tmp/stderr"; then
    fail "'$*' should fail with $name ($code): $(cat "$tmp/stderr")"
  fi
}

# field NAME LINE: the value of NAME=value in a prog-raw-nvml line.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }

# The GI profile table in the expected tables' columns, from `profiles GPU`.
gi_table() {
  local line
  raw profiles "$1" | while IFS= read -r line; do
    case $line in gi\ *) ;; *) continue ;; esac
    printf '%s %s %s %s %s %s %s %s %s %s %s\n' \
      "$(field enum "$line")" "$(field id "$line")" "$(field slices "$line")" "$(field count "$line")" \
      "$(field mem "$line")" "$(field sm "$line")" "$(field dec "$line")" "$(field jpeg "$line")" \
      "$(field ofa "$line")" "$(field ce "$line")" "$(field placements "$line")"
  done
}

# CI placements per GI profile, from `profiles GPU --ci`.
ci_table() {
  local line
  raw profiles "$1" --ci | while IFS= read -r line; do
    case $line in *' ci '*|'ci '*) ;; *) continue ;; esac
    printf '%s %s %s %s\n' "$(field gi_enum "$line")" "$(field slices "$line")" "$(field count "$line")" \
      "$(field placements "$line")"
  done
}

# compare WHAT EXPECTED ACTUAL: diff after blanking the actual columns the
# expected table leaves as '-'. Rows are matched by position, so a missing or
# extra profile shows up in the diff.
compare() {
  local what=$1 expected=$2 actual=$3
  awk 'NR == FNR { for (i = 1; i <= NF; i++) mask[FNR, i] = ($i == "-"); next }
       { for (i = 1; i <= NF; i++) if (mask[FNR, i]) $i = "-"; print }' "$expected" "$actual" >"$actual.masked"
  if ! diff -u "$expected" "$actual.masked" >"$tmp/diff"; then
    fail "$what differs from the reference (- expected, + simulator):"
    cat "$tmp/diff" >&2
  fi
}

enable_mig() {
  local gpu=$1 out
  out=$(ok set-mig "$gpu" 1) || return 1
  case $out in
    *current=1*) ;;
    *) # Ampere: the new mode applies at the next GPU reset (MIG user guide, placements).
       "$MIGKIT_SIM_SMI" -r -i "$gpu" >/dev/null || fail "reset of GPU $gpu to apply MIG mode failed"
       ;;
  esac
  ok list | grep -q "^gpu $gpu .* mig=1/1$" || fail "MIG mode of GPU $gpu not enabled: $(raw list)"
}

destroy_all() {
  local gpu=$1 line id
  ok gis "$gpu" | while IFS= read -r line; do
    id=$(field id "$line")
    raw cis "$gpu" "$id" | while IFS= read -r c; do
      ok destroy-ci "$gpu" "$id" "$(field id "$c")" >/dev/null
    done
    ok destroy "$gpu" "$id" >/dev/null
  done
  [ -z "$(raw gis "$gpu")" ] || fail "GPU $gpu still has GPU instances: $(raw gis "$gpu")"
}

placement_of() { field placement "$1"; }

#
# A100-SXM4-40GB (MIG user guide, supported profiles; k8s-test-infra profiles/mig)
#
machine a100-40gb

ok list | grep -q "^gpu 0 name='NVIDIA A100-SXM4-40GB' .*pci_device_id=0x20B010DE .* mig=0/0$" \
  || fail "a100-40gb list: $(raw list)"

# Creating an instance with MIG disabled: NOT_SUPPORTED (nvmlDeviceCreateGpuInstance:
# "If device doesn't have MIG mode enabled").
refused NVML_ERROR_NOT_SUPPORTED 3 create-auto 0 19
refused NVML_ERROR_NOT_SUPPORTED 3 create 0 19 0

enable_mig 0

# enum id slices count memory(MB) SMs DEC JPEG OFA CE placements
cat >"$tmp/a100.expected" <<'EOF'
0 19 1 7 4864 14 0 - - - 0:1,1:1,2:1,3:1,4:1,5:1,6:1
1 14 2 3 9856 28 1 - - 2 0:2,2:2,4:2
2 9 3 2 19968 42 2 - - 3 0:4,4:4
3 5 4 1 19968 56 2 - - 4 0:4
4 0 7 1 40192 98 5 1 1 7 0:8
7 20 1 1 4864 - 1 1 1 - 0:1,1:1,2:1,3:1,4:1,5:1,6:1
9 15 1 4 9856 - 1 - - - 0:2,2:2,4:2,6:2
EOF
gi_table 0 >"$tmp/a100.actual"
compare "A100-40GB GI profiles" "$tmp/a100.expected" "$tmp/a100.actual"

# GI enum, CI slices, CI count, CI placements in compute slices (MIG user guide, placements).
cat >"$tmp/a100-ci.expected" <<'EOF'
0 1 1 0:1
1 1 2 0:1,1:1
1 2 1 0:2
2 1 3 0:1,1:1,2:1
2 2 1 0:2
2 3 1 0:3
3 1 4 0:1,1:1,2:1,3:1
3 2 2 0:2,2:2
3 4 1 0:4
4 1 7 0:1,1:1,2:1,3:1,4:1,5:1,6:1
4 2 3 0:2,2:2,4:2
4 3 2 0:3,4:3
4 4 1 0:4
4 7 1 0:7
7 1 1 0:1
9 1 1 0:1
EOF
ci_table 0 >"$tmp/a100-ci.actual"
compare "A100-40GB CI profiles" "$tmp/a100-ci.expected" "$tmp/a100-ci.actual"
[ -z "$(raw gis 0)" ] || fail "profiles --ci left GPU instances behind: $(raw gis 0)"

# Invalid starts: 1g never starts at unit 7, 3g only at 0 and 4 (MIG user guide, placements).
refused NVML_ERROR_INVALID_ARGUMENT 2 create 0 19 7
refused NVML_ERROR_INVALID_ARGUMENT 2 create 0 9 2
refused NVML_ERROR_INVALID_ARGUMENT 2 create 0 14 1
# A size that is not the profile's.
refused NVML_ERROR_INVALID_ARGUMENT 2 create 0 19 0 2
# An unknown profile id.
refused NVML_ERROR_INVALID_ARGUMENT 2 create-auto 0 99

# Overlaps: 3g at 0 holds units 0-3.
gi=$(ok create 0 9 0) && [ "$(placement_of "$gi")" = 0:4 ] || fail "3g at 0: $gi"
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 14 2
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 19 3
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 5 0
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 9 0
ok capacity 0 19 | grep -q 'count=3$' || fail "1g capacity next to a 3g at 0: $(raw capacity 0 19)"
ok capacity 0 5 | grep -q 'count=0$' || fail "4g capacity next to a 3g at 0: $(raw capacity 0 5)"
# The driver's own choice: the only free 3g placement.
gi=$(ok create-auto 0 9) && [ "$(placement_of "$gi")" = 4:4 ] || fail "second 3g: $gi"
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create-auto 0 9
destroy_all 0

# Max count: a second 7g.
ok create 0 0 0 >/dev/null
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create-auto 0 0
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create-auto 0 19
destroy_all 0

# Seven 1g.5gb fill units 0-6; the eighth has no room.
for i in 1 2 3 4 5 6 7; do ok create-auto 0 19 >>"$tmp/1g"; done
got=$(while IFS= read -r l; do placement_of "$l"; done <"$tmp/1g" | sort | tr '\n' ' ')
[ "$got" = "0:1 1:1 2:1 3:1 4:1 5:1 6:1 " ] || fail "seven 1g.5gb placements: $got"
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create-auto 0 19
destroy_all 0

# Only one +me GI per GPU.
ok create-auto 0 20 >/dev/null
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create-auto 0 20
destroy_all 0

# The A100-40GB trap (MIG user guide, placements): 4 x 1g.10gb use 8 memory units, 4 compute slices;
# a 1g.5gb then has compute but no memory.
: >"$tmp/1g10"
for i in 1 2 3 4; do ok create-auto 0 15 >>"$tmp/1g10"; done
got=$(while IFS= read -r l; do placement_of "$l"; done <"$tmp/1g10" | sort | tr '\n' ' ')
[ "$got" = "0:2 2:2 4:2 6:2 " ] || fail "four 1g.10gb placements: $got"
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create-auto 0 19
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 19 1
ok capacity 0 19 | grep -q 'count=0$' || fail "1g.5gb capacity after 4 x 1g.10gb: $(raw capacity 0 19)"
destroy_all 0

# The driver's choice around a 1g at 0: 3g goes to 4, 2g to 2.
ok create 0 19 0 >/dev/null
gi=$(ok create-auto 0 9) && [ "$(placement_of "$gi")" = 4:4 ] || fail "3g next to a 1g at 0: $gi"
gi=$(ok create-auto 0 14) && [ "$(placement_of "$gi")" = 2:2 ] || fail "2g next to 1g at 0 and 3g at 4: $gi"
destroy_all 0

# The driver's placement choice, as the MIG user guide shows it on an
# A100-40GB ("Instance Geometry", examples 1-3: `nvidia-smi mig -cgi` creates
# GIs in order with nvmlDeviceCreateGpuInstance, then `mig -lgi` shows where
# they went).
auto_sequence() {
  local what=$1 expected=$2 got="" out
  shift 2
  for p in "$@"; do
    out=$(ok create-auto 0 "$p") || { got="$got ERROR"; continue; }
    got="$got $(placement_of "$out")"
  done
  [ "$got" = " $expected" ] || fail "driver placements for $what: got${got}, hardware: $expected"
  destroy_all 0
}
auto_sequence "-cgi 19,14,5 (example 1)" "6:1 4:2 0:4" 19 14 5
auto_sequence "-cgi 9,19,14,19 (example 2)" "4:4 0:1 2:2 1:1" 9 19 14 19
auto_sequence "-cgi 14,19,19,19,19,19 (example 3)" "4:2 6:1 0:1 1:1 2:1 3:1" 14 19 19 19 19 19

# A GI that holds a CI refuses destruction (nvmlGpuInstanceDestroy: IN_USE
# "if ... compute instances are active on the GPU instance").
gi=$(ok create 0 14 0) && id=$(field id "$gi")
ci=$(ok create-ci 0 "$id" 1) || true
[ "$(field profile "$ci")" = 1 ] || fail "full CI of a 2g: $ci"
refused NVML_ERROR_IN_USE 19 destroy 0 "$id"
ok destroy-ci 0 "$id" "$(field id "$ci")" >/dev/null
ok destroy 0 "$id" >/dev/null
refused NVML_ERROR_NOT_FOUND 6 destroy 0 "$id"

# The round trip: GI + CI, the MIG device UUID, destroy both.
out=$(ok roundtrip 0) || true
grep -q '^OK$' <<<"$out" || fail "a100-40gb roundtrip: $out"
grep -q 'uuid=MIG-' <<<"$out" || fail "a100-40gb roundtrip UUID: $out"
[ -z "$(raw gis 0)" ] || fail "roundtrip left GPU instances behind"

#
# H100 80GB HBM3 (MIG user guide, supported profiles; k8s-test-infra profiles/mig)
#
machine h100-80gb

ok list | grep -q "^gpu 0 name='NVIDIA H100 80GB HBM3' .*pci_device_id=0x233010DE .* mig=0/0$" \
  || fail "h100-80gb list: $(raw list)"
refused NVML_ERROR_NOT_SUPPORTED 3 create-auto 0 19

# Hopper changes MIG mode without a reset when the GPU is idle (MIG user guide, placements): the
# round trip enables it itself.
out=$(ok roundtrip 0) || true
grep -q '^OK$' <<<"$out" || fail "h100-80gb roundtrip: $out"
ok list | grep -q 'mig=1/1$' || fail "h100-80gb MIG mode after the round trip: $(raw list)"

# 9.75 GiB = 9984 MiB, 19.62 GiB ~ 20096 MiB (19.625), 39.50 GiB = 40448 MiB,
# 79.25 GiB = 81152 MiB.
cat >"$tmp/h100.expected" <<'EOF'
0 19 1 7 9984 16 1 1 - 1 0:1,1:1,2:1,3:1,4:1,5:1,6:1
1 14 2 3 20096 32 2 2 - 2 0:2,2:2,4:2
2 9 3 2 40448 60 3 3 - 3 0:4,4:4
3 5 4 1 40448 64 4 4 - 4 0:4
4 0 7 1 81152 132 7 7 1 8 0:8
7 20 1 1 - - 1 1 1 1 0:1,1:1,2:1,3:1,4:1,5:1,6:1
9 15 1 4 20096 26 - - - - 0:2,2:2,4:2,6:2
EOF
gi_table 0 >"$tmp/h100.actual"
compare "H100-80GB GI profiles" "$tmp/h100.expected" "$tmp/h100.actual"

# Same geometry as the A100: the same CI placements (MIG user guide, placements).
ci_table 0 >"$tmp/h100-ci.actual"
compare "H100-80GB CI profiles" "$tmp/a100-ci.expected" "$tmp/h100-ci.actual"

refused NVML_ERROR_INVALID_ARGUMENT 2 create 0 15 1
ok create 0 15 6 >/dev/null
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 19 6
refused NVML_ERROR_INSUFFICIENT_RESOURCES 23 create 0 0 0
destroy_all 0

[ ! -s "$tmp/failures" ] || die "$(wc -l <"$tmp/failures") check(s) failed"
echo "test-sim-reference: all checks passed"
