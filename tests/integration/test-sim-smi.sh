#!/usr/bin/env bash
# The nvidia-smi stand-in (sim/smi) on a simulated A100-SXM4-40GB, compared
# with the real tool's output as quoted upstream:
#   mig -lgip / -lgipp: NVIDIA MIG user guide, A100-40GB (driver 5xx);
#   -L: NVIDIA/go-dcgm#30, DataDog/datadog-agent#33120;
#   mig -lgi / -lci: NVIDIA/DCGM#138, MIG user guide;
#   -r: NVIDIA/gpu-operator#118, NVIDIA/NVSentinel#1690 (exit 255 when in use);
#   -mig: MIG user guide ("Warning: MIG mode is in pending enable state ...").
# Instances are made with the raw NVML client, so nvidia-smi is checked
# against what NVML reports, not against itself.
set -euo pipefail
: "${MIGKIT_SIM_SMI:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_TEST_PROG_RAW_NVML:?}" "${MIGKIT_NVML_LIB:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sim-smi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export MIGKIT_NVML_LIB
export MIGKIT_SIM_MACHINE=a100-40gb MIGKIT_SIM_STATE=$tmp/state.json

fail() { echo "FAIL: $*" >&2; echo x >>"$tmp/failures"; }
raw() { "$MIGKIT_TEST_PROG_RAW_NVML" "$@"; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }

# smi EXPECTED_RC ARGS...: runs the stand-in, output (stdout and stderr) in $tmp/out.
smi() {
  local want=$1 rc=0
  shift
  "$MIGKIT_SIM_SMI" "$@" >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || fail "nvidia-smi $* exited $rc, expected $want: $(cat "$tmp/out")"
}

# same WHAT EXPECTED_FILE: $tmp/out must equal the file byte for byte.
same() {
  if ! diff -u "$2" "$tmp/out" >"$tmp/diff"; then
    fail "$1 differs from the real tool's output (- real, + stand-in):"
    cat "$tmp/diff" >&2
  fi
}

gpu_line=$(raw list)
bus=$(field bus_id "$gpu_line")
uuid=$(field uuid "$gpu_line")
[ -n "$bus" ] && [ -n "$uuid" ] || fail "raw list: $gpu_line"

# --- MIG disabled (a fresh A100) -------------------------------------------
smi 0 -L
printf 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: %s)\n' "$uuid" >"$tmp/expected"
same "-L" "$tmp/expected"

smi 6 mig -lgip
echo "No MIG-enabled devices found." >"$tmp/expected"
same "mig -lgip with MIG disabled" "$tmp/expected"
smi 6 mig -lgipp
same "mig -lgipp with MIG disabled" "$tmp/expected"
smi 6 mig -lgi
same "mig -lgi with MIG disabled" "$tmp/expected"

# Enabling MIG on Ampere is pending until a GPU reset.
# nvmlDeviceSetMigMode resets the GPU itself where it can; otherwise the mode
# stays pending (MIG user guide: "Warning: MIG mode is in pending enable state").
smi 0 -i 0 -mig 1
grep -Eq "^(Enabled MIG Mode for GPU $bus|Warning: MIG mode is in pending enable state for GPU $bus:.*)$" "$tmp/out" \
  || fail "-mig 1: $(cat "$tmp/out")"
[ "$(tail -n 1 "$tmp/out")" = "All done." ] || fail "-mig 1 does not end with 'All done.': $(cat "$tmp/out")"

# --- reset ----------------------------------------------------------------
smi 0 -r -i 0
echo "GPU $bus was successfully reset." >"$tmp/expected"
same "-r -i 0" "$tmp/expected"
raw list | grep -q 'mig=1/1$' || fail "reset did not apply the pending MIG mode: $(raw list)"
# By UUID and by PCI bus id, short form included; --gpu-reset and --id=.
smi 0 -r -i "$uuid"
same "-r -i UUID" "$tmp/expected"
smi 0 --gpu-reset --id="$bus"
same "--gpu-reset --id=BUSID" "$tmp/expected"
smi 0 -r -i "${bus#00000000:}"
same "-r -i BUS:DEV.FN" "$tmp/expected"

smi 6 -r -i 5
echo "No devices were found" >"$tmp/expected"
same "-r -i 5 (no such GPU)" "$tmp/expected"

# A GPU with a process on it is not reset: exit 255 and the real message.
"$MIGKIT_SIM_BIN" process add --gpu 0 >"$tmp/pid" 2>&1 || fail "migkit-sim process add: $(cat "$tmp/pid")"
pid=$(grep -o '[0-9][0-9]*' "$tmp/pid" | tail -n 1)
ok_gi=$(raw create 0 19 0) || fail "create 1g at 0: $ok_gi"
smi 255 -r -i 0
cat >"$tmp/expected" <<EOF
The following GPUs could not be reset:
  GPU $bus: In use by another client

1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a monitoring application such as another instance of nvidia-smi). Please first kill all processes using this device and all compute applications running in the system.
EOF
same "-r -i 0 with a process" "$tmp/expected"
[ -n "$(raw gis 0)" ] || fail "a refused reset destroyed the GPU instances"
"$MIGKIT_SIM_BIN" process remove "$pid" >/dev/null 2>&1 || fail "migkit-sim process remove $pid"
smi 0 -r -i 0
[ -z "$(raw gis 0)" ] || fail "a reset kept the GPU instances: $(raw gis 0)"

# --- profiles ---------------------------------------------------------------
# nvidia-smi mig -lgip on an empty A100-SXM4-40GB (MIG user guide, R525+).
smi 0 mig -lgip
cat >"$tmp/expected" <<'EOF'
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.5gb+me     20     1/1        4.75       No     14     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb       15     4/4        9.62       No     14     1     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.10gb       14     3/3        9.62       No     28     1     0   |
|                                                             2     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.20gb        9     2/2        19.50      No     42     2     0   |
|                                                             3     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.20gb        5     1/1        19.50      No     56     2     0   |
|                                                             4     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.40gb        0     1/1        39.25      No     98     5     0   |
|                                                             7     1     1   |
+-----------------------------------------------------------------------------+
EOF
same "mig -lgip" "$tmp/expected"
smi 0 mig -i 0 -lgip
same "mig -i 0 -lgip" "$tmp/expected"

smi 0 mig -lgipp
cat >"$tmp/expected" <<'EOF'
GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
EOF
same "mig -lgipp" "$tmp/expected"

# --- instances ----------------------------------------------------------------
smi 6 mig -lgi
echo "No GPU instances found: Not Found" >"$tmp/expected"
same "mig -lgi without instances" "$tmp/expected"

# free_counts: "name free/total" per -lgip row of $tmp/out.
free_counts() { awk -F'|' '/MIG/ { split($2, f, " +"); print f[4], f[6] }' "$tmp/out"; }

# A 3g.20gb at 0 holds memory units 0-3 and 3 of the 7 compute slices: what
# is left is counted per profile (nvmlDeviceGetGpuInstanceRemainingCapacity).
g3=$(raw create 0 9 0) || fail "creating a 3g.20gb at 0: $g3"
id3=$(field id "$g3")
smi 0 mig -lgip
free_counts >"$tmp/free"
cat >"$tmp/expected" <<'EOF'
1g.5gb 3/7
1g.5gb+me 1/1
1g.10gb 2/4
2g.10gb 1/3
3g.20gb 1/2
4g.20gb 0/1
7g.40gb 0/1
EOF
diff -u "$tmp/expected" "$tmp/free" >&2 || fail "mig -lgip free counts next to a 3g.20gb at 0"

# Then a 2g.10gb at 4 and a 1g.5gb at 6, each GI with its full compute
# instance (CI profile ids 0, 1, 2 for 1, 2, 3 slices: the MIG user guide's
# "-cgi 9 -C" creates "MIG 3g.20gb (ID 2)").
g2=$(raw create 0 14 4) && g1=$(raw create 0 19 6) || fail "creating GIs"
id2=$(field id "$g2") id1=$(field id "$g1")
raw create-ci 0 "$id3" 2 >/dev/null && raw create-ci 0 "$id2" 1 >/dev/null && raw create-ci 0 "$id1" 0 >/dev/null \
  || fail "creating CIs"
smi 0 mig -lgip
free_counts >"$tmp/free"
sed 's| [0-9]*/| 0/|' "$tmp/expected" >"$tmp/expected.full"
diff -u "$tmp/expected.full" "$tmp/free" >&2 || fail "mig -lgip free counts with 3g+2g+1g"

smi 0 mig -lgi
printf '%s\n' \
  '+-------------------------------------------------------+' \
  '| GPU instances:                                        |' \
  '| GPU   Name             Profile  Instance   Placement  |' \
  '|                          ID       ID       Start:Size |' \
  '|=======================================================|' >"$tmp/expected"
printf '|   0  MIG 1g.5gb          19%9u          6:1     |\n' "$id1" >>"$tmp/expected"
echo '+-------------------------------------------------------+' >>"$tmp/expected"
printf '|   0  MIG 2g.10gb         14%9u          4:2     |\n' "$id2" >>"$tmp/expected"
echo '+-------------------------------------------------------+' >>"$tmp/expected"
printf '|   0  MIG 3g.20gb          9%9u          0:4     |\n' "$id3" >>"$tmp/expected"
echo '+-------------------------------------------------------+' >>"$tmp/expected"
same "mig -lgi" "$tmp/expected"

smi 0 mig -lci
printf '%s\n' \
  '+--------------------------------------------------------------------+' \
  '| Compute instances:                                                 |' \
  '| GPU     GPU       Name             Profile   Instance   Placement  |' \
  '|       Instance                       ID        ID       Start:Size |' \
  '|         ID                                                         |' \
  '|====================================================================|' >"$tmp/expected"
printf '|   0%7u       MIG 1g.5gb           0         0          0:1     |\n' "$id1" >>"$tmp/expected"
echo '+--------------------------------------------------------------------+' >>"$tmp/expected"
printf '|   0%7u       MIG 2g.10gb          1         0          0:2     |\n' "$id2" >>"$tmp/expected"
echo '+--------------------------------------------------------------------+' >>"$tmp/expected"
printf '|   0%7u       MIG 3g.20gb          2         0          0:3     |\n' "$id3" >>"$tmp/expected"
echo '+--------------------------------------------------------------------+' >>"$tmp/expected"
same "mig -lci" "$tmp/expected"

# -L lists the MIG devices in NVML's index order, named by profile.
smi 0 -L
printf 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: %s)\n' "$uuid" >"$tmp/expected"
n=0
raw mig-devices 0 >"$tmp/migs"
while IFS= read -r line; do
  case $(field gi "$line") in
    "$id1") name=1g.5gb ;;
    "$id2") name=2g.10gb ;;
    "$id3") name=3g.20gb ;;
    *) fail "unexpected MIG device: $line"; continue ;;
  esac
  printf '  MIG %-11s Device %2u: (UUID: %s)\n' "$name" "$n" "$(field uuid "$line")" >>"$tmp/expected"
  n=$((n + 1))
done <"$tmp/migs"
[ "$n" -eq 3 ] || fail "raw mig-devices found $n MIG devices, expected 3: $(cat "$tmp/migs")"
same "-L with MIG devices" "$tmp/expected"
grep -Eq '^  MIG 3g\.20gb     Device  [0-2]: \(UUID: MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\)$' \
  "$tmp/out" || fail "-L MIG line layout: $(cat "$tmp/out")"

# --- H100 80GB HBM3 ----------------------------------------------------------
# Real output of an H100 80GB HBM3 for the same commands (a public nvidia-smi
# walk-through: -mig 1, mig -lgip, -cgi 19 x7 -C, mig -lgi, mig -lci, -mig 0).
export MIGKIT_SIM_MACHINE=h100-80gb MIGKIT_SIM_STATE=$tmp/h100.json
hbus=$(field bus_id "$(raw list)")

# Hopper switches MIG mode at once when the GPU is idle.
smi 0 -i 0 -mig 1
printf 'Enabled MIG Mode for GPU %s\nAll done.\n' "$hbus" >"$tmp/expected"
same "H100 -i 0 -mig 1" "$tmp/expected"

smi 0 mig -i 0 -lgip
cat >"$tmp/expected" <<'EOF'
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.75       No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.20gb       15     4/4        19.62      No     26     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.20gb       14     3/3        19.62      No     32     2     0   |
|                                                             2     2     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.40gb        9     2/2        39.50      No     60     3     0   |
|                                                             3     3     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.40gb        5     1/1        39.50      No     64     4     0   |
|                                                             4     4     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.80gb        0     1/1        79.25      No     132    7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
EOF
same "H100 mig -i 0 -lgip" "$tmp/expected"

# `mig -cgi 19,19,19,19,19,19,19 -C`: GIs 13, 11, 12, 7, 8, 9, 10 (at 6, 4, 5,
# 0, 1, 2, 3), each with CI 0 of profile 0.
got=""
for i in 1 2 3 4 5 6 7; do
  gi=$(raw create-auto 0 19) || fail "H100 create-auto 19: $gi"
  raw create-ci 0 "$(field id "$gi")" 0 >/dev/null || fail "H100 create-ci in $gi"
  got="$got $(field id "$gi")"
done
[ "$got" = " 13 11 12 7 8 9 10" ] || fail "H100 GI ids of 7 x 1g.10gb: got$got, hardware: 13 11 12 7 8 9 10"

smi 0 mig -i 0 -lgi
{
  printf '%s\n' \
    '+-------------------------------------------------------+' \
    '| GPU instances:                                        |' \
    '| GPU   Name             Profile  Instance   Placement  |' \
    '|                          ID       ID       Start:Size |' \
    '|=======================================================|'
  for i in 0 1 2 3 4 5 6; do
    printf '|   0  MIG 1g.10gb         19%9u          %u:1     |\n' $((i + 7)) "$i"
    echo '+-------------------------------------------------------+'
  done
} >"$tmp/expected"
same "H100 mig -i 0 -lgi" "$tmp/expected"

smi 0 mig -i 0 -lci
{
  printf '%s\n' \
    '+--------------------------------------------------------------------+' \
    '| Compute instances:                                                 |' \
    '| GPU     GPU       Name             Profile   Instance   Placement  |' \
    '|       Instance                       ID        ID       Start:Size |' \
    '|         ID                                                         |' \
    '|====================================================================|'
  for i in 7 8 9 10 11 12 13; do
    printf '|   0%7u       MIG 1g.10gb          0         0          0:1     |\n' "$i"
    echo '+--------------------------------------------------------------------+'
  done
} >"$tmp/expected"
same "H100 mig -i 0 -lci" "$tmp/expected"

smi 0 -r -i 0
smi 0 -i 0 -mig 0
printf 'Disabled MIG Mode for GPU %s\nAll done.\n' "$hbus" >"$tmp/expected"
same "H100 -i 0 -mig 0" "$tmp/expected"
export MIGKIT_SIM_MACHINE=a100-40gb MIGKIT_SIM_STATE=$tmp/state.json

# --- usage errors --------------------------------------------------------------
smi 2 --frobnicate
grep -q "^ERROR: Option --frobnicate is not recognized. Please run 'nvidia-smi -h' for help.$" "$tmp/out" \
  || fail "unknown option: $(cat "$tmp/out")"
smi 2 mig -lgip -lgi
smi 0 -h
grep -q -- '--gpu-reset' "$tmp/out" || fail "-h: $(cat "$tmp/out")"

# A library that cannot initialise: the real message, exit 9 (driver not loaded).
# (An unreadable state path makes the simulator's nvmlInit fail.)
rc=0
MIGKIT_SIM_STATE=/nonexistent-dir/state.json "$MIGKIT_SIM_SMI" -L >"$tmp/out" 2>&1 || rc=$?
if [ "$rc" -ne 9 ] || ! grep -q "^NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" "$tmp/out"; then
  fail "nvmlInit failure: exit $rc: $(cat "$tmp/out")"
fi

[ ! -s "$tmp/failures" ] || { echo "FAIL: $(wc -l <"$tmp/failures") check(s) failed" >&2; exit 1; }
echo "test-sim-smi: all checks passed"
