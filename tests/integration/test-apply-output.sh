#!/usr/bin/env bash
# What `migkit apply` prints, on the simulator: the default rendering (the
# plan in a few lines, one line per GPU, a total), -v (every step), -d (the
# debug log) and -o json (one event per line). Compared line by line, with
# the durations masked, so that a change of the output fails here.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-apply-output.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY
export MIGKIT_SIM_STATE=$tmp/state.json
cfg=$MIGKIT_SOURCE_DIR/examples/config.yaml
mk() { "$MIGKIT_BIN" --simulate dgx-a100 "$@"; }
mask() { sed -E 's/[0-9]+\.[0-9] s\)/X s)/; s/in [0-9]+\.[0-9] s:/in X s:/'; }
expect() { # name, actual file, expected on stdin
  diff -u - "$2" >"$tmp/diff" || fail "$1 output changed:"$'\n'"$(cat "$tmp/diff")"
}

# Default: 12 lines for 8 GPUs, nothing on stderr.
mk apply -f "$cfg" -c all-balanced >"$tmp/out" 2>"$tmp/err"
[ ! -s "$tmp/err" ] || fail "default apply wrote to stderr: $(cat "$tmp/err")"
mask <"$tmp/out" >"$tmp/default.masked"
expect "default apply" "$tmp/default.masked" <<'OUT'
Plan for 'all-balanced': 8 of 8 GPUs change
  GPU 0-7: MIG disabled -> enabled (reset), create 2x 1g.5gb, 2g.10gb, 3g.20gb
Waiting for the reset of 8 GPUs ...
GPU 0: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 1: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 2: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 3: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 4: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 5: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 6: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
GPU 7: MIG enabled, 0 destroyed, 4 created, kept 0 (X s)
MIG configuration applied successfully in X s: 8 mode changes, 8 resets; MIG devices: 0 destroyed, 32 created, 0 kept
OUT

# Nothing to do: one line.
mk apply -f "$cfg" -c all-balanced >"$tmp/out" 2>"$tmp/err"
expect "no-op apply" "$tmp/out" <<'OUT'
Selected MIG configuration already applied, nothing to do
OUT

# A partial change: what is kept is counted; unchanged GPUs are grouped.
mk apply -f "$cfg" -c all-3g.20gb >"$tmp/out" 2>"$tmp/err"
mask <"$tmp/out" >"$tmp/out.masked"
expect "reconfiguring apply" "$tmp/out.masked" <<'OUT'
Plan for 'all-3g.20gb': 8 of 8 GPUs change
  GPU 0-7: destroy 3, create 3g.20gb, keep 1
GPU 0: 3 destroyed, 1 created, kept 1 (X s)
GPU 1: 3 destroyed, 1 created, kept 1 (X s)
GPU 2: 3 destroyed, 1 created, kept 1 (X s)
GPU 3: 3 destroyed, 1 created, kept 1 (X s)
GPU 4: 3 destroyed, 1 created, kept 1 (X s)
GPU 5: 3 destroyed, 1 created, kept 1 (X s)
GPU 6: 3 destroyed, 1 created, kept 1 (X s)
GPU 7: 3 destroyed, 1 created, kept 1 (X s)
MIG configuration applied successfully in X s: 0 mode changes, 0 resets; MIG devices: 24 destroyed, 8 created, 8 kept
OUT

# -v: the same lines plus every step, indented by four, in order.
rm -f "$MIGKIT_SIM_STATE"
mk apply -f "$cfg" -c all-balanced -v >"$tmp/v" 2>"$tmp/err"
[ ! -s "$tmp/err" ] || fail "apply -v wrote to stderr: $(cat "$tmp/err")"
grep -v '^    ' "$tmp/v" | mask | diff -u "$tmp/default.masked" - || fail "-v: the default lines differ"
[ "$(grep -c '^    GPU [0-7]: enabling MIG mode$' "$tmp/v")" -eq 8 ] || fail "-v: mode steps: $(cat "$tmp/v")"
[ "$(grep -c '^    GPU [0-7]: resetting (' "$tmp/v")" -eq 8 ] || fail "-v: reset steps"
[ "$(grep -c '^    GPU [0-7]: creating GPU instance ' "$tmp/v")" -eq 32 ] || fail "-v: GI steps"
[ "$(grep -c '^    GPU [0-7]: creating compute instance ' "$tmp/v")" -eq 32 ] || fail "-v: CI steps"
[ "$(grep -c '^GPU [0-7]: MIG enabled, 0 destroyed, 4 created, kept 0 (' "$tmp/v")" -eq 8 ] || fail "-v: GPU lines"
grep -q '^    GPU 3: creating compute instance 3g.20gb at 0:3 in GPU instance ' "$tmp/v" || fail "-v: CI line: $(cat "$tmp/v")"
tail -n 1 "$tmp/v" | grep -q '^MIG configuration applied successfully in ' || fail "-v: total"
# A GPU's line comes after its own steps.
awk '/^    GPU 5: creating/ {s=NR} /^GPU 5: / {g=NR} END {exit !(s && g > s)}' "$tmp/v" || fail "-v: GPU 5 line before its steps"

# -d: the debug log on stderr, klog format.
rm -f "$MIGKIT_SIM_STATE"
mk apply -f "$cfg" -c all-balanced -d >"$tmp/d" 2>"$tmp/d.err"
grep -Eq '^D[0-9]{4} [0-9:.]+ +[0-9]+ [a-z_-]+\.c:[0-9]+\] ' "$tmp/d.err" || fail "-d: no debug log: $(head "$tmp/d.err")"
grep -q '^    GPU 0: creating GPU instance' "$tmp/d" || fail "-d: steps not shown"

# -o json: one event per line, from backend and planned to done.
rm -f "$MIGKIT_SIM_STATE"
mk apply -f "$cfg" -c all-balanced -o json >"$tmp/j" 2>"$tmp/err"
[ ! -s "$tmp/err" ] || fail "apply -o json wrote to stderr: $(cat "$tmp/err")"
python3 - "$tmp/j" <<'PY' || fail "json events: $(head -c 2000 "$tmp/j")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
assert kinds[0] == "backend" and ev[0]["backend"] == "nvml", ev[0]
assert kinds[1] == "planned" and ev[1]["config"] == "all-balanced" and len(ev[1]["gpus"]) == 8, ev[1]
assert kinds[-1] == "done", ev[-1]
d = ev[-1]
assert d["success"] and not d["nothing_to_do"] and d["mode_changes"] == 8 and d["resets"] == 8, d
assert d["created_compute_instances"] == 32 and d["nvml_mutations"] == d["mutations"] > 0, d
steps = [e["step"] for e in ev if e["event"] == "step"]
assert steps.count("set-mode") == 8 and steps.count("reset") == 8, steps
assert steps.count("create-gpu-instance") == 32 and steps.count("create-compute-instance") == 32, steps
fin = [e for e in ev if e["event"] == "gpu-finished"]
assert [e["gpu"] for e in fin] == list(range(8)), fin
assert all(e["success"] and e["mode_changed"] and e["created"] == 4 and e["kept"] == 0 for e in fin), fin
assert kinds.count("waiting") == 1 and [e for e in ev if e["event"] == "waiting"][0]["for"] == "the reset of 8 GPUs"
assert all("t" in e for e in ev) and all(b["t"] >= a["t"] for a, b in zip(ev, ev[1:]))
PY

# A failure: the done event carries the error; stderr says it once.
set +e
mk apply -f "$cfg" -c no-such-config -o json >"$tmp/j" 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "unknown config: exit $rc"
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert d["event"] == "done" and not d["success"] and "no-such-config" in d["error"], d' "$tmp/j" \
  || fail "failed apply json: $(cat "$tmp/j")"
[ "$(grep -c '^Error: ' "$tmp/err")" -eq 1 ] || fail "failed apply stderr: $(cat "$tmp/err")"
echo "apply output: default, -v, -d and -o json as expected"
