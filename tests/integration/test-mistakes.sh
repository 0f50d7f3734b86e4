#!/usr/bin/env bash
# The natural mistakes of a new user get an error that says what is wrong and
# the way forward (issue 18): a state file of another simulated machine, an
# unknown machine name (one error, no lock files left), global options after
# the command, a config name typo or a missing -c (the configs listed, the
# closest named), an unknown key in config.yaml (the key, its position, the
# likely one), an unknown --debug-areas area, an unwritable generated-config
# path (the reason), plan after apply --skip-reset (the pending mode), and
# examples/hooks.yaml on a host without systemd (exit 0).
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-mistakes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY MIGKIT_SIM_STATE MIGKIT_SIM_MACHINE XDG_STATE_HOME \
      KUBECONFIG POD_NAMESPACE NODE_NAME CONFIG_FILE
export HOME=$tmp/home
mkdir -p "$HOME"
cfg=$MIGKIT_SOURCE_DIR/examples/config.yaml
# run CMD...: status in $rc, stdout in $tmp/out, stderr in $tmp/err
run() { rc=0; "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?; }
has() { grep -qF -- "$2" "$tmp/$1" || fail "$3: no '$2' in $1: $(head -c 600 "$tmp/$1")"; }

echo "--- --simulate against a MIGKIT_SIM_STATE of another machine: refused, both names and the path"
MIGKIT_SIM_STATE=$tmp/demo.json "$MIGKIT_SIM_BIN" create dgx-h100 >/dev/null
run env MIGKIT_SIM_STATE="$tmp/demo.json" "$MIGKIT_BIN" --simulate dgx-a100 profiles
[ "$rc" -eq 1 ] || fail "mismatch: exit $rc, want 1"
has err "dgx-a100" "mismatch"; has err "'dgx-h100'" "mismatch"; has err "$tmp/demo.json" "mismatch"
[ ! -s "$tmp/out" ] || fail "mismatch printed profiles: $(head -3 "$tmp/out")"
run env MIGKIT_SIM_STATE="$tmp/demo.json" "$MIGKIT_BIN" -q --simulate dgx-h100 profiles -i 0
[ "$rc" -eq 0 ] || fail "the state file's own machine: exit $rc: $(cat "$tmp/err")"

echo "--- an unknown machine: one error line, no lock files"
run "$MIGKIT_BIN" --simulate dgx-a10 profiles
[ "$rc" -eq 1 ] || fail "unknown machine: exit $rc"
has err "unknown machine 'dgx-a10'" "unknown machine"; has err "dgx-a100" "the known machines"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "unknown machine: more than one line: $(cat "$tmp/err")"
left=$(find "$HOME" -name '*.lock' -o -name '*.json' | head -3)
[ -z "$left" ] || fail "unknown machine left files: $left"

echo "--- global options after the command"
run "$MIGKIT_BIN" -q profiles --simulate dgx-a100 -i 0 -o json
[ "$rc" -eq 0 ] || fail "profiles --simulate X: exit $rc: $(cat "$tmp/err")"
has out '"name": "NVIDIA A100-SXM4-40GB"' "profiles --simulate X"
run "$MIGKIT_BIN" -q export --simulate=dgx-a100 --debug-areas nvml
[ "$rc" -eq 0 ] || fail "export --simulate=X --debug-areas: exit $rc: $(cat "$tmp/err")"
run "$MIGKIT_BIN" -q profiles --simulate
[ "$rc" -eq 2 ] && grep -q "option '--simulate' requires an argument" "$tmp/err" || fail "--simulate without value: $rc $(cat "$tmp/err")"

echo "--- --debug-areas with an unknown area: refused with the known ones"
run "$MIGKIT_BIN" --debug-areas nvmll --simulate dgx-a100 profiles
[ "$rc" -eq 2 ] || fail "--debug-areas nvmll: exit $rc"
has err "unknown area 'nvmll'" "--debug-areas"; has err "known: all, grpc, k8s, nvml" "--debug-areas"

echo "--- a config name typo: the closest and the list; a missing -c: the list"
run "$MIGKIT_BIN" -q --simulate dgx-a100 plan -f "$cfg" -c all-balance
[ "$rc" -ne 0 ] || fail "-c all-balance passed"
has err "selected mig-config not present: all-balance (did you mean 'all-balanced'? configs: all-disabled, all-enabled" "typo"
run "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$cfg"
[ "$rc" -ne 0 ] || fail "no -c passed"
has err "-c NAME, one of all-disabled, all-enabled" "missing -c"

echo "--- an unknown key: reported with its position and the likely one"
cat >"$tmp/typo.yaml" <<'YAML'
version: v1
mig-configs:
  mine:
    - devices: all
      mig-enable: true
      mig-devices:
        "1g.5gb": 7
YAML
run "$MIGKIT_BIN" -q --simulate dgx-a100 plan -f "$tmp/typo.yaml" -c mine
[ "$rc" -ne 0 ] || fail "mig-enable: passed"
has err "$tmp/typo.yaml:5:7" "the key's position"
has err "unexpected field: mig-enable (did you mean 'mig-enabled'?)" "unknown key"
! grep -q 'missing required field' "$tmp/err" || fail "unknown key reported as a missing one: $(cat "$tmp/err")"

echo "--- plan after apply --skip-reset: the mode change is still pending"
run "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$cfg" -c all-enabled --mode-only --skip-reset
[ "$rc" -eq 0 ] || fail "apply --mode-only --skip-reset: exit $rc: $(cat "$tmp/err")"
run "$MIGKIT_BIN" -q --simulate dgx-a100 plan -f "$cfg" -c all-enabled
has out "MIG disabled -> enabled (pending since an earlier apply, GPU reset needed)" "plan after --skip-reset"

echo "--- examples/hooks.yaml without systemd: an apply with nothing to do, and one with a mode change, exit 0"
if [ -d /run/systemd/system ]; then
  echo "(skipped: this host runs systemd)"
else
  hooks=$MIGKIT_SOURCE_DIR/examples/hooks.yaml
  run "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$cfg" -c all-disabled -k "$hooks"
  [ "$rc" -eq 0 ] || fail "hooks.yaml, nothing to do: exit $rc: $(cat "$tmp/err")"
  run "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$cfg" -c all-balanced -k "$hooks"
  [ "$rc" -eq 0 ] || fail "hooks.yaml, a mode change: exit $rc: $(cat "$tmp/err")"
fi

echo "--- an unwritable generated-config path: the reason, not 'Success'"
# shellcheck source=tests/integration/stub-apiserver.sh
. "$MIGKIT_SOURCE_DIR/tests/integration/stub-apiserver.sh"
write_kubeconfig "$tmp/kubeconfig" https://127.0.0.1:1
rc=0
timeout 5 "$MIGKIT_BIN" --simulate dgx-a100 manager -n node-1 --kubeconfig "$tmp/kubeconfig" \
  --generated-config-file "$tmp/no/such/dir/config.yaml" >"$tmp/out" 2>"$tmp/err" || rc=$?
grep -q "Cannot write the generated config" "$tmp/err" || fail "no warning for the generated config: $(head -5 "$tmp/err")"
! grep -q "Success" "$tmp/err" || fail "'Success' as the reason: $(grep Success "$tmp/err")"
grep "Cannot write the generated config" "$tmp/err" | grep -q "No such file or directory" ||
  fail "no reason: $(grep 'Cannot write' "$tmp/err")"
echo "PASS"
