#!/usr/bin/env bash
# migkit-sim, the simulator's driver: machines (catalog, custom lists, JSON
# files), show, processes, Xid events, faults, reset, reboot, and clear
# errors for bad input (unknown machines, corrupted state files, usage).
# NVML-level behaviour is covered by tests/unit/test-sim.c.
set -euo pipefail
: "${MIGKIT_SIM_BIN:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sim-control.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset MIGKIT_SIM_MACHINE MIGKIT_SIM_FAULTS
export MIGKIT_SIM_STATE=$tmp/state.json

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
sim() { "$MIGKIT_SIM_BIN" "$@"; }

# run WANT_RC ARGS...: runs migkit-sim; stdout in $tmp/out, stderr in $tmp/err.
run() {
  local want=$1 rc=0
  shift
  sim "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "migkit-sim $* exited $rc, expected $want: $(cat "$tmp/out" "$tmp/err")"
    return 1
  fi
}
# has FILE REGEX WHAT
has() { grep -Eq -e "$2" "$tmp/$1" || fail "$3: no '$2' in: $(cat "$tmp/$1")"; }
hasnt() { ! grep -Eq -e "$2" "$tmp/$1" || fail "$3: unexpected '$2' in: $(cat "$tmp/$1")"; }
# count_lines FILE REGEX: number of matching lines.
count_lines() { grep -Ec -e "$2" "$tmp/$1" || true; }

# --- help and usage errors ---------------------------------------------------
run 0 --help && has out '^Usage: migkit-sim' "--help"
run 2 || true
has err 'missing COMMAND' "no command"
run 2 frobnicate || true
has err "unknown command 'frobnicate'" "unknown command"
run 2 process add || true
has err '--gpu is required' "process add without --gpu"
run 2 process add --gpu 0 --gi 1 || true
has err '--gi and --ci go together' "--gi without --ci"
run 2 fault set nvmlDeviceGetName 0 IN_USE || true
has err 'invalid call number' "fault set N=0"
run 2 fault set nvmlDeviceGetName 1 NOT_AN_ERROR || true
has err "unknown NVML error 'NOT_AN_ERROR'" "fault set bad error"
run 2 reset || true
has err '--gpu' "reset without --gpu"

# --- machines and models ------------------------------------------------------
run 0 machines
for m in dgx-a100 dgx-h100 hgx-h200 dgx-b200 mixed-a100 a30-24gb a100-40gb a100-80gb h100-80gb \
  h200-141gb gh200-144gb b200 t4; do
  has out "^$m " "machines lists $m"
done
run 0 models
has out '^gh200-144gb +NVIDIA GH200 144G HBM3e$' "models"
has out '^t4 +Tesla T4$' "models"

# --- create and show --------------------------------------------------------------
# First use without a state file creates MIGKIT_SIM_MACHINE's (default dgx-a100).
run 0 show
has out '^Machine: dgx-a100 ' "default machine"
[ "$(count_lines out '^GPU [0-9]: NVIDIA A100-SXM4-40GB')" -eq 8 ] || fail "dgx-a100 has 8 GPUs: $(cat "$tmp/out")"
has out 'Bus 00000000:BD:00\.0' "8th GPU bus id"
run 1 create dgx-h100 || true
has err 'exists already \(use --force' "create over an existing state"
run 0 create dgx-h100 --force
has out "^Created machine 'dgx-h100' with 8 GPU\(s\)" "create dgx-h100"
run 0 show
[ "$(count_lines out '^GPU [0-9]: NVIDIA H100 80GB HBM3 ')" -eq 8 ] || fail "dgx-h100 GPUs: $(cat "$tmp/out")"

run 0 --state "$tmp/other.json" create mixed-a100
run 0 --state "$tmp/other.json" show
[ "$(count_lines out 'NVIDIA A100-SXM4-80GB')" -eq 4 ] || fail "mixed-a100: $(cat "$tmp/out")"
[ -f "$tmp/other.json" ] || fail "--state FILE was not used"

# Custom machines: a list with counts; GPU identities are stable per machine.
run 0 create 'a100-40gb*2,h100-80gb,t4' --force
run 0 show --json
cp "$tmp/out" "$tmp/custom1.json"
run 0 show
has out '^GPU 2: NVIDIA H100 80GB HBM3 ' "custom machine GPU 2"
has out '^GPU 3: Tesla T4 ' "custom machine GPU 3"
has out 'MIG not supported' "T4 has no MIG"
run 0 create 'a100-40gb*2,h100-80gb,t4' --force
run 0 show --json
diff -q "$tmp/out" "$tmp/custom1.json" >/dev/null || fail "re-created machine has other identities"

# A machine file.
printf '{"gpus": ["b200", "gh200-144gb*2"]}\n' >"$tmp/machine.json"
run 0 create "$tmp/machine.json" --force
run 0 show
has out '^GPU 0: NVIDIA B200 ' "machine file GPU 0"
has out '^GPU 2: NVIDIA GH200 144G HBM3e ' "machine file GPU 2"

# Unknown machines and models: one clear line, exit 1, state untouched.
run 1 create dgx-z9000 --force || true
has err "^migkit-sim: unknown machine 'dgx-z9000' \(known: dgx-a100, " "unknown machine"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "unknown machine: more than one line: $(cat "$tmp/err")"
run 1 create 'a100-40gb*2,a200' --force || true
has err "unknown GPU model 'a200' \(known: a30-24gb, " "unknown model"
run 1 create 'a100-40gb*0' --force || true
has err "invalid GPU count" "count 0"
run 1 create 'a100-40gb*65' --force || true
has err "invalid GPU count" "count too large"
printf '{"gpus": 3}\n' >"$tmp/bad-machine.json"
run 1 create "$tmp/bad-machine.json" --force || true
has err "machine file" "bad machine file"
run 0 show
has out '^GPU 0: NVIDIA B200 ' "failed creates keep the machine"

# --- processes ------------------------------------------------------------------
run 0 create a100-40gb --force
# A process killed between its temporary state file and the rename (SIGKILL)
# left one: the next writer removes it under the state lock; a file that is
# not of that exact form stays.
printf 'half' >"$MIGKIT_SIM_STATE.tmp.Ab12Cd"
printf 'keep' >"$MIGKIT_SIM_STATE.tmp.old-copy"
run 0 process add --gpu 0 --memory 2048
[ "$(cat "$tmp/out")" = 100000 ] || fail "first fake pid: $(cat "$tmp/out")"
run 0 process add --gpu 0 --pid 4242
[ "$(cat "$tmp/out")" = 4242 ] || fail "given pid: $(cat "$tmp/out")"
run 0 process add --gpu 0
[ "$(cat "$tmp/out")" = 100001 ] || fail "second fake pid: $(cat "$tmp/out")"
run 1 process add --gpu 0 --pid 4242 || true
has err 'process 4242 exists already' "duplicate pid"
run 1 process add --gpu 3 || true
has err 'no GPU 3' "process on a missing GPU"
run 1 process add --gpu 0 --gi 1 --ci 0 || true
has err 'no compute instance 0 in GPU instance 1' "process on a missing MIG device"
run 0 show
has out 'pid 100000 +2048 MiB +whole GPU' "show lists processes"
[ ! -e "$MIGKIT_SIM_STATE.tmp.Ab12Cd" ] || fail "a stale temporary state file stayed after a save"
[ -e "$MIGKIT_SIM_STATE.tmp.old-copy" ] || fail "a file not named as our temporary files was removed"

# --- reset and reboot -----------------------------------------------------------------
run 1 reset --gpu 0 || true
has err 'GPU 0 is in use by 3 process' "reset of a busy GPU"
run 0 process remove --pid 4242
run 0 process remove 100000
run 1 process remove 100000 || true
has err 'no process 100000' "removing a missing process"
run 0 reboot
run 0 show
hasnt out 'Processes:' "reboot ends processes"
run 0 reset --gpu 0
has out '^GPU 0 reset$' "reset"
run 1 reset --gpu 0,1 || true
has err 'no GPU 1' "reset of a missing GPU"
has out '^GPU 0 reset$' "reset goes on with the other GPUs"

# --- Xid events and faults -------------------------------------------------------------
run 0 xid --gpu 0 79
run 0 xid --gpu 0 48
run 0 show
has out '^Events queued: 2 ' "events queued"
run 1 xid --gpu 0 --gi 1 --ci 0 79 || true
has err 'no compute instance' "Xid on a missing MIG device"
run 0 fault set nvmlDeviceCreateGpuInstance 2 INSUFFICIENT_RESOURCES
run 0 fault set nvmlDeviceGetCount_v2 1 NVML_ERROR_IN_USE
run 0 fault set nvmlDeviceSetMigMode 3 19
run 0 fault crash-after 4
run 0 show
has out 'call 2 from now of nvmlDeviceCreateGpuInstance fails with NVML_ERROR_INSUFFICIENT_RESOURCES' "fault shown"
has out 'nvmlDeviceSetMigMode fails with NVML_ERROR_IN_USE' "numeric error"
has out 'exit\(137\) after 4 more' "crash-after shown"
run 1 fault set nvmlNoSuchThing 1 IN_USE || true
has err "unknown NVML function 'nvmlNoSuchThing'" "unknown function"
run 0 fault clear
run 0 show
hasnt out '^Fault' "fault clear"

# --- corrupted state files ---------------------------------------------------------------
echo '{"format": 1, "machine": "x", "gpus": [' >"$MIGKIT_SIM_STATE"
run 1 show || true
has err "^migkit-sim: state file '$MIGKIT_SIM_STATE' is corrupted" "corrupted state"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "corrupted state: more than one line: $(cat "$tmp/err")"
# Valid JSON, impossible content.
sed 's/"mig_current": 0/"mig_current": 7/' "$tmp/custom1.json" >"$MIGKIT_SIM_STATE"
run 1 show || true
has err "corrupted: gpus\[0\]: 'mig_current' must be an integer 0\.\.1" "bad field"
head -c 5000000 /dev/zero | tr '\0' ' ' >"$MIGKIT_SIM_STATE"
run 1 show || true
has err 'larger than' "oversized state"
run 1 create a100-40gb || true
run 0 create a100-40gb --force
run 0 show
has out '^GPU 0: NVIDIA A100-SXM4-40GB' "--force replaces a corrupted state"

[ "$failures" -eq 0 ] || { echo "test-sim-control: $failures check(s) failed" >&2; exit 1; }
echo "test-sim-control: all checks passed"
