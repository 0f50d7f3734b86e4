#!/usr/bin/env bash
# migkit apply / assert / plan through the real binary on the simulator:
# configs and hooks as users have them, idempotence, minimal change, refusal
# before touching anything, resets only where needed, crash at every step.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-apply.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY MIG_PARTED_OUTPUT_FORMAT MIG_PARTED_CONFIG_LABEL
mk() { "$MIGKIT_BIN" -q --simulate dgx-a100 "$@"; }
# apply -o json prints one event per line; the last is "done", with the totals.
json_get() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(eval(sys.argv[1], {}, {"d": d}))' "$1"; }

cat >"$tmp/config.yaml" <<'YAML'
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  all-balanced:
    - device-filter: ["0x20B010DE", "0x20B110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  custom:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
    - devices: [4, 5]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [6]
      mig-enabled: false
    - devices: [7]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3c.3g.20gb": 1
  # custom's GPUs 0, 4, 6 and 7 on a 4-GPU machine (the crash test's): from
  # all-balanced, one GPU of each kind of change custom makes, and one kept.
  custom-4:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
    - devices: [1]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [2]
      mig-enabled: false
    - devices: [3]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3c.3g.20gb": 1
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
  shared:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1c.3g.20gb": 1
        "2c.3g.20gb": 1
        "4g.20gb": 1
  impossible:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 1
    - devices: [1]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4
        "1g.5gb": 3
  unknown-profile:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 1
  out-of-range:
    - devices: [0, 8]
      mig-enabled: false
YAML
cfg=$tmp/config.yaml
export MIGKIT_SIM_STATE=$tmp/state.json

# Usage and selection errors.
set +e
mk apply >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "apply without -f: exit $rc"
grep -q "missing required flags 'config-file'" "$tmp/err" || fail "missing -f message: $(cat "$tmp/err")"
set +e
mk apply -f "$cfg" >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "apply without -c: exit $rc (a usage error, as a missing -f)"
grep -q "missing required flag 'selected-config' when more than one config available" "$tmp/err" \
  || fail "no -c: $(cat "$tmp/err")"
set +e
mk apply -f "$cfg" -c nope >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "selected mig-config not present: nope" "$tmp/err" || fail "unknown -c: $(cat "$tmp/err")"

# Targets that cannot be built are refused before anything is touched.
before=$(cat "$MIGKIT_SIM_STATE" 2>/dev/null || true)
mk export >"$tmp/before.yaml"
for c in impossible unknown-profile; do
  set +e
  mk apply -f "$cfg" -c "$c" >/dev/null 2>"$tmp/err"; rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "apply $c: exit $rc"
  mk export | diff -u "$tmp/before.yaml" - || fail "apply $c touched the GPUs"
done
{ mk apply -f "$cfg" -c impossible 2>&1 || true; } | grep -q "GPU 1 (NVIDIA A100-SXM4-40GB): layout .* does not fit: needs 11 memory units" \
  || fail "impossible: GPU not named"
{ mk apply -f "$cfg" -c unknown-profile 2>&1 || true; } | grep -q "profile '1g.6gb' does not exist on this GPU" \
  || fail "unknown profile not named"
set +e
mk apply -f "$cfg" -c out-of-range >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "out-of-range: exit $rc"
grep -Eq "config.yaml:[0-9]+:[0-9]+: .*index 8 is out of range" "$tmp/err" || fail "out-of-range: $(cat "$tmp/err")"

# assert exit codes: 1 not applied, 3 could not check, 0 applied.
set +e
mk assert -f "$cfg" -c all-balanced >/dev/null 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "assert before apply: exit $rc"
mk assert -f "$cfg" -c unknown-profile >/dev/null 2>&1; rc=$?
[ "$rc" -eq 3 ] || fail "assert unknown-profile: exit $rc"
mk assert -f /nonexistent.yaml -c x >/dev/null 2>&1; rc=$?
[ "$rc" -eq 3 ] || fail "assert missing file: exit $rc"
set -e
mk assert -f "$cfg" -c all-balanced --valid-config | grep -q "Selected MIG configuration is valid"

# plan shows what apply would do and changes nothing.
mk plan -f "$cfg" -c all-balanced >"$tmp/plan.txt"
grep -q "MIG disabled -> enabled (GPU reset needed)" "$tmp/plan.txt" || fail "plan: $(cat "$tmp/plan.txt")"
# Eight identical GPUs, one plan: printed once, then the verdict.
[ "$(head -n 1 "$tmp/plan.txt")" = "GPUs 0-7 (8x NVIDIA A100-SXM4-40GB): MIG disabled -> enabled (GPU reset needed)" ] &&
  [ "$(tail -n 1 "$tmp/plan.txt")" = "apply would change 8 of 8 GPUs: MIG mode of 8 (8 resets), create 32 MIG devices." ] &&
  [ "$(wc -l <"$tmp/plan.txt")" -eq 10 ] || fail "plan not grouped: $(cat "$tmp/plan.txt")"
# assert's answer is one line, naming the GPUs that differ (no log line per GPU).
set +e; "$MIGKIT_BIN" --simulate dgx-a100 assert -f "$cfg" -c all-balanced >"$tmp/assert.txt" 2>&1; rc=$?; set -e
[ "$rc" = 1 ] && [ "$(cat "$tmp/assert.txt")" = "Assertion failure: selected configuration not currently applied (8 GPUs differ: MIG mode of GPU 0-7)" ] ||
  fail "assert: exit $rc: $(cat "$tmp/assert.txt")"
mk export | diff -u "$tmp/before.yaml" - || fail "plan touched the GPUs"

# Hooks: order, variables, own envs; the parent's HOME is not passed.
cat >"$tmp/hooks.yaml" <<YAML
version: v1
hooks:
  apply-start:
    - command: $MIGKIT_SOURCE_DIR/tests/fixtures/hook-recorder.sh
      args: ["apply-start"]
      envs:
        OWN_VAR: "mine"
        HOOK_LOG: "$tmp/hooks.log"
  pre-apply-mode:
    - command: $MIGKIT_SOURCE_DIR/tests/fixtures/hook-recorder.sh
      args: ["pre-apply-mode"]
      envs: {HOOK_LOG: "$tmp/hooks.log"}
  pre-apply-config:
    - command: $MIGKIT_SOURCE_DIR/tests/fixtures/hook-recorder.sh
      args: ["pre-apply-config"]
      envs: {HOOK_LOG: "$tmp/hooks.log"}
  apply-exit:
    - command: $MIGKIT_SOURCE_DIR/tests/fixtures/hook-recorder.sh
      args: ["apply-exit"]
      envs: {HOOK_LOG: "$tmp/hooks.log", MIG_PARTED_SELECTED_CONFIG: "overridden?"}
YAML
mk apply -f "$cfg" -c all-balanced -k "$tmp/hooks.yaml" >"$tmp/out"
grep -q "MIG configuration applied successfully" "$tmp/out" || fail "apply: $(cat "$tmp/out")"
awk '{print $1}' "$tmp/hooks.log" | tr '\n' ' ' | grep -qx 'apply-start pre-apply-mode pre-apply-config apply-exit ' \
  || fail "hook order: $(cat "$tmp/hooks.log")"
grep -q "^apply-start config=$cfg selected=all-balanced hooks=$tmp/hooks.yaml skip_reset=false mode_only=false own=mine home=unset" \
  "$tmp/hooks.log" || fail "hook variables: $(cat "$tmp/hooks.log")"
grep -q "^apply-exit .*selected=all-balanced" "$tmp/hooks.log" || fail "MIG_PARTED_* must win over envs"
mk assert -f "$cfg" -c all-balanced | grep -q "Selected MIG configuration currently applied"
mk plan -f "$cfg" -c all-balanced >"$tmp/plan.txt"
[ "$(cat "$tmp/plan.txt")" = "GPUs 0-7 (8x NVIDIA A100-SXM4-40GB): already as configured (4 MIG devices kept)
Nothing to do: 'all-balanced' is applied on all 8 GPUs." ] || fail "plan with nothing to do: $(cat "$tmp/plan.txt")"
mk export >"$tmp/balanced.yaml"
grep -q "devices: all" "$tmp/balanced.yaml" || fail "export after balanced: $(cat "$tmp/balanced.yaml")"

# Idempotent: a second apply touches nothing, runs only start/exit hooks.
: >"$tmp/hooks.log"
"$MIGKIT_BIN" --simulate dgx-a100 apply -f "$cfg" -c all-balanced -k "$tmp/hooks.yaml" -o json >"$tmp/again.json"
[ "$(json_get 'd["nothing_to_do"]' <"$tmp/again.json")" = True ] || fail "second apply did something: $(cat "$tmp/again.json")"
[ "$(json_get 'd["nvml_mutations"]' <"$tmp/again.json")" = 0 ] || fail "second apply mutated"
awk '{print $1}' "$tmp/hooks.log" | tr '\n' ' ' | grep -qx 'apply-start apply-exit ' || fail "hooks on no-op: $(cat "$tmp/hooks.log")"

# A failing apply-start hook aborts before any change and skips apply-exit.
cat >"$tmp/hooks-fail.yaml" <<YAML
version: v1
hooks:
  apply-start:
    - command: $MIGKIT_SOURCE_DIR/tests/fixtures/hook-recorder.sh
      args: ["apply-start"]
      envs: {HOOK_LOG: "$tmp/hooks.log", HOOK_FAIL: "apply-start"}
  apply-exit:
    - command: $MIGKIT_SOURCE_DIR/tests/fixtures/hook-recorder.sh
      args: ["apply-exit"]
      envs: {HOOK_LOG: "$tmp/hooks.log"}
YAML
: >"$tmp/hooks.log"
set +e
mk apply -f "$cfg" -c custom -k "$tmp/hooks-fail.yaml" >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "failing apply-start: exit $rc"
grep -q "apply-start hook .* failed with exit status 7" "$tmp/err" || fail "failing hook message: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/hooks.log")" -eq 1 ] || fail "apply-exit ran after a failed apply-start: $(cat "$tmp/hooks.log")"
mk export | diff -u "$tmp/balanced.yaml" - || fail "failed apply-start changed the GPUs"

# Minimal change: custom keeps GPU 7's balanced instances (same UUIDs), resets only GPU 6.
uuids7=$("$MIGKIT_BIN" --simulate dgx-a100 profiles -o json >/dev/null; "$MIGKIT_SIM_BIN" show --json | python3 -c '
import json,sys; s=json.load(sys.stdin)
print(sorted(ci["uuid"] for gi in s["gpus"][7]["gpu_instances"] for ci in gi["compute_instances"]))')
"$MIGKIT_BIN" --simulate dgx-a100 apply -f "$cfg" -c custom -o json >"$tmp/custom.json"
[ "$(json_get 'd["resets"]' <"$tmp/custom.json")" = 1 ] || fail "custom: resets $(cat "$tmp/custom.json")"
uuids7b=$("$MIGKIT_SIM_BIN" show --json | python3 -c '
import json,sys; s=json.load(sys.stdin)
print(sorted(ci["uuid"] for gi in s["gpus"][7]["gpu_instances"] for ci in gi["compute_instances"]))')
[ "$uuids7" = "$uuids7b" ] || fail "GPU 7 was touched: $uuids7 vs $uuids7b"
mk assert -f "$cfg" -c custom >/dev/null || fail "custom not applied"

# Shared GPU instances: 2c.3g.20gb and 1c.3g.20gb share one 3g GI, beside a 4g.
mk apply -f "$cfg" -c shared >/dev/null
mk assert -f "$cfg" -c shared >/dev/null || fail "shared not applied"
mk export -o json | python3 -c '
import json,sys; d=json.load(sys.stdin)["mig-configs"]["current"]
assert d == [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.20gb": 1, "2c.3g.20gb": 1, "1c.3g.20gb": 1}}], d'

# Crash at every mutating NVML call of a reconfiguration, then re-run: converges.
# custom-4 from all-balanced, on 4 A100s: GPU 0 changes as custom's GPUs 0-3
# (destroy 3 instances, create a 3g, keep one), GPU 1 as its GPUs 4-5 (destroy
# 2, create five 1g, keep 2), GPU 2 as its GPU 6 (instances destroyed, MIG
# disabled, reset) and GPU 3 is kept as its GPU 7: every kind of step custom
# takes from all-balanced, 31 crash points instead of 69 (custom's GPUs 1-3
# and 5 would repeat GPU 0's and GPU 4's steps). Four GPUs, not the DGX's
# eight that would not change: each of the 124 commands of the loop reads
# half the GPUs (74 ms of CPU an apply instead of 118 here).
mk4() { MIGKIT_SIM_STATE=$tmp/state-4.json "$MIGKIT_BIN" -q --simulate 'a100-40gb*4' "$@"; }
mk4 apply -f "$cfg" -c all-balanced >/dev/null
cp "$tmp/state-4.json" "$tmp/from.json"
IFS= read -r -d '' from <"$tmp/from.json" || true # the whole file, restored by printf: no cp per crash point
mk4 apply -f "$cfg" -c custom-4 -o json >"$tmp/count.json"
read -r total resets < <(json_get '"%d %d" % (d["nvml_mutations"], d["resets"])' <"$tmp/count.json")
[ "$resets" = 1 ] || fail "custom-4 from all-balanced: resets $(cat "$tmp/count.json")"
want=$(mk4 export)
[ "$total" -gt 20 ] || fail "too few mutations to test: $total"
for n in $(seq 1 "$total"); do
  printf '%s' "$from" >"$tmp/state-4.json"
  MIGKIT_SIM_STATE=$tmp/state-4.json "$MIGKIT_SIM_BIN" fault crash-after "$n" >/dev/null
  set +e
  mk4 apply -f "$cfg" -c custom-4 >/dev/null 2>&1; rc=$?
  set -e
  # 137: the simulator's crash, which disarmed it (saved before its _exit).
  if [ "$rc" -ne 137 ]; then
    [ "$n" -eq "$total" ] || fail "crash-after $n: apply did not die (exit $rc)"
    MIGKIT_SIM_STATE=$tmp/state-4.json "$MIGKIT_SIM_BIN" fault clear >/dev/null
  fi
  mk4 apply -f "$cfg" -c custom-4 >/dev/null 2>"$tmp/err" || fail "re-run after crash at $n: $(cat "$tmp/err")"
  mk4 assert -f "$cfg" -c custom-4 >/dev/null || fail "not converged after crash at $n"
  [ "$(mk4 export)" = "$want" ] || fail "layout differs after crash at $n"
done
echo "crash test: $total crash points, all converged"

# An NVML error in the middle: named, non-zero exit, a re-run repairs it.
cp "$tmp/from.json" "$tmp/state-4.json"
MIGKIT_SIM_STATE=$tmp/state-4.json "$MIGKIT_SIM_BIN" fault set nvmlDeviceCreateGpuInstanceWithPlacement 3 INSUFFICIENT_RESOURCES >/dev/null
set +e
mk4 apply -f "$cfg" -c custom-4 >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "injected NVML error: exit $rc"
grep -q "failed to create a GPU instance" "$tmp/err" || fail "NVML error message: $(cat "$tmp/err")"
mk4 apply -f "$cfg" -c custom-4 >/dev/null
mk4 assert -f "$cfg" -c custom-4 >/dev/null || fail "not repaired"

# --mode-only and --skip-reset, from custom (GPU 6 has MIG off).
# --skip-reset with --mode-only requests the mode and succeeds (as upstream); it stays pending.
mk apply -f "$cfg" -c custom >/dev/null
"$MIGKIT_BIN" --simulate dgx-a100 apply -f "$cfg" -c all-disabled --mode-only --skip-reset >/dev/null 2>"$tmp/err" \
  || fail "mode-only skip-reset: $(cat "$tmp/err")"
grep -q "need a reset to change MIG mode, skipped (--skip-reset)" "$tmp/err" || fail "skip-reset warning: $(cat "$tmp/err")"
set +e
mk assert -f "$cfg" -c all-disabled --mode-only >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "pending mode counted as applied: exit $rc"
# Without --mode-only, a pending mode means the layout cannot be applied: an error.
set +e
mk apply -f "$cfg" -c all-balanced --skip-reset >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "skipped (--skip-reset)" "$tmp/err" || fail "skip-reset without mode-only: $(cat "$tmp/err")"
mk apply -f "$cfg" -c all-disabled --mode-only >/dev/null
mk assert -f "$cfg" -c all-disabled --mode-only >/dev/null || fail "mode-only"

# Invalid files through the binary: one line, file:line:column, exit 1.
printf 'version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"3g.20": 1}\n' >"$tmp/bad.yaml"
set +e
mk apply -f "$tmp/bad.yaml" >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "bad profile name: exit $rc"
grep -Eq "bad.yaml:6:[0-9]+: .*3g.20" "$tmp/err" || fail "bad profile name message: $(cat "$tmp/err")"
printf 'version: v1\nmig-configs:\n  a: [\n' >"$tmp/broken.yaml"
set +e
mk apply -f "$tmp/broken.yaml" >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -Eq "broken.yaml:[0-9]+:[0-9]+: " "$tmp/err" || fail "YAML syntax error: $(cat "$tmp/err")"
printf 'version: v2\nmig-configs: {}\n' | { mk apply -f - >/dev/null 2>"$tmp/err" && fail "v2 accepted" || true; }
grep -q "unknown version: v2" "$tmp/err" || fail "stdin config with a bad version: $(cat "$tmp/err")"

# A workload on a MIG device that must go is never killed: NVML refuses
# (IN_USE), apply fails naming it, the other GPUs still converge; once the
# process is gone, a re-run finishes. A workload on a kept device is left alone.
mk apply -f "$cfg" -c all-balanced >/dev/null
read -r gi ci < <("$MIGKIT_SIM_BIN" show --json | python3 -c '
import json,sys; g=json.load(sys.stdin)["gpus"][0]
x=[i for i in g["gpu_instances"] if i["profile_name"]=="2g.10gb"][0]; print(x["id"], x["compute_instances"][0]["id"])')
pid=$("$MIGKIT_SIM_BIN" process add --gpu 0 --gi "$gi" --ci "$ci" | grep -o '[0-9]\+' | tail -1)
set +e
mk apply -f "$cfg" -c all-3g >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "busy MIG device: exit $rc"
grep -q "GPU 0: failed to destroy compute instance .*In use by another client" "$tmp/err" || fail "busy message: $(cat "$tmp/err")"
"$MIGKIT_SIM_BIN" show --json | python3 -c '
import json,sys; s=json.load(sys.stdin)
assert s["gpus"][0]["processes"], "the workload was killed"
for g in s["gpus"][1:]:
    names = sorted(i["profile_name"] for i in g["gpu_instances"])
    assert names == ["3g.20gb", "3g.20gb"], (g["index"], names)'
"$MIGKIT_SIM_BIN" process remove --pid "$pid" >/dev/null
mk apply -f "$cfg" -c all-3g >/dev/null || fail "re-run after the workload ended"
mk assert -f "$cfg" -c all-3g >/dev/null || fail "all-3g not applied"
