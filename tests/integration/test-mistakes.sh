#!/usr/bin/env bash
# The natural mistakes of a new user get an error that says what is wrong and
# the way forward (issue 18): a state file of another simulated machine, an
# unknown machine name (one error, no lock files left), global options after
# the command, a config name typo or a missing -c (the configs listed, the
# closest named), an unknown key in config.yaml (the key, its position, the
# likely one), an unknown --debug-areas area, an unwritable generated-config
# path (the reason), plan after apply --skip-reset (the pending mode),
# examples/hooks.yaml on a host without systemd (exit 0); and (issue 17) a
# config selecting no GPU (upstream's exit codes), a GPU index listed twice
# (a warning), a hook name typo and an unparsable MIG_PARTED_* boolean; and
# (issue 28) -d/-q after the command, unknown options, a command taken for
# --simulate's machine, a missing -c or -f (one exit status), service typos,
# the GPU Operator names' help and --simulate, k8s-testenv typos, a bad
# KUBECONFIG.
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

echo "--- a config that selects no GPU of the node: assert fails as upstream's (exit 1), apply and"
echo "    assert --mode-only pass as upstream's; each names the filters and the GPUs present"
cat >"$tmp/h100-only.yaml" <<'YAML'
version: v1
mig-configs:
  h100-only:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
YAML
none="MIG config 'h100-only' selects no GPU of this node: device-filter 0x233010DE, devices all ($tmp/h100-only.yaml:4:7); GPUs present: 0-7 NVIDIA A100-SXM4-40GB (0x20B010DE"
run "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$tmp/h100-only.yaml"
[ "$rc" -eq 1 ] || fail "assert of a config selecting no GPU: exit $rc, want 1 (as mig-parted): $(cat "$tmp/out" "$tmp/err")"
has out "Assertion failure: selected configuration not currently applied ($none" "assert, no GPU selected"
run "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$tmp/h100-only.yaml" -o json
[ "$rc" -eq 1 ] || fail "assert -o json of a config selecting no GPU: exit $rc"
has out '"applied": false' "assert -o json, no GPU selected"; has out '"selects_no_gpu": "MIG config' "assert -o json"
run "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$tmp/h100-only.yaml" --mode-only
[ "$rc" -eq 0 ] || fail "assert --mode-only of a config selecting no GPU: exit $rc, want 0 (as mig-parted)"
has err "Warning: $none" "assert --mode-only, no GPU selected"
run "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$tmp/h100-only.yaml"
[ "$rc" -eq 0 ] || fail "apply of a config selecting no GPU: exit $rc, want 0 (as mig-parted): $(cat "$tmp/err")"
has err "Warning: $none" "apply, no GPU selected"

echo "--- a GPU index listed twice: accepted as upstream, with one located warning"
cat >"$tmp/twice.yaml" <<'YAML'
version: v1
mig-configs:
  twice:
    - devices: [0, 1, 0]
      mig-enabled: false
YAML
run "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$tmp/twice.yaml"
[ "$rc" -eq 0 ] || fail "devices [0, 1, 0]: exit $rc: $(cat "$tmp/err")"
has err "Warning: $tmp/twice.yaml:4:23: GPU index 0 is listed twice in 'devices' of mig-configs.twice[0]" "index twice"
[ "$(grep -c 'listed twice' "$tmp/err")" -eq 1 ] || fail "index twice: not one warning: $(cat "$tmp/err")"

echo "--- a hook name typo: refused at its position, with the likely name (upstream runs nothing)"
cat >"$tmp/hooks-typo.yaml" <<'YAML'
version: v1
hooks:
  pre-apply-configg:
    - command: /bin/true
YAML
run "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$cfg" -c all-disabled -k "$tmp/hooks-typo.yaml"
[ "$rc" -eq 1 ] || fail "hook typo: exit $rc, want 1"
has err "$tmp/hooks-typo.yaml:3:3: unknown hook 'pre-apply-configg' (did you mean 'pre-apply-config'?)" "hook typo"

echo "--- an unparsable MIG_PARTED_* boolean: refused with its name and value (upstream: the same)"
run env MIG_PARTED_SKIP_RESET=maybe "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$cfg" -c all-disabled
[ "$rc" -eq 2 ] || fail "MIG_PARTED_SKIP_RESET=maybe: exit $rc, want 2: $(cat "$tmp/err")"
has err "invalid MIG_PARTED_SKIP_RESET 'maybe'" "bad boolean"
run env MIG_PARTED_MODE_CHANGE_ONLY=2 "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-disabled
[ "$rc" -eq 2 ] || fail "MIG_PARTED_MODE_CHANGE_ONLY=2: exit $rc, want 2"
has err "invalid MIG_PARTED_MODE_CHANGE_ONLY '2'" "bad boolean"
run env MIG_PARTED_SKIP_RESET= MIG_PARTED_DEBUG=False "$MIGKIT_BIN" -q --simulate dgx-a100 assert -f "$cfg" -c all-disabled
[ "$rc" -eq 0 ] || fail "empty and False booleans: exit $rc: $(cat "$tmp/err")"

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
echo "--- -d, -q, --debug after the command: named as global options, with the way to the help"
for opt in -d -q --debug; do
  run "$MIGKIT_BIN" --simulate dgx-a100 profiles "$opt"
  [ "$rc" -eq 2 ] || fail "profiles $opt: exit $rc, want 2"
  has err "'$opt' is a global option: put it before the command (migkit $opt profiles" "profiles $opt"
  has err "Run 'migkit profiles --help' for usage." "profiles $opt"
done
echo "--- unknown options after profiles and device-plugin: the way to the help"
run "$MIGKIT_BIN" --simulate dgx-a100 profiles --jsn
[ "$rc" -eq 2 ] || fail "profiles --jsn: exit $rc"
has err "Run 'migkit profiles --help' for usage." "profiles --jsn"
! grep -q "global option" "$tmp/err" || fail "profiles --jsn called global: $(cat "$tmp/err")"
run "$MIGKIT_BIN" --simulate dgx-a100 device-plugin --mig-stratgy mixed
[ "$rc" -eq 2 ] || fail "device-plugin --mig-stratgy: exit $rc"
has err "Run 'migkit device-plugin --help' for usage." "device-plugin --mig-stratgy"

echo "--- device-plugin --retry-interval: a bad or too short duration is refused, naming it; a short one retries at its pace"
run "$MIGKIT_BIN" --simulate dgx-a100 device-plugin --retry-interval 10ms
[ "$rc" -eq 2 ] || fail "device-plugin --retry-interval 10ms: exit $rc"
has err "invalid --retry-interval '10ms'" "device-plugin --retry-interval 10ms"
has err "at least 100ms" "device-plugin --retry-interval 10ms"
MIGKIT_RETRY_INTERVAL=soon run "$MIGKIT_BIN" --simulate dgx-a100 device-plugin
[ "$rc" -eq 2 ] || fail "MIGKIT_RETRY_INTERVAL=soon: exit $rc"
has err "invalid --retry-interval 'soon'" "MIGKIT_RETRY_INTERVAL=soon"
# No NVML, not fatal: the failed start is tried again every 200 ms.
mkdir -p "$tmp/dp"
rc=0
MIGKIT_NVML_LIB=$tmp/none.so MIGKIT_RETRY_INTERVAL=200ms timeout 3 "$MIGKIT_BIN" device-plugin \
  --fail-on-init-error=false --device-plugin-path "$tmp/dp" --kubelet-socket= >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 124 ] || fail "device-plugin without NVML, --fail-on-init-error=false: exit $rc: $(head -c 600 "$tmp/err")"
has err "retrying in 0.2s" "retry interval 200ms"
tries=$(grep -c "Cannot start the device plugin" "$tmp/err" || true)
[ "$tries" -ge 5 ] || fail "retry interval 200ms: $tries tries in 3 s, want 5 or more: $(head -c 600 "$tmp/err")"

echo "--- a command where --simulate wants a machine: said so, with the machines; no machine made"
run "$MIGKIT_BIN" --simulate profiles
[ "$rc" -eq 2 ] || fail "--simulate profiles: exit $rc, want 2"
has err "--simulate takes a machine, and 'profiles' is a command: migkit --simulate MACHINE profiles" "--simulate profiles"
has err "dgx-a100, dgx-h100" "--simulate profiles: the machines"
[ "$(wc -l <"$tmp/err")" -le 3 ] || fail "--simulate profiles: $(wc -l <"$tmp/err") lines: $(cat "$tmp/err")"
[ ! -e "$HOME/.local/state/migkit/sim/profiles.json" ] || fail "--simulate profiles made a machine 'profiles'"
run "$MIGKIT_BIN" --simulate dgx-a100
[ "$rc" -eq 2 ] || fail "--simulate without a command: exit $rc"
has err "no command after --simulate dgx-a100" "--simulate without a command"

echo "--- a missing -c and a missing -f: the same exit status (2, a usage error), each says which flag"
for c in plan apply assert; do
  run "$MIGKIT_BIN" -q --simulate dgx-a100 "$c" -f "$cfg"
  [ "$rc" -eq 2 ] || fail "$c without -c: exit $rc, want 2"
  has err "missing required flag 'selected-config'" "$c without -c"
  run "$MIGKIT_BIN" -q --simulate dgx-a100 "$c" -c all-balanced
  [ "$rc" -eq 2 ] || fail "$c without -f: exit $rc, want 2"
  has err "missing required flags 'config-file'" "$c without -f"
done

echo "--- service typos: did you mean"
mkdir -p "$tmp/etc" "$tmp/state"
cp "$cfg" "$tmp/etc/config.yaml"
run env MIGKIT_ETC_DIR="$tmp/etc" MIGKIT_STATE_DIR="$tmp/state" "$MIGKIT_BIN" service selct all-balanced
[ "$rc" -eq 2 ] || fail "service selct: exit $rc"
has err "unknown service command 'selct' (did you mean 'select'?)" "service selct"
run env MIGKIT_ETC_DIR="$tmp/etc" MIGKIT_STATE_DIR="$tmp/state" "$MIGKIT_BIN" service select all-balance
[ "$rc" -eq 1 ] || fail "service select all-balance: exit $rc"
has err "has no config named 'all-balance' (did you mean 'all-balanced'?" "service select all-balance"
[ ! -e "$tmp/state/selected-config" ] || fail "service select all-balance selected it"

echo "--- gpu-feature-discovery: --help lists upstream's flags; --simulate points to migkit --simulate X labels"
gfd=$(dirname "$MIGKIT_BIN")/gpu-feature-discovery
[ -x "$gfd" ] || fail "no $gfd in the build tree"
run "$gfd" --help
[ "$rc" -eq 0 ] || fail "gpu-feature-discovery --help: exit $rc"
has out "--oneshot true|false [GFD_ONESHOT]" "gpu-feature-discovery --help"
has out "--sleep-interval VALUE [GFD_SLEEP_INTERVAL]" "gpu-feature-discovery --help"
has out "--mig-strategy VALUE [GFD_MIG_STRATEGY,MIG_STRATEGY]: migkit labels --mig-strategy" "gpu-feature-discovery --help"
run "$gfd" --simulate dgx-a100
[ "$rc" -eq 2 ] || fail "gpu-feature-discovery --simulate: exit $rc"
has err "migkit --simulate MACHINE labels" "gpu-feature-discovery --simulate"
has err "Run 'gpu-feature-discovery --help' for its flags." "gpu-feature-discovery --simulate"

echo "--- scripts/k8s-testenv strat: unknown command, the closest, briefly"
run "$MIGKIT_SOURCE_DIR/scripts/k8s-testenv" strat /tmp/k8s
[ "$rc" -eq 2 ] || fail "k8s-testenv strat: exit $rc"
has err "unknown command 'strat' (did you mean 'start'?)" "k8s-testenv strat"
[ "$(wc -l <"$tmp/err")" -le 3 ] || fail "k8s-testenv strat: $(wc -l <"$tmp/err") lines"

echo "--- a KUBECONFIG that does not exist: the message names the kubeconfig"
rc=0
KUBECONFIG=$tmp/nonexistent timeout 10 "$MIGKIT_BIN" --simulate dgx-a100 manager -n node-1 >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "manager with a missing KUBECONFIG: exit $rc: $(cat "$tmp/err")"
has err "kubeconfig (--kubeconfig or KUBECONFIG): Failed to open '$tmp/nonexistent'" "missing KUBECONFIG"
echo "PASS"
